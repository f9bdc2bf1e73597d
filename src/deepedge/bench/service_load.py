"""Load generation for the service benchmark: an open-loop stream of mixed requests.

Latency is counted from each request's *scheduled* send time, so a stalled server cannot
hide queueing (no coordinated omission); the client is a minimal keep-alive HTTP/1.1
client so that it costs far less CPU than the server it measures.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from deepedge.api.local_server import ServerProcess
from deepedge.bench.harness.http import bearer
from deepedge.bench.harness.percentiles import PercentileMethod, percentile

LOAD_TOKEN = "tok-load"
CHEAP_JOB = {"name": "load", "kind": "command", "resources": {"cpus": 0.1, "mem_mb": 256},
             "spec": {"argv": ["true"]}}  # fmt: skip


@dataclass
class LoadResult:
    sent: int
    errors: int
    p50_ms: float
    p99_ms: float
    acked: int
    lost: int
    dup: int
    # How late the generator itself started requests (scheduled -> task running, before it
    # waits for a connection): if this is large, the client, not the server, is the limit.
    send_lag_p99_ms: float = float("nan")
    p99_ms_by_kind: dict[str, float] = field(default_factory=dict)  # submit / status / list


class RawHttp:
    """A minimal keep-alive HTTP/1.1 client: the load generator must cost far less CPU than
    the server it measures (httpx costs about as much per request as the server itself)."""

    def __init__(self, host: str, port: int, token: str, connections: int) -> None:
        self.host, self.port, self.token = host, port, token
        self.pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.Queue()
        )
        self.connections = connections

    async def open(self) -> None:
        for _ in range(self.connections):
            self.pool.put_nowait(await asyncio.open_connection(self.host, self.port))

    async def close(self) -> None:
        while not self.pool.empty():
            _, writer = self.pool.get_nowait()
            writer.close()

    async def request(self, method: str, path: str, body: bytes = b"",
                      extra: str = "") -> tuple[int, bytes]:  # fmt: skip
        reader, writer = await self.pool.get()
        try:
            head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
                    f"Authorization: Bearer {self.token}\r\nContent-Length: {len(body)}\r\n"
                    f"Content-Type: application/json\r\n{extra}\r\n")  # fmt: skip
            writer.write(head.encode() + body)
            status_line = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            payload = await reader.readexactly(length) if length else b""
            return int(status_line.split()[1]), payload
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
            writer.close()
            reader, writer = await asyncio.open_connection(self.host, self.port)
            raise
        finally:
            self.pool.put_nowait((reader, writer))


async def _load(
    url: str, rate_rps: float, duration_s: float
) -> tuple[list[float], int, list[str], list[float], dict[str, list[float]]]:
    latencies_ms: list[float] = []
    by_kind: dict[str, list[float]] = {"submit": [], "status": [], "list": []}
    send_lag_ms: list[float] = []
    errors = 0
    acked: list[str] = []
    rng = random.Random(7)
    host, port = url.removeprefix("http://").split(":")
    client = RawHttp(host, int(port), LOAD_TOKEN, connections=64)
    await client.open()
    body = json.dumps(CHEAP_JOB).encode()
    # Warm-up: one job so status requests always have a target.
    _, first = await client.request("POST", "/v1/jobs", body, "Idempotency-Key: w\r\n")
    acked.append(json.loads(first)["id"])

    async def one(i: int, scheduled: float) -> None:
        nonlocal errors
        send_lag_ms.append((time.perf_counter() - scheduled) * 1000.0)
        roll = rng.random()
        kind = "submit" if roll < 0.2 else "status" if roll < 0.7 else "list"
        try:
            if roll < 0.2:
                status, payload = await client.request(
                    "POST", "/v1/jobs", body, f"Idempotency-Key: k{i}\r\n"
                )
                if status in (200, 201):
                    acked.append(json.loads(payload)["id"])
            elif roll < 0.7:
                status, _ = await client.request("GET", f"/v1/jobs/{rng.choice(acked)}")
            else:
                status, _ = await client.request("GET", "/v1/jobs?limit=20")
            errors += int(status >= 400)
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
            errors += 1
        latencies_ms.append((time.perf_counter() - scheduled) * 1000.0)
        by_kind[kind].append(latencies_ms[-1])

    tasks = []
    start = time.perf_counter() + 0.1
    for i in range(int(rate_rps * duration_s)):
        scheduled = start + i / rate_rps
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, scheduled)))
    await asyncio.gather(*tasks)
    await client.close()
    return latencies_ms, errors, acked, send_lag_ms, by_kind


def all_job_ids(url: str, token: str) -> list[str]:
    ids: list[str] = []
    params: dict[str, Any] = {"limit": 500}
    with httpx.Client(base_url=url, headers=bearer(token), timeout=30, trust_env=False) as c:
        while True:
            page = c.get("/v1/jobs", params=params).json()
            ids += [j["id"] for j in page["jobs"]]
            if page["next_before"] is None:
                return ids
            params["before"], params["before_id"] = page["next_before"], page["next_before_id"]


def run_load(server: ServerProcess, rate_rps: float, duration_s: float) -> LoadResult:
    latencies, errors, acked, send_lag, by_kind = asyncio.run(
        _load(server.url, rate_rps, duration_s)
    )
    stored = all_job_ids(server.url, LOAD_TOKEN)
    rank = PercentileMethod.RANK  # a latency that was measured, never one between two
    return LoadResult(
        sent=len(latencies), errors=errors,
        p50_ms=percentile(latencies, 50, rank), p99_ms=percentile(latencies, 99, rank),
        acked=len(set(acked)), lost=len(set(acked) - set(stored)),
        dup=len(stored) - len(set(stored)), send_lag_p99_ms=percentile(send_lag, 99, rank),
        p99_ms_by_kind={k: percentile(v, 99, rank) for k, v in by_kind.items()},
    )  # fmt: skip
