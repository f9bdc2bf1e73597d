"""The memory cgroup of a sandbox run: where it lies (v1 or v2), what it reads back, and on
this kernel a real child allocating memory or filling the sandbox's tmpfs, bounded by it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deepedge.core import memory_cgroup
from deepedge.core.limits import LearnerLimits
from deepedge.core.memory_cgroup import (
    GROUP_FOLDER,
    Hierarchy,
    Layout,
    MemoryCgroup,
    MemoryUsage,
    sweep_stale,
)
from deepedge.core.sandbox import group_members, pre_exec, spawn
from deepedge.service.records import Tenant, TenantId
from deepedge.service.sandbox import give_to_tenant, tenant_env, tenant_spec

HYBRID_CGROUP = "4:memory:/process_api/abc\n1:cpu:/\n0::/\n"
HYBRID_MOUNTS = (
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)
V2_CGROUP = "0::/user.slice/deepedge.service\n"
V2_MOUNTS = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def _tree(root: Path, controllers: dict[str, str]) -> Path:
    """Fake cgroup folders under ``root``: ``controllers`` maps a folder to its
    ``cgroup.controllers``."""
    for folder, text in controllers.items():
        path = root / folder.lstrip("/")
        path.mkdir(parents=True, exist_ok=True)
        (path / "cgroup.controllers").write_text(text)
    return root


@pytest.mark.parametrize(
    ("proc_cgroup", "mountinfo", "controllers", "expected"),
    [
        # this machine's shape: v1 memory, a unified hierarchy without the memory controller
        (HYBRID_CGROUP, HYBRID_MOUNTS, {"/sys/fs/cgroup/unified": "hugetlb"},
         (Layout.V1, "sys/fs/cgroup/memory/process_api/abc")),
        # pure v2 that offers memory to the service's cgroup
        (V2_CGROUP, V2_MOUNTS, {"/sys/fs/cgroup/user.slice/deepedge.service": "cpu memory pids"},
         (Layout.V2, "sys/fs/cgroup/user.slice/deepedge.service")),
        # v2 that does not, and no v1 memory hierarchy: none
        (V2_CGROUP, V2_MOUNTS, {"/sys/fs/cgroup/user.slice/deepedge.service": "cpu pids"},
         "no memory controller"),
        # hybrid whose unified hierarchy does offer memory: v2 wins
        (HYBRID_CGROUP, HYBRID_MOUNTS, {"/sys/fs/cgroup/unified": "memory"},
         (Layout.V2, "sys/fs/cgroup/unified")),
        # a v1 mount of a subtree (a container's): the path is taken relative to its root
        ("4:memory:/docker/abc/job\n",
         "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", {},
         (Layout.V1, "sys/fs/cgroup/memory/job")),
        # this process's cgroup outside the mounted subtree
        ("4:memory:/other\n",
         "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", {},
         "outside the mounted part"),
        ("", "", {}, "no memory cgroup hierarchy is mounted"),
    ],
)  # fmt: skip
def test_the_hierarchy_is_found_from_proc(
    tmp_path: Path,
    proc_cgroup: str,
    mountinfo: str,
    controllers: dict[str, str],
    expected: tuple[Layout, str] | str,
) -> None:
    found = Hierarchy.find(proc_cgroup, mountinfo, _tree(tmp_path, controllers))
    if isinstance(expected, str):
        assert isinstance(found, str) and expected in found
    else:
        assert isinstance(found, Hierarchy)
        assert (found.layout, found.own) == (expected[0], tmp_path / expected[1])
        assert found.runs == tmp_path / expected[1] / GROUP_FOLDER


@pytest.mark.parametrize(
    ("layout", "files", "expected"),
    [
        (Layout.V1, {"memory.max_usage_in_bytes": f"{300 << 20}\n",
                     "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"},
         MemoryUsage(256, 300.0, 2)),
        (Layout.V1, {"memory.max_usage_in_bytes": f"{10 << 20}\n",
                     "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"},
         MemoryUsage(256, 10.0, 0)),
        (Layout.V2, {"memory.peak": f"{256 << 20}\n", "memory.current": "0\n",
                     "memory.events": "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n"},
         MemoryUsage(256, 256.0, 1)),
        # no memory.peak (kernels before 5.19): the current figure
        (Layout.V2, {"memory.current": f"{64 << 20}\n", "memory.events": "oom 0\noom_kill 0\n"},
         MemoryUsage(256, 64.0, 0)),
    ],
)  # fmt: skip
def test_usage_is_read_back_in_either_layout(
    tmp_path: Path, layout: Layout, files: dict[str, str], expected: MemoryUsage
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    usage = MemoryCgroup(tmp_path, layout, 256).usage()
    assert usage == expected
    assert usage.limit_reached is (expected.oom_kills > 0)
    assert usage.reason() == f"memory limit 256 MB reached (peak {expected.peak_mb:.0f} MB)"


# -- on this kernel --------------------------------------------------------------------

UNAVAILABLE = memory_cgroup.unavailable_reason()
kernel = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no memory cgroup: {UNAVAILABLE}")

ALLOCATE = "import sys; b = b'x' * (int(sys.argv[1]) << 20); print('held', flush=True)"


@kernel
@pytest.mark.parametrize(
    ("allocate_mb", "limit_mb", "killed"), [(200, 64, True), (16, 64, False), (100, 160, False)]
)
def test_a_child_is_bounded_by_its_group(allocate_mb: int, limit_mb: int, killed: bool) -> None:
    group = MemoryCgroup.create(limit_mb)
    try:
        child = subprocess.run(
            [sys.executable, "-c", ALLOCATE, str(allocate_mb)], preexec_fn=group.enter,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        usage = group.usage()
    finally:
        group.remove()
    assert not group.path.exists()
    assert (child.returncode == -9) is killed, child.stderr
    assert ("held" in child.stdout) is not killed
    assert usage.limit_reached is killed
    assert usage.peak_mb <= limit_mb + 0.5
    if not killed:
        assert usage.peak_mb >= allocate_mb  # what it held was charged here


TENANT = Tenant(TenantId("cgtest"), "cgtest", 1, 1, 1.0, 0, uid=299_990)
FILL = """
import sys
done = 0
with open(sys.argv[1], "wb") as f:
    for _ in range(int(sys.argv[2])):
        f.write(b"x" * (1 << 20)); f.flush(); done += 1
        print(f"written_mb={done}", flush=True)
"""


@kernel
@pytest.mark.parametrize("where", ["/tmp/fill", "/dev/shm/fill"])
def test_the_sandboxs_tmpfs_pages_are_charged_to_its_group(tmp_path: Path, where: str) -> None:
    """A tenant writing 300 MB into a tmpfs of 1024 MB, in a group of 96 MB: the kernel
    stops it at the group's limit (the pages are in no address space: RLIMIT_AS cannot)."""
    work = tmp_path / "work"
    work.mkdir()
    tmp_path.chmod(0o755)
    give_to_tenant(TENANT, [work])
    spec = tenant_spec(TENANT, cwd=work, writable=[work], tmp_mb=1024)
    group = MemoryCgroup.create(96)
    try:
        child = spawn(
            spec, [sys.executable, "-c", FILL, where, "300"], env=tenant_env({}),
            limits=LearnerLimits(mem_mb=4096), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, cgroup=group,
        )  # fmt: skip
        out, _ = child.communicate(timeout=120)
        usage = group.usage()
    finally:
        group.remove()
    written = [int(line.split("=")[1]) for line in out.decode().split() if "written_mb=" in line]
    assert usage.limit_reached, out.decode()[-500:]
    assert max(written, default=0) < 96  # the interpreter's own pages are charged too
    assert usage.peak_mb <= 96.5


@kernel
def test_every_process_of_the_sandbox_is_in_the_group_from_its_start(tmp_path: Path) -> None:
    """bubblewrap joins before it executes: its processes, and those they start, are all
    in the group (the host sees them there)."""
    work = tmp_path / "work"
    work.mkdir()
    tmp_path.chmod(0o755)
    give_to_tenant(TENANT, [work])
    spec = tenant_spec(TENANT, cwd=work, writable=[work])
    group = MemoryCgroup.create(256)
    child = spawn(spec, ["sh", "-c", "sleep 30 & sleep 30"], env=tenant_env({}),
                  limits=LearnerLimits(mem_mb=4096), cgroup=group)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while len(group_members(child.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        members = set(group_members(child.pid))
        assert len(members) >= 3  # bubblewrap, the shell, its two sleeps
        assert members <= set(group.pids())
    finally:
        group.remove()  # kills what runs in it
        child.wait(timeout=10)
    assert not group.path.exists()


@kernel
def test_a_child_that_cannot_join_never_runs() -> None:
    group = MemoryCgroup.create(64)
    group.remove()
    with pytest.raises(subprocess.SubprocessError):
        subprocess.run(["true"], preexec_fn=pre_exec(LearnerLimits(mem_mb=64), group), check=False)


@kernel
def test_stale_groups_of_dead_creators_are_swept_and_live_ones_kept() -> None:
    """A crash leaves a group whose creator is gone (its name holds the creator's pid and
    start time): swept, with what still ran in it; a live creator's group stays."""
    live = MemoryCgroup.create(64)
    here = Hierarchy.here()
    # (Popen.wait, not os.waitpid: a reaper left by an earlier test in this process may
    # have collected the child already)
    dead = subprocess.Popen(["true"])
    dead.wait()
    dead_pid = dead.pid
    stale = here.runs / f"run-{dead_pid}-1-deadbeef"
    stale.mkdir()
    reused = here.runs / f"run-{os.getpid()}-1-0badf00d"  # this pid, another start time
    reused.mkdir()
    leftover = subprocess.Popen(["sleep", "60"])
    (stale / "cgroup.procs").write_text(str(leftover.pid))
    try:
        removed = sweep_stale(here)
        assert set(removed) == {stale, reused}
        # killed: -9, or 0 when another reaper collected it first (a `sleep 60` alive
        # would time out here)
        assert leftover.wait(timeout=10) in (-9, 0)
        assert live.path.exists()
    finally:
        live.remove()
        for path in (stale, reused):
            if path.exists():
                MemoryCgroup(path, here.layout, 0).remove()
