"""Attacks of ``python -m deepedge.bench.isolation`` on the limits of what a job may hold:
memory across many processes, memory through the sandbox's tmpfs, and the disk of the
store's filesystem past the tenant's quota.

Each judges its own success from what it reached: the peak resident memory of all its
processes together against its ``mem_mb``, the tmpfs it filled against its ``mem_mb``,
and for the disk how far past its tenant's quota it wrote before it was stopped (never
stopped, or stopped only once its whole target was written, is a breach).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from deepedge.bench.isolation_attacks import Arena, JobAttack, Outcome, ProbeAttack, _number_over

MEM_MB = 256  # what the memory attacks declare
TMPFS_MEM_MB = 128
QUOTA_MB = 64  # the disk quota of the tenant of the disk attack (mallory)
DISK_TARGET_MB = 1024  # what the disk attack tries to write (16 times the quota)
REACTION_S = 1.0  # the collector counts every 0.1 s; the rest is room for a loaded host

# Fresh interpreters (no page shared with the parent) that each hold 64 MB; after each
# start, the anonymous memory of every process of the sandbox (its own pid namespace)
# together, from /proc: what the job held at once.
PROCESSES = """
import glob, subprocess, sys
def held_mb():
    total = 0
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            for line in open(status):
                if line.startswith("RssAnon:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024
hold = "import sys; b = b'x' * (64 << 20); print('held', flush=True); sys.stdin.read()"
kids = []
for _ in range(12):
    kid = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE)
    kids.append(kid)
    kid.stdout.readline()
    print(f"rss_mb={held_mb():.0f}", flush=True)
"""
TMPFS = """
import os
total = 0
for where in ("/tmp/fill", "/dev/shm/fill"):
    try:
        with open(where, "wb") as f:
            for _ in range(512):
                f.write(b"x" * (1 << 20)); f.flush(); total += 1
                print(f"tmpfs_mb={total}", flush=True)
    except OSError as e:
        print(e, flush=True)
"""
DISK = """
import os, time
written = 0
for n in range({target}):
    with open(f"fill-{{n}}", "wb") as f:
        f.write(b"x" * (1 << 20))
    written += 1
    print(f"t={{time.time():.3f}} written_mb={{written}}", flush=True)
"""


def _py(code: str, **resources: int) -> Any:
    def build(_arena: Arena) -> dict[str, Any]:
        return {"name": "attack", "kind": "command", "restart_limit": 0,
                "resources": resources, "spec": {"argv": [sys.executable, "-c", code]}}  # fmt: skip

    return build


def limit_attacks() -> list[JobAttack]:
    """Bob's jobs that try to hold more memory than they declared."""
    return [
        JobAttack(
            "hold past mem_mb in many processes",
            "resource exhaustion",
            True,
            _py(PROCESSES, mem_mb=MEM_MB),
            _number_over("rss_mb", MEM_MB),
        ),
        JobAttack(
            "fill /tmp and /dev/shm past mem_mb",
            "resource exhaustion",
            True,
            _py(TMPFS, mem_mb=TMPFS_MEM_MB, tmp_mb=1024),
            _number_over("tmpfs_mb", TMPFS_MEM_MB),
        ),
    ]


def _fill_the_disk(arena: Arena) -> Outcome:
    """Mallory (a tenant of her own, quota :data:`QUOTA_MB`: a tenant over its quota has
    all its jobs stopped) writes 1 MB files as fast as she can. Held when her job was
    stopped for the quota before it wrote its target, no later than :data:`REACTION_S`
    after her folder passed the quota."""
    manifest = _py(DISK.format(target=DISK_TARGET_MB), mem_mb=1024)(arena)
    with arena.client(arena.quota_token) as client:
        job = client.post("/v1/jobs", json=manifest).json()["id"]
        deadline = time.monotonic() + 120
        while (body := client.get(f"/v1/jobs/{job}").json())["status"] not in {
            "COMPLETED", "FAILED"
        } and time.monotonic() < deadline:  # fmt: skip
            time.sleep(0.2)
        log = client.get(f"/v1/jobs/{job}/logs").text
    points = [(float(t), int(mb)) for t, mb in
              (line[2:].split(" written_mb=") for line in log.splitlines()
               if line.startswith("t=") and " written_mb=" in line)]  # fmt: skip
    written = max((mb for _, mb in points), default=0)
    stopped = (body.get("error") or {}).get("code") == "DISK_QUOTA"
    if not stopped or written >= DISK_TARGET_MB:
        return Outcome(True, f"{body['status']} after {written} MB of a {QUOTA_MB} MB quota")
    crossed = next((t for t, mb in points if mb >= QUOTA_MB), None)
    late = crossed is not None and points[-1][0] - crossed > REACTION_S
    rate = written / max(points[-1][0] - points[0][0], 1e-3) if len(points) > 1 else 0.0
    return Outcome(late, f"stopped at {written} MB of a {QUOTA_MB} MB quota ({rate:.0f} MB/s)")


def limit_probes() -> list[ProbeAttack]:
    return [ProbeAttack("write past the tenant's disk quota", "resource exhaustion", True,
                        _fill_the_disk)]  # fmt: skip
