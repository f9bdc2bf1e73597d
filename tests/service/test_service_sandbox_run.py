"""Running deepedge modules on a tenant's inputs in its sandbox (SandboxRunner), and the
workload check that runs there (no tenant code in the service's processes)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deepedge.core.errors import InvalidInputError, TenantCodeError
from deepedge.core.limits import LearnerLimits
from deepedge.service.config import ServiceSettings
from deepedge.service.records import Tenant, TenantId
from deepedge.service.sandbox import Isolation, grant_problem
from deepedge.service.sandbox_run import SandboxRunner
from deepedge.service.workload_check import sandboxed_checker, ungranted


def _runner(tmp_path: Path, isolation: Isolation = Isolation.SANDBOX) -> SandboxRunner:
    return SandboxRunner.for_service(
        ServiceSettings(data_dir=tmp_path / "data", isolation=isolation)
    )


def _tenant(*grants: Path) -> Tenant:
    return Tenant(TenantId("t1"), "alice", 1, 1, 1.0, 0, uid=200_321,
                  grants=tuple(str(g) for g in grants))  # fmt: skip


@pytest.mark.parametrize("isolation", [Isolation.SANDBOX, Isolation.TRUSTED])
def test_a_module_reads_its_inputs_and_hands_back_what_it_wrote(
    tmp_path: Path, isolation: Isolation
) -> None:
    document = tmp_path / "doc.json"
    document.write_text('{"b": 1, "a": [1, 2]}')
    document.chmod(0o644)
    runner = _runner(tmp_path, isolation)
    with runner.run_module(_tenant(), "json.tool", ["--sort-keys", "../in/doc.json", "out.json"],
                           inputs={"doc.json": document}) as run:  # fmt: skip
        run.check()
        assert json.loads(run.output("out.json")) == {"a": [1, 2], "b": 1}
        folder = run.out_dir
    assert not folder.exists()  # removed once read


def test_tenant_code_in_a_run_sees_nothing_of_the_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVICE_SECRET", "canary-4711")
    runner = _runner(tmp_path)
    store = tmp_path / "data" / "service.db"
    store.parent.mkdir(exist_ok=True)
    store.write_text("the store")
    code = f"import os; print('uid', os.getuid(), dict(os.environ), os.path.exists({str(store)!r}))"
    with runner.run_module(_tenant(), "code", [], stdin=code.encode()) as run:
        out = run.stdout.decode()
    expected_uid = 200_321 if os.geteuid() == 0 else os.geteuid()
    assert f"uid {expected_uid} " in out
    assert "} False" in out  # the store is not there
    assert "canary-4711" not in out


@pytest.mark.parametrize(
    ("code", "problem"),
    [("import time; time.sleep(60)", "ran out of time"),
     ("raise SystemExit(3)", "exit code 3"),
     ("import os; os.kill(os.getpid(), 9)", "signal 9")],
)  # fmt: skip
def test_a_run_that_fails_says_how(tmp_path: Path, code: str, problem: str) -> None:
    runner = _runner(tmp_path)
    with (
        runner.run_module(
            _tenant(), "code", [], stdin=code.encode(), timeout_s=3.0, limits=LearnerLimits(2048)
        ) as run,
        pytest.raises(TenantCodeError, match=problem),
    ):
        run.check()


@pytest.mark.parametrize(
    "code",
    ["import subprocess, sys\nhold = \"b = b'x' * (100 << 20); import time; time.sleep(5)\"\n"
     "kids = [subprocess.Popen([sys.executable, '-c', hold]) for _ in range(3)]\n"
     "sys.exit(max(abs(k.wait()) for k in kids))",
     "for where in ('/tmp/a', '/dev/shm/b'):\n    open(where, 'wb').write(b'x' * (100 << 20))\n\n"],
    ids=["processes", "tmpfs"],
)  # fmt: skip
def test_a_run_past_its_memory_says_so(tmp_path: Path, code: str) -> None:
    """A module run for a tenant holds its ``mem_mb`` in all: processes and tmpfs pages
    (the module is Python's console: a block ends with a blank line)."""
    from deepedge.core import memory_cgroup

    if (reason := memory_cgroup.unavailable_reason()) is not None:
        pytest.skip(f"no memory cgroup: {reason}")
    runner = _runner(tmp_path)
    with (
        runner.run_module(
            _tenant(), "code", [], stdin=code.encode(), limits=LearnerLimits(160)
        ) as run,  # fmt: skip
        pytest.raises(TenantCodeError, match=r"memory limit 160 MB reached \(peak \d+ MB\)"),
    ):
        run.check()


def test_a_link_left_by_tenant_code_is_never_followed(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    code = "import os; os.symlink('/etc/passwd', 'result.json')"
    with runner.run_module(_tenant(), "code", [], stdin=code.encode()) as run:
        assert (run.out_dir / "result.json").is_symlink()
        with pytest.raises(OSError):
            run.output("result.json")


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"model": {"torchscript": "/srv/other/m.pt"}}, "model.torchscript"),
        ({"data": {"kind": "folder", "root": "/etc"}}, "data.root"),
        ({"data": {"kind": "csv", "manifest": "/srv/other/m.csv"}}, "data.manifest"),
        ({"python_path": ["/srv/mine/code", "/root"]}, "python_path.1"),
        ({"data": {"kind": "folder", "root": "/srv/mine/images"}}, None),
        ({"data": {"kind": "folder", "root": "/srv/mine/../other"}}, "data.root"),
        ({"data": {"kind": "folder", "root": "relative/images"}}, None),
    ],
)
def test_paths_outside_the_tenants_grants_are_named(
    document: dict[str, Any], field: str | None
) -> None:
    found = ungranted(document, _tenant(Path("/srv/mine")))
    assert (found[0] if found else None) == field


@pytest.mark.parametrize(
    ("path", "reason"),
    [("relative", "absolute"), ("/no/such/folder", "no such"), ("DATA", "data folder"),
     ("DATA/jobs", "data folder"), ("PARENT", "data folder"), ("OTHER", None)],
)  # fmt: skip
def test_a_grant_may_not_hold_or_lie_in_the_data_folder(
    tmp_path: Path, path: str, reason: str | None
) -> None:
    data, other = tmp_path / "data", tmp_path / "other"
    (data / "jobs").mkdir(parents=True)
    other.mkdir()
    chosen = path.replace("DATA", str(data)).replace("PARENT", str(tmp_path))
    chosen = chosen.replace("OTHER", str(other))
    problem = grant_problem(chosen, data)
    assert (problem is None) if reason is None else (reason in (problem or ""))


@pytest.mark.slow
def test_the_workload_check_runs_in_the_sandbox_and_names_the_field(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, user_workload: Callable[..., Path]
) -> None:
    """A good workload's summary comes back; a model entry point that is a shell command
    runs only inside the sandbox (the host file it names is never written)."""
    tmp_path.chmod(0o755)
    runner = SandboxRunner.for_service(ServiceSettings(data_dir=tmp_path_factory.mktemp("svc")))
    check = sandboxed_checker(runner, _tenant(tmp_path))
    good = check(str(user_workload()))
    assert good["classes"] == ["blue", "red"] and good["windows"] == 3
    planted = tmp_path_factory.mktemp("host") / "pwned"
    evil = json.loads(user_workload().read_text())
    evil["python_path"] = [str(tmp_path / "site")]
    evil["data"] = {"kind": "folder", "root": str(tmp_path / "images")}
    evil["model"] = {"entry_point": "os:system", "kwargs": {"command": f"touch {planted}"}}
    with pytest.raises(InvalidInputError) as info:
        check(evil)
    assert info.value.field == "model.entry_point"
    assert not planted.exists()
    with pytest.raises(InvalidInputError) as outside:
        check({**evil, "data": {"kind": "folder", "root": str(planted.parent)}})
    assert outside.value.field == "data.root" and "not in a folder granted" in outside.value.message


def test_a_grant_that_holds_the_data_folder_is_named_as_not_given(tmp_path: Path) -> None:
    """A workload under a grant that also holds the service's data folder is invisible in
    the sandbox: the answer names that grant and why, not a missing file."""
    from deepedge.service.workload_check import ungranted_message

    data = tmp_path / "service"
    data.mkdir()
    workload = tmp_path / "w.json"
    workload.write_text("{}")
    tenant = _tenant(tmp_path)
    assert ungranted(str(workload), tenant) is None  # the grant holds it on paper
    found = ungranted(str(workload), tenant, data)
    assert found == ("workload", str(workload))
    message = ungranted_message(*found, tenant, data)
    assert str(tmp_path) in message and "data folder" in message and "not given" in message
