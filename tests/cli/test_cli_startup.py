"""The command line starts without loading what only some commands use.

Structural guards, never timed: which modules a fresh interpreter has loaded after the CLI's
start, a ``--help``, a TAB completion, or the building of a client command (the operator
paid 0.9-1.3 s of CPU per call, and per TAB, while the planners, the agent and httpx were
imported by every command). ``python -m deepedge.bench.cli`` measures the CPU time.
"""

from __future__ import annotations

import json
import os
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
# typer (0.2x) coerces a command's parameters through pydantic, so a command that runs loads
# it; importing the CLI and printing its help do not.
NOT_BEFORE_A_COMMAND_RUNS = ("pydantic",)
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
    assert set(loaded["cli"]) <= {"deepedge.cli.app"}, loaded["cli"]


RUN_MAIN = (
    "import sys\nfrom deepedge.cli import main\nsys.argv = ['deepedge', *{args!r}]\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
)


def test_help_lists_every_command_without_importing_one() -> None:
    loaded = loaded_after(RUN_MAIN.format(args=["--help"]))
    assert loaded["heavy"] == []
    assert set(loaded["cli"]) <= {"deepedge.cli.app"}, loaded["cli"]


@pytest.mark.parametrize(("words", "cword"), [("deepedge ", "1"), ("deepedge jobs st", "2")])
def test_completion_imports_only_what_it_completes(words: str, cword: str) -> None:
    env = {"_DEEPEDGE_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": cword}
    loaded = loaded_after(RUN_MAIN.format(args=[]), env)
    assert set(loaded["heavy"]) <= set(NOT_BEFORE_A_COMMAND_RUNS)
    wanted = {"deepedge.cli.app"} | ({"deepedge.cli.jobs"} if "jobs" in words else set())
    assert wanted <= set(loaded["cli"])
    assert not {"deepedge.cli.place", "deepedge.cli.agent", "deepedge.cli.profile"} & set(
        loaded["cli"]
    )


@pytest.mark.parametrize("name", CLIENT_GROUPS)
def test_client_commands_load_no_heavy_library(name: str) -> None:
    """Every command of the group built (as its --help and its run do) and its argument
    parsed: nothing heavy is loaded (typer itself may load pydantic to coerce values, so
    the whole command is not run here)."""
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
