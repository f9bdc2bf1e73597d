"""The attack suite of ``python -m deepedge.bench.isolation``: a hostile tenant (bob)
against a live service where another tenant (alice) keeps a secret.

Alice runs a job that holds her secret in its work folder and its log, and has a granted
folder with the secret in it too; the service's own environment holds a canary value; a
port of the host stands for the service's internal ports (its PostgreSQL, its Ray). Bob
knows every path and pid (the worst case) and tries, through every way tenant code enters
the service, to read, write, reach or exhaust what is not his. Each attack judges its own
success from what it left behind: a secret in its output, a file written on the host, a
connection accepted, a process gone, a limit passed.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from deepedge.api.local_server import ServerProcess
from deepedge.bench.harness.http import bearer

WAIT_S = 120.0


@dataclass(frozen=True)
class Outcome:
    breached: bool
    evidence: str


@dataclass
class HostPort:
    """A listening port of the host (the store's, Ray's): it counts who connects."""

    sock: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))
    accepted: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            self.accepted.append(str(peer))
            conn.close()


@dataclass
class Arena:
    """The live service, the two tenants and what the attacks aim at."""

    server: ServerProcess
    root: Path  # the bench's folder (the granted folders, the host files attacks aim at)
    victim_token: str
    attacker_token: str
    secret: str  # alice's
    canary: str  # in the service's environment
    victim_job: str = ""
    victim_work: Path = Path()
    victim_log: Path = Path()
    victim_grant: Path = Path()
    attacker_grant: Path = Path()
    host_port: HostPort = field(default_factory=HostPort)
    api_pid: int = 0  # the API process when the attacks began
    quota_token: str = ""  # mallory's: a tenant of a small disk quota (isolation_limits)

    @property
    def data_dir(self) -> Path:
        return self.server.settings.data_dir

    def client(self, token: str | None = None) -> httpx.Client:
        headers = bearer(token or self.attacker_token)
        return httpx.Client(base_url=self.server.url, headers=headers, timeout=60.0,
                            trust_env=False)  # fmt: skip

    def submit(self, manifest: dict[str, Any], token: str | None = None) -> httpx.Response:
        with self.client(token) as client:
            return client.post("/v1/jobs", json=manifest)

    def wait_ended(self, job_ids: list[str], timeout_s: float = WAIT_S) -> dict[str, str]:
        deadline = time.monotonic() + timeout_s
        statuses: dict[str, str] = {}
        with self.client() as client:
            while time.monotonic() < deadline:
                statuses = {j: client.get(f"/v1/jobs/{j}").json()["status"] for j in job_ids}
                if all(s in {"COMPLETED", "FAILED", "HALTED"} for s in statuses.values()):
                    break
                time.sleep(0.3)
        return statuses

    def log(self, job_id: str) -> str:
        with self.client() as client:
            return client.get(f"/v1/jobs/{job_id}/logs").text

    def host_file(self, name: str) -> Path:
        """A path on the host outside every sandbox's view (the bench's own folder)."""
        return self.root / "host" / name


# -- the attacks -----------------------------------------------------------------------


@dataclass(frozen=True)
class JobAttack:
    """Bob's ``command`` job: ``manifest`` builds it, ``judge`` reads what it did."""

    name: str
    entry: str
    quick: bool
    manifest: Callable[[Arena], dict[str, Any]]
    judge: Callable[[Arena, str, str], Outcome]  # (arena, job id, its log)


@dataclass(frozen=True)
class ProbeAttack:
    """An attack through the API (a workload checked at submission, a request)."""

    name: str
    entry: str
    quick: bool
    run: Callable[[Arena], Outcome]


Attack = JobAttack | ProbeAttack


def _sh(
    script: str, env: dict[str, str] | None = None, **fields: Any
) -> Callable[[Arena], dict[str, Any]]:
    def build(arena: Arena) -> dict[str, Any]:
        text = script.format(a=arena, py=sys.executable)
        return {"name": "attack", "kind": "command", "restart_limit": 0,
                "spec": {"argv": ["sh", "-c", text], "env": env or {}}, **fields}  # fmt: skip

    return build


def _py(
    code: str, env: dict[str, str] | None = None, **fields: Any
) -> Callable[[Arena], dict[str, Any]]:
    def build(_arena: Arena) -> dict[str, Any]:
        spec = {"argv": [sys.executable, "-c", code], "env": env or {}}
        return {"name": "attack", "kind": "command", "restart_limit": 0, "spec": spec, **fields}

    return build


def _exists(path: Path) -> Outcome:
    return Outcome(path.exists(), f"{path} written" if path.exists() else "")


def _found(marker: str, log: str, what: str) -> Outcome:
    return _found_any((marker,), log, what)


def _found_any(markers: tuple[str, ...], log: str, what: str) -> Outcome:
    found = any(m in log for m in markers)
    return Outcome(found, f"{what} in its log" if found else "")


def _secret_in_log(arena: Arena, _job: str, log: str) -> Outcome:
    return Outcome(arena.secret in log, "the secret in its log" if arena.secret in log else "")


def _seen(marker: str) -> Callable[[Arena, str, str], Outcome]:
    def judge(_arena: Arena, _job: str, log: str) -> Outcome:
        return Outcome(marker in log, f"{marker!r} in its log" if marker in log else "")

    return judge


def _host_file(name: str) -> Callable[[Arena, str, str], Outcome]:
    def judge(arena: Arena, _job: str, _log: str) -> Outcome:
        return _exists(arena.host_file(name))

    return judge


def last_words(log: str) -> str:
    """What an attack saw last (its log's last line of its own)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not ln.startswith("===")]
    return lines[-1] if lines else "(no output)"


def _tenant_minted(arena: Arena, _job: str, _log: str) -> Outcome:
    from deepedge.service.store import JobStore

    store = JobStore(arena.server.settings.url)
    try:
        names = {t.name for t in store.tenancy.all()}
    finally:
        store.dispose()
    return Outcome("evil" in names, "tenant 'evil' in the store" if "evil" in names else "")


def _service_alive(arena: Arena, _job: str, _log: str) -> Outcome:
    alive = psutil.pid_exists(arena.api_pid)
    return Outcome(not alive, "" if alive else f"the API process {arena.api_pid} was killed")


def _port_reached(arena: Arena, _job: str, log: str) -> Outcome:
    reached = bool(arena.host_port.accepted) or "CONNECTED" in log
    return Outcome(reached, "a host port accepted its connection" if reached else "")


def _number_over(label: str, limit: float) -> Callable[[Arena, str, str], Outcome]:
    """The job prints ``label=N``; over ``limit`` is a breach (a limit that did not hold)."""

    def judge(_arena: Arena, _job: str, log: str) -> Outcome:
        values = [float(line.split("=", 1)[1]) for line in log.splitlines()
                  if line.startswith(f"{label}=")]  # fmt: skip
        worst = max(values, default=0.0)
        return Outcome(worst > limit, f"{label}={worst:g} > {limit:g}" if worst > limit else
                       f"{label} reached {worst:g} of {limit:g}")  # fmt: skip

    return judge


API_CALL = """
import http.client, json, os, socket
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(os.environ["DEEPEDGE_URL"][5:])
def call(method, path, body=None):
    headers = {"Authorization": "Bearer " + os.environ["DEEPEDGE_TOKEN"],
               "Content-Type": "application/json"}
    c = Unix("localhost"); c.request(method, path, body=body and json.dumps(body), headers=headers)
    r = c.getresponse(); return r.status, r.read().decode()
"""


def _api_job(code: str) -> Callable[[Arena], dict[str, Any]]:
    return _py(API_CALL + code, api_access=True)


def job_attacks() -> list[JobAttack]:
    """Bob's command jobs (run together, judged once all ended)."""
    return [
        JobAttack(
            "read another tenant's work folder",
            "command job",
            True,
            _sh("cat {a.victim_work}/secret.txt"),
            _secret_in_log,
        ),
        JobAttack(
            "read another tenant's log",
            "command job",
            True,
            _sh("cat {a.victim_log}"),
            _secret_in_log,
        ),
        JobAttack(
            "read another tenant's granted folder",
            "command job",
            True,
            _sh("cat {a.victim_grant}/secret.txt"),
            _secret_in_log,
        ),
        JobAttack(
            "write into another tenant's work folder",
            "command job",
            True,
            _sh("echo pwned > {a.victim_work}/pwned-by-bob"),
            lambda a, j, log: _exists(a.victim_work / "pwned-by-bob"),
        ),
        JobAttack(
            "read the service's store",
            "command job",
            True,
            _sh("head -c 16 {a.data_dir}/service.db; ls -la {a.data_dir}"),
            _seen("SQLite format 3"),
        ),
        JobAttack(
            "read the host's /etc/passwd",
            "command job",
            True,
            _sh("cat /etc/passwd"),
            _seen("root:x:0:0"),
        ),
        JobAttack(
            "mint a tenant with the service's data folder",
            "command job",
            True,
            _sh(
                "{py} -c 'from deepedge.cli import main; main()' tenants create evil "
                "--max-cores 1000 --data-dir {a.data_dir}"
            ),
            _tenant_minted,
        ),
        JobAttack(
            "read the service's environment",
            "command job",
            True,
            _sh("env; cat /proc/1/environ | tr '\\0' '\\n'"),
            lambda a, j, log: _found(a.canary, log, "the service's canary"),
        ),
        JobAttack(
            "see the service's processes",
            "command job",
            True,
            _sh("cat /proc/[0-9]*/cmdline | tr '\\0' ' '"),
            _seen("deepedge.api.server"),
        ),
        JobAttack(
            "kill the API process",
            "command job",
            True,
            lambda a: _sh(f"kill -9 {a.api_pid}; sleep 1")(a),
            _service_alive,
        ),
        JobAttack(
            "connect to the API's TCP port",
            "service ports",
            True,
            lambda a: _py(
                f"import socket; socket.create_connection(('127.0.0.1', "
                f"{a.server.port}), 3); print('CONNECTED')"
            )(a),
            _seen("CONNECTED"),
        ),
        JobAttack(
            "connect to an internal port (store, Ray)",
            "service ports",
            True,
            lambda a: _py(
                f"import socket; socket.create_connection(('127.0.0.1', "
                f"{a.host_port.port}), 3); print('CONNECTED')"
            )(a),
            _port_reached,
        ),
        JobAttack(
            "create a user namespace and be root in it",
            "command job",
            True,
            _sh("unshare -Ur id; unshare -rn true && echo UNSHARED"),
            lambda a, j, log: _found_any(("uid=0", "UNSHARED"), log, "a namespace of its own"),
        ),
        JobAttack(
            "become root",
            "command job",
            True,
            _py("import os\ntry:\n os.setuid(0); print('ROOT')\nexcept OSError as e: print(e)"),
            _seen("ROOT"),
        ),
        JobAttack(
            "read another tenant's job with its own API token",
            "service ports",
            True,
            lambda a: _api_job(f"print('STATUS', call('GET', '/v1/jobs/{a.victim_job}')[0])")(a),
            _seen("STATUS 200"),
        ),
        JobAttack(
            "mint a lasting token with the job's token",
            "service ports",
            True,
            _api_job("print('STATUS', call('POST', '/v1/tokens', {'label': 'x'})[0])"),
            _seen("STATUS 201"),
        ),
        JobAttack(
            "keep the job's token after the job",
            "service ports",
            True,
            _api_job("print('TOKEN', os.environ['DEEPEDGE_TOKEN'])"),
            _token_outlives,
        ),
        JobAttack(
            "leave a link to /etc/passwd as the result",
            "symlinks",
            True,
            _sh("ln -s /etc/passwd $DEEPEDGE_RESULTS_DIR/result.json"),
            _download("result", "root:x:0:0"),
        ),
        JobAttack(
            "leave a link to the store as the result",
            "symlinks",
            True,
            _sh("ln -s {a.data_dir}/service.db $DEEPEDGE_RESULTS_DIR/result.json"),
            _download("result", "SQLite"),
        ),
        JobAttack(
            "leave a link to another tenant's log as the metrics",
            "symlinks",
            True,
            _sh("ln -s {a.victim_log} $DEEPEDGE_METRICS_FILE"),
            _download("metrics", "secret"),
        ),
        JobAttack(
            "load code into the service's processes (PYTHONPATH)",
            "environment",
            True,
            lambda a: _sh("true", env={"PYTHONPATH": str(a.attacker_grant)})(a),
            _host_file("pwned-by-pythonpath"),
        ),
        JobAttack(
            "fork without end",
            "resource exhaustion",
            False,
            _py(FORK_BOMB, resources={"max_processes": 64}),
            _number_over("forked", 64),
        ),
        JobAttack(
            "allocate past the memory limit",
            "resource exhaustion",
            True,
            _py("b = bytearray(1 << 30); print('allocated=1024')", resources={"mem_mb": 256}),
            _number_over("allocated", 256),
        ),
        JobAttack(
            "spin past the CPU-time limit",
            "resource exhaustion",
            False,
            _py(SPIN, resources={"cpu_time_s": 2}),
            _number_over("cpu_s", 7),
        ),
        JobAttack(
            "write a file past the size limit",
            "resource exhaustion",
            True,
            _py(BIG_FILE, resources={"max_file_mb": 1}),
            _number_over("written_mb", 1),
        ),
        JobAttack(
            "fill /tmp",
            "resource exhaustion",
            True,
            _py(FILL_TMP, resources={"tmp_mb": 16}),
            _number_over("tmp_mb", 16),
        ),
        JobAttack(
            "open files without end",
            "resource exhaustion",
            True,
            _py(OPEN_FILES, resources={"max_open_files": 32}),
            _number_over("opened", 32),
        ),
    ]


FORK_BOMB = """
import os, time
n = 0
try:
    while n < 10000:
        if os.fork() == 0:
            time.sleep(5); os._exit(0)
        n += 1
except OSError as e:
    print(e)
print(f"forked={n}", flush=True)
"""
SPIN = """
import time
shown = 0
while time.process_time() < 30:
    if time.process_time() >= shown + 1:
        shown += 1
        print(f"cpu_s={shown}", flush=True)
"""
BIG_FILE = """
mb = 0
try:
    with open("big", "wb") as f:
        for _ in range(64):
            f.write(b"x" * (1 << 20)); f.flush(); mb += 1
except OSError as e:
    print(e)
import os
print(f"written_mb={os.path.getsize('big') / (1 << 20)}", flush=True)
"""
FILL_TMP = """
mb = 0
try:
    with open("/tmp/fill", "wb") as f:
        for _ in range(256):
            f.write(b"x" * (1 << 20)); f.flush(); mb += 1
except OSError as e:
    print(e)
import os
print(f"tmp_mb={os.path.getsize('/tmp/fill') / (1 << 20)}", flush=True)
"""
OPEN_FILES = """
files = []
try:
    for i in range(5000):
        files.append(open(f"f{i % 10}", "a"))
except OSError as e:
    print(e)
print(f"opened={len(files)}", flush=True)
"""


def _token_outlives(arena: Arena, _job: str, log: str) -> Outcome:
    tokens = [line.split()[1] for line in log.splitlines() if line.startswith("TOKEN ")]
    if not tokens:
        return Outcome(False, "no token printed (the job had none)")
    with arena.client(tokens[0]) as client:
        status = client.get("/v1/jobs").status_code
    return Outcome(status == 200, f"its token answered {status} after the job ended")


def _download(what: str, marker: str) -> Callable[[Arena, str, str], Outcome]:
    def judge(arena: Arena, job: str, _log: str) -> Outcome:
        with arena.client() as client:
            body = client.get(f"/v1/jobs/{job}/{what}").text
        found = marker in body or (marker == "secret" and arena.secret in body)
        return Outcome(found, f"GET {what} answered through the link" if found else "")

    return judge
