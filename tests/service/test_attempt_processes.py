"""A stopped attempt leaves nothing running: the collector, its learner and what the learner
started (a private Ray's processes, a daemon) are gone after the stop, and the stop names
them. The learner-like tree here is real processes: a collector that forwards nothing and
exits at SIGTERM, a learner that ignores SIGTERM (a Ray driver busy in C), and two of the
learner's children: one in the session (a raylet) and one that left it (``setsid``, as a
daemon does), which no signal to the collector's process group reaches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from _support import wait_until
from deepedge.service.attempt_processes import snapshot
from deepedge.service.records import JobId, LearnerRecord
from deepedge.service.supervisor import Supervisor, process_start_time
from deepedge.service.workspace import JobDir

SLEEPER = "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); {setsid}" \
          "time.sleep(120)"  # fmt: skip
LEARNER = f"""
import os, signal, subprocess, sys, time, json
signal.signal(signal.SIGTERM, signal.SIG_IGN)
ray_like = subprocess.Popen([sys.executable, "-c", {SLEEPER.format(setsid="")!r}])
daemon = subprocess.Popen([sys.executable, "-c", {SLEEPER.format(setsid="os.setsid(); ")!r}])
with open(sys.argv[1] + ".tmp", "w") as out:
    json.dump({{"learner": os.getpid(), "ray_like": ray_like.pid, "daemon": daemon.pid}}, out)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""
COLLECTOR = """
import subprocess, sys, signal, os
learner = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # exits, forwarding nothing
learner.wait()
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def attempt(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int]]]:
    pids_file = tmp_path / "pids.json"
    collector = subprocess.Popen([sys.executable, "-c", COLLECTOR, LEARNER, str(pids_file)],
                                 start_new_session=True)  # fmt: skip
    assert wait_until(pids_file.exists, 30, 0.05), "the learner-like tree did not start"
    pids = {"collector": collector.pid, **json.loads(pids_file.read_text())}
    # the daemon has left the session before the stop begins
    assert wait_until(lambda: os.getsid(pids["daemon"]) == pids["daemon"], 30, 0.05)
    yield collector, pids
    for pid in pids.values():  # (only a failed test leaves any)
        if not _gone(pid):
            psutil.Process(pid).kill()
    collector.wait()


def test_a_stopped_attempt_leaves_no_process_and_names_each_one(
    tmp_path: Path, attempt: tuple[subprocess.Popen[bytes], dict[str, int]]
) -> None:
    collector, pids = attempt
    started = process_start_time(collector.pid)
    assert started is not None
    learner = LearnerRecord(JobId("job"), 0, 0, collector.pid, started, time.time())
    found = {seen.process.pid for seen in snapshot(collector.pid)}
    assert set(pids.values()) <= found
    stopped = Supervisor().stop(JobDir(tmp_path / "job"), learner, grace_s=0.5)
    collector.wait(10)
    assert [name for name, pid in pids.items() if not _gone(pid)] == []
    assert {p.pid for p in stopped} == set(pids.values())
    named = {p.pid: p.name for p in stopped}
    assert named[pids["learner"]].startswith("python")
    assert named[pids["collector"]].startswith("python")


def test_a_stop_of_an_attempt_already_gone_names_nothing(tmp_path: Path) -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    done.wait()
    learner = LearnerRecord(JobId("job"), 0, 0, done.pid, time.time() - 5, time.time())
    assert Supervisor().stop(JobDir(tmp_path / "job"), learner, grace_s=0.1) == []
