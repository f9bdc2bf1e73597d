"""The command line starts without loading what only some commands use.

Structural guards, never timed: which modules a fresh interpreter has loaded after the CLI's
start, a ``--help``, a TAB completion, or the building of a client command (the operator
paid 0.9-1.3 s of CPU per call, and per TAB, while the planners, the agent and httpx were
imported by every command). ``python -m deepedge.bench.cli`` measures the CPU time.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from deepedge.cli import app
from deepedge.cli.app import COMMANDS, build_command

HEAVY = ("torch", "sklearn", "flaml", "pandas", "ray", "scipy", "highspy", "matplotlib",
         "numpy", "networkx", "httpx", "yaml", "asyncio",
         "deepedge.planning", "deepedge.runtime", "deepedge.learning", "deepedge.controlplane",
         "deepedge.service.store", "deepedge.api", "deepedge.sim", "deepedge.cluster")  # fmt: skip
# typer (0.2x) coerces parameters through pydantic adapters; the CLI reads plain values (a
# string, a number, a choice) itself (deepedge.cli.coercion), so neither a completion nor a
# client command that reads only such values loads it.
NOT_BEFORE_A_COMMAND_RUNS = ("pydantic",)
STARTUP = {"deepedge.cli.app", "deepedge.cli.coercion"}  # the app and how it reads values
CLIENT_GROUPS = ("jobs", "deployments", "models", "tokens", "context", "deploy", "version", "nodes")


def loaded_after(code: str, env: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Run ``code`` in a fresh interpreter; the heavy modules and the deepedge.cli modules
    it has loaded by then."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"heavy = [m for m in {HEAVY + NOT_BEFORE_A_COMMAND_RUNS!r} if m in sys.modules]\n"
        "cli = sorted(m for m in sys.modules if m.startswith('deepedge.cli.'))\n"
        "print('LOADED ' + json.dumps({'heavy': heavy, 'cli': cli}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, env={**os.environ, **(env or {})})  # fmt: skip
    lines = [line for line in out.stdout.splitlines() if line.startswith("LOADED ")]
    assert lines, out.stdout + out.stderr
    return dict(json.loads(lines[-1].removeprefix("LOADED ")))


def test_importing_the_cli_loads_no_heavy_library_and_no_command_module() -> None:
    loaded = loaded_after("import deepedge.cli.app, deepedge.cli")
    assert loaded["heavy"] == []
    assert set(loaded["cli"]) <= STARTUP, loaded["cli"]


RUN_MAIN = (
    "import sys\nfrom deepedge.cli import main\nsys.argv = ['deepedge', *{args!r}]\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
)


def test_help_lists_every_command_without_importing_one() -> None:
    loaded = loaded_after(RUN_MAIN.format(args=["--help"]))
    assert loaded["heavy"] == []
    assert set(loaded["cli"]) <= STARTUP, loaded["cli"]


@pytest.mark.parametrize(("words", "cword"), [("deepedge ", "1"), ("deepedge jobs st", "2")])
def test_completion_imports_only_what_it_completes(words: str, cword: str) -> None:
    env = {"_DEEPEDGE_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": cword}
    loaded = loaded_after(RUN_MAIN.format(args=[]), env)
    assert loaded["heavy"] == []
    wanted = {"deepedge.cli.app"} | ({"deepedge.cli.jobs"} if "jobs" in words else set())
    assert wanted <= set(loaded["cli"])
    assert not {"deepedge.cli.place", "deepedge.cli.agent", "deepedge.cli.profile"} & set(
        loaded["cli"]
    )


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "list", "--limit", "20", "--status", "running", "-o", "wide"],
        ["jobs", "status", "3f23ad6c"],
        ["deployments", "list", "-o", "json"],
    ],
)
def test_a_client_command_run_loads_no_heavy_library(args: list[str]) -> None:
    """The whole command run, against a port nothing listens on: its values read, the
    request refused, the error printed, and neither pydantic nor anything heavy loaded."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"DEEPEDGE_URL": f"http://127.0.0.1:{port}", "DEEPEDGE_TOKEN": "dpe_nobody"}
    code = (  # exit status 8: the service is unreachable (deepedge.core.errors)
        f"import sys\nfrom deepedge.cli import main\nsys.argv = ['deepedge', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 8, exc.code\n"
    )
    assert loaded_after(code, env)["heavy"] == []


@pytest.mark.parametrize("name", CLIENT_GROUPS)
def test_client_commands_load_no_heavy_library(name: str) -> None:
    """Every command of the group built (as its --help and its run do) and its argument
    parsed: nothing heavy is loaded."""
    code = (
        "from deepedge.cli.app import build_command\n"
        f"command = build_command({name!r})\n"
        "commands = getattr(command, 'commands', {})\n"
    )
    assert loaded_after(code)["heavy"] == []


def test_every_command_is_listed_with_the_first_sentence_of_its_help() -> None:
    """The summaries ``--help`` shows before a module is imported are the commands' own."""
    for name, entry in COMMANDS.items():
        command = build_command(name)
        assert command is not None, f"{name} is registered by none of {entry.modules}"
        assert command.get_short_help_str(limit=10_000) == entry.summary, name


def test_a_command_no_module_registers_is_refused_in_one_line() -> None:
    result = CliRunner().invoke(app, ["jbos", "list"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: No such command 'jbos'.")
    assert lines[0].endswith("(see deepedge --help)")
