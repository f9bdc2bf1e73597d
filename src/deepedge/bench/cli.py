"""What a command of the CLI costs before it does anything: CPU seconds per call.

``python -m deepedge.bench.cli [--runs N] [--src DIR]`` runs, each ``--runs`` times in a
fresh interpreter, exactly as the ``deepedge`` console script starts:

a. ``deepedge --help``;
b. a TAB completion of ``deepedge jo`` (``_DEEPEDGE_COMPLETE=complete_bash``,
   ``COMP_WORDS="deepedge jo"``, ``COMP_CWORD=1``), what the shell runs on every TAB;
c. ``deepedge jobs list`` against a real service on loopback (a child process, its own data
   folder, one tenant with three finished jobs), with the tenant's token.

Each figure is the median over the runs of the child's user + system CPU time
(``getrusage(RUSAGE_CHILDREN)``), which the other load of a shared machine inflates less
than wall time. ``--src`` measures another source tree's CLI (the commands import deepedge
from it; the service is this tree's).

Last line: ``RESULT help_cpu_s=... complete_cpu_s=... jobs_list_cpu_s=...``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from deepedge.bench.harness.report import machine_description, result_line, table

# The console script's start: argv[0] is the program's name (completion reads it).
LAUNCH = "import sys; sys.argv[0] = 'deepedge'; from deepedge.cli import main; sys.exit(main())"
COMPLETION = {"_DEEPEDGE_COMPLETE": "complete_bash", "COMP_WORDS": "deepedge jo",
              "COMP_CWORD": "1"}  # fmt: skip
JOBS = 3


def cpu_s(args: Sequence[str], env: Mapping[str, str]) -> tuple[float, str]:
    """The CPU seconds (user + system) of one ``deepedge ARGS`` and its standard output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", LAUNCH, *args], env=dict(env),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"deepedge {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used, done.stdout


def median_cpu_s(args: Sequence[str], env: Mapping[str, str], runs: int) -> tuple[float, str]:
    samples = [cpu_s(args, env) for _ in range(runs)]
    return statistics.median(s for s, _ in samples), samples[-1][1]


def submit_jobs(url: str, token: str, count: int) -> None:
    """``count`` short command jobs, waited for until they are all finished."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"}
    manifest = {"name": "bench-cli", "kind": "command", "resources": {"cpus": 0.5},
                "spec": {"argv": [sys.executable, "-c", "pass"]}}  # fmt: skip
    with httpx.Client(base_url=url, headers=headers, timeout=30, trust_env=False) as client:
        ids = [client.post("/v1/jobs", json=manifest).json()["id"] for _ in range(count)]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            states = {client.get(f"/v1/jobs/{i}").json()["status"] for i in ids}
            if states <= {"COMPLETED", "FAILED"}:
                return
            time.sleep(0.2)
    raise TimeoutError(f"the bench's {count} jobs did not finish in 120 s")


def measure(runs: int, src: Path) -> dict[str, float]:
    """The three medians (stages a, b, c of the module docstring)."""
    from deepedge.api.local_server import ServerProcess, make_tenant
    from deepedge.service.config import ServiceSettings
    from deepedge.service.sandbox import Isolation

    with tempfile.TemporaryDirectory(prefix="deepedge-bench-cli-") as folder:
        base = {**os.environ, "PYTHONPATH": str(src),
                "DEEPEDGE_CONTEXT": str(Path(folder) / "context.json")}  # fmt: skip
        base.pop("DEEPEDGE_URL", None)
        base.pop("DEEPEDGE_TOKEN", None)
        help_s, shown = median_cpu_s(["--help"], base, runs)
        assert "jobs" in shown, "deepedge --help did not list the jobs group"
        complete_s, offered = median_cpu_s([], {**base, **COMPLETION}, runs)
        assert "jobs" in offered.split(), f"completion of 'jo' offered {offered!r}"
        settings = ServiceSettings(data_dir=Path(folder) / "data", isolation=Isolation.TRUSTED)
        token = "dpe_bench-cli-token"
        make_tenant(settings, "bench", token)
        server = ServerProcess(settings)
        server.start()
        try:
            submit_jobs(server.url, token, JOBS)
            client = {**base, "DEEPEDGE_URL": server.url, "DEEPEDGE_TOKEN": token}
            list_s, listed = median_cpu_s(["jobs", "list"], client, runs)
            assert listed.count("bench-cli") == JOBS, f"jobs list printed {listed!r}"
        finally:
            server.stop()
    return {"help_cpu_s": help_s, "complete_cpu_s": complete_s, "jobs_list_cpu_s": list_s}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.cli", description=__doc__)
    parser.add_argument("--runs", type=int, default=7, help="calls per command (median)")
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(__file__).resolve().parents[2],
        help="the source tree whose CLI is measured (default: this one)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    values = measure(args.runs, args.src.resolve())
    print(f"machine: {machine_description()}; CLI from {args.src}; median of {args.runs} runs")
    rows: list[tuple[str, float]] = [
        ("deepedge --help", values["help_cpu_s"]),
        ("TAB: deepedge jo", values["complete_cpu_s"]),
        (f"deepedge jobs list ({JOBS} jobs)", values["jobs_list_cpu_s"]),
    ]
    print(table(["command", "CPU s"], [[name, f"{s:.3f}"] for name, s in rows]))
    print(result_line({k: round(v, 3) for k, v in values.items()}))


if __name__ == "__main__":
    main()
