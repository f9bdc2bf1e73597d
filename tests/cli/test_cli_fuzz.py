"""Every command's positional arguments given empty, blank, path-like, huge, non-ASCII and
number-like values: one ``error:`` line and a typed exit status, or success where the value
is valid; never a traceback (``deepedge jobs status ""`` printed 40 lines ending in
``KeyError: 'name'`` before).

The commands are enumerated from the app itself, so a new command is fuzzed without being
listed here. Against a port nothing listens on (fast), and against a real service with a
tenant (slow).
"""

from __future__ import annotations

import functools
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from deepedge.api.local_server import ServerProcess, make_tenant
from deepedge.cli import app
from deepedge.service.config import ServiceSettings
from deepedge.service.sandbox import Isolation

runner = CliRunner()
VALUES = ["", " ", "../x", "x" * 10_000, "ünïcødé ☃ 名前", "-1", "nan"]
# The typed errors' exit statuses (deepedge.core.errors) and click's usage error (2); 1 is
# an internal error, which no argument may cause.
TYPED = {2, 3, 4, 5, 6, 7, 8, 9}


@functools.cache
def leaf_commands() -> list[tuple[list[str], Any]]:
    """Every command of the app with its words (``["jobs", "status"]``)."""
    root = typer.main.get_command(app)
    found: list[tuple[list[str], Any]] = []

    def walk(group: Any, words: list[str]) -> None:
        ctx = typer.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if hasattr(command, "list_commands"):
                walk(command, [*words, name])
            elif command is not None:
                found.append(([*words, name], command))

    walk(root, [])
    return found


def arguments(command: Any) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "argument"]


def calls() -> list[tuple[list[str], int, str]]:
    """(command words, which argument, value) for every positional argument of every
    command and every fuzz value."""
    return [
        (words, index, value)
        for words, command in leaf_commands()
        for index in range(len(arguments(command)))
        for value in VALUES
    ]


def filler(param: Any) -> str:
    """A plausible value of another argument than the fuzzed one."""
    return "1" if param.type_descriptor.annotation is int else "x"


def invoke(words: list[str], index: int, value: str, env: dict[str, str]) -> Any:
    command = dict((tuple(w), c) for w, c in leaf_commands())[tuple(words)]
    params = arguments(command)
    args = [value if i == index else filler(p) for i, p in enumerate(params)]
    return runner.invoke(app, [*words, *args], env=env)


def check(result: Any, what: str) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{what}: {result.exception!r}"
    )
    assert "Traceback" not in result.output, what
    if result.exit_code == 0:
        return
    assert result.exit_code in TYPED, f"{what}: exit {result.exit_code}: {result.output[-300:]}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), f"{what}: {result.stderr!r}"


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A working folder deep in tmp_path (``../x`` stays inside it) and a service address
    nothing listens on."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return {"DEEPEDGE_URL": f"http://127.0.0.1:{port}", "DEEPEDGE_TOKEN": "dpe_nobody"}


def test_every_command_with_an_argument_is_fuzzed() -> None:
    fuzzed = {" ".join(words) for words, _, _ in calls()}
    assert {"jobs status", "deployments show", "tokens revoke", "tenants create"} <= fuzzed


@pytest.mark.slow
@pytest.mark.parametrize(("words", "index", "value"), calls(), ids=lambda v: str(v)[:20])
def test_an_argument_is_valid_or_one_error_line_offline(
    words: list[str], index: int, value: str, elsewhere: dict[str, str]
) -> None:
    result = invoke(words, index, value, elsewhere)
    check(result, f"deepedge {' '.join(words)} [{index}]={value[:20]!r}")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real service with one tenant (no jobs, no deployments)."""
    data = tmp_path_factory.mktemp("fuzz-service")
    settings = ServiceSettings(data_dir=data, isolation=Isolation.TRUSTED)
    make_tenant(settings, "fuzz", "dpe_fuzz-token")
    server = ServerProcess(settings)
    server.start()
    try:
        yield {"DEEPEDGE_URL": server.url, "DEEPEDGE_TOKEN": "dpe_fuzz-token"}
    finally:
        server.stop()


CLIENT = {"jobs", "deployments", "models", "tokens", "deploy", "context"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("words", "index", "value"),
    [c for c in calls() if c[0][0] in CLIENT],
    ids=lambda v: str(v)[:20],
)
def test_an_argument_is_valid_or_one_error_line_against_a_service(
    words: list[str],
    index: int,
    value: str,
    service: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke(words, index, value, service)
    check(result, f"deepedge {' '.join(words)} [{index}]={value[:20]!r}")


@pytest.mark.slow
def test_an_empty_job_id_is_bad_input_not_the_job_list(service: dict[str, str]) -> None:
    """``jobs status ""`` asked for /v1/jobs/ (the list) and failed on its missing name."""
    result = runner.invoke(app, ["jobs", "status", ""], env=service)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: job: expected a job id")
    listed = runner.invoke(app, ["jobs", "list", "-o", "json"], env=service)
    assert json.loads(listed.stdout)["jobs"] == []
