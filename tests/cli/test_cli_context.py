"""Where the client commands find the service and its token: options and environment first,
then the context ``deepedge serve`` / ``demo --site`` write, with the token by reference."""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deepedge.cli import app, client
from deepedge.cli.client import connect
from deepedge.cli.context import (
    Context,
    context_path,
    export_lines,
    read_context,
    restore_context,
    write_context,
    write_token_file,
)
from deepedge.core.errors import DependencyUnavailableError, InvalidInputError, UnauthorizedError

runner = CliRunner()
CTX_URL = "http://127.0.0.1:41234"


@pytest.fixture
def listening() -> Iterator[str]:
    """The URL of a socket that accepts connections (something is there, no service)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def dead_url() -> str:
    """A loopback port nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A context naming CTX_URL and a token file holding ``tok-ctx``."""
    token_file = write_token_file(tmp_path / "t.token", "tok-ctx")
    write_context(Context(url=CTX_URL, token_file=str(token_file), written_by="test"))
    return token_file


@pytest.mark.parametrize(
    ("url", "token", "expected_url", "expected_token"),
    [
        (None, None, CTX_URL, "tok-ctx"),  # all from the context
        (None, "tok-opt", CTX_URL, "tok-opt"),  # only a token given: the context's URL
        (CTX_URL + "/", None, CTX_URL, "tok-ctx"),  # the same service: the context's token
        ("http://elsewhere:9", "tok-opt", "http://elsewhere:9", "tok-opt"),
    ],
)
def test_options_come_first_and_the_context_completes_them(
    saved: Path, url: str | None, token: str | None, expected_url: str, expected_token: str
) -> None:
    service = connect(url, token)
    assert (service.url, service.token) == (expected_url, expected_token)


def test_another_services_url_never_gets_the_contexts_token(saved: Path, listening: str) -> None:
    with pytest.raises(UnauthorizedError, match=f"no tenant token for {listening}"):
        connect(listening, None)


def test_without_context_nor_token_the_error_says_what_to_do(
    listening: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client, "DEFAULT_URL", listening)
    with pytest.raises(UnauthorizedError) as caught:
        connect(None, None)
    message = caught.value.message
    assert listening in message and "DEEPEDGE_TOKEN" in message and "--token" in message


def test_without_a_token_the_cli_fails_before_any_request(listening: str) -> None:
    """It said "cannot reach the service ... Illegal header value b'Bearer '" before."""
    result = runner.invoke(app, ["jobs", "list"], env={"DEEPEDGE_URL": listening})
    assert result.exit_code == 7
    assert "no tenant token" in result.stderr and "Illegal header" not in result.output


@pytest.mark.parametrize("token", [None, "tok"])
def test_a_dead_port_is_cannot_reach_with_or_without_a_token(token: str | None) -> None:
    """Without a token it said "no tenant token for http://127.0.0.1:1" before."""
    url = dead_url()
    if token is None:
        with pytest.raises(DependencyUnavailableError, match=f"cannot reach {url}"):
            connect(url, token)
    args = ["jobs", "list", "--url", url] + (["--token", token] if token else [])
    result = runner.invoke(app, args)
    assert result.exit_code == 8 and result.stderr.startswith(f"error: cannot reach {url} ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_context_show_works_offline(saved: Path) -> None:
    """It failed with "cannot reach" before: the context is worth seeing most when the
    service is down."""
    write_context(Context(url=dead_url(), token_file=str(saved), tenant="alice", written_by="t"))
    result = runner.invoke(app, ["context", "show"])
    assert result.exit_code == 0, result.output
    assert "offline" in result.stdout and "alice" in result.stdout
    wide = runner.invoke(app, ["context", "show", "-o", "wide"])
    assert str(saved) in wide.stdout and "written by" in wide.stdout
    assert str(saved) not in result.stdout  # -o wide adds rows
    document = json.loads(runner.invoke(app, ["context", "show", "-o", "json"]).stdout)
    assert document["online"] is False and document["context"]["tenant"] == "alice"


def test_a_token_file_is_private_and_the_context_holds_only_its_path(
    saved: Path, tmp_path: Path
) -> None:
    assert stat.S_IMODE(os.stat(saved).st_mode) == 0o600
    raw = context_path().read_text()
    assert "tok-ctx" not in raw and json.loads(raw)["token_file"] == str(saved)


def test_a_missing_token_file_is_named(saved: Path) -> None:
    saved.unlink()
    with pytest.raises(InvalidInputError, match=str(saved)):
        connect(None, None)


def test_restore_puts_back_the_previous_context_unless_it_changed(tmp_path: Path) -> None:
    first, _ = write_context(Context(url="http://a:1"))
    second, previous = write_context(Context(url="http://b:2"))
    restore_context(second, previous)
    assert read_context() == first
    # A context written meanwhile (a token saved for the service) is left alone.
    third, previous = write_context(Context(url="http://c:3"))
    write_context(Context(url="http://c:3", token_file=str(tmp_path / "x")))
    restore_context(third, previous)
    context = read_context()
    assert context is not None and context.token_file == str(tmp_path / "x")


def test_restore_removes_a_context_that_did_not_exist_before() -> None:
    written, previous = write_context(Context(url="http://a:1"))
    assert previous is None
    restore_context(written, previous)
    assert not context_path().exists()


def test_export_lines_point_another_shell_at_the_service(tmp_path: Path) -> None:
    lines = export_lines("http://127.0.0.1:5", tmp_path / "my token")
    assert lines[0] == "export DEEPEDGE_URL=http://127.0.0.1:5"
    assert lines[1] == f"export DEEPEDGE_TOKEN=\"$(cat '{tmp_path / 'my token'}')\""


def test_a_damaged_context_is_reported_not_guessed() -> None:
    context_path().parent.mkdir(parents=True, exist_ok=True)
    context_path().write_text("{not json")
    result = runner.invoke(app, ["jobs", "list"])
    assert result.exit_code == 2 and str(context_path()) in result.stderr


def test_context_set_and_clear(tmp_path: Path) -> None:
    token_file = write_token_file(tmp_path / "t", "tok")
    result = runner.invoke(
        app, ["context", "set", "--url", "http://h:1/", "--token-file", str(token_file)]
    )
    assert result.exit_code == 0, result.output
    context = read_context()
    assert context is not None and context.url == "http://h:1"
    assert context.token() == "tok"
    missing = runner.invoke(app, ["context", "set", "--url", "u", "--token-file", "/nope/x"])
    assert missing.exit_code == 2
    assert runner.invoke(app, ["context", "clear"]).exit_code == 0
    assert read_context() is None


def test_version_option_and_command() -> None:
    from deepedge import __version__

    answers = [runner.invoke(app, args) for args in (["--version"], ["version"])]
    assert all(a.exit_code == 0 for a in answers)
    assert answers[0].stdout == answers[1].stdout == f"deepedge {__version__}\n"


def test_shell_completion_is_offered() -> None:
    result = runner.invoke(app, ["--help"])
    assert "--install-completion" in result.stdout and "--show-completion" in result.stdout


@pytest.mark.parametrize(
    ("args", "whole"),
    [
        (["update", "--help"], "docs/schemas/workload.schema.json"),
        (["--help"], "Learned performance models (the planner's estimators, fitted"),
        (["nodes", "--help"], "the node registry of that Ray cluster instead"),
    ],
)
def test_help_is_wrapped_never_cut_at_80_columns(args: list[str], whole: str) -> None:
    result = runner.invoke(app, args, env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0
    flat = " ".join(result.stdout.split())
    assert whole in flat
    lines = [line for line in result.stdout.splitlines() if not line.startswith("Usage:")]
    assert "…" not in result.stdout and not any(line.endswith("...") for line in lines)
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_nodes_help_no_longer_promises_an_embedded_default() -> None:
    flat = " ".join(runner.invoke(app, ["nodes", "--help"]).stdout.split())
    assert "embedded" not in flat


def test_the_models_groups_are_split() -> None:
    models = " ".join(runner.invoke(app, ["models", "--help"]).stdout.split())
    perf = " ".join(runner.invoke(app, ["perfmodels", "--help"]).stdout.split())
    assert "versions" in models and "fit" not in models.split()
    assert {"fit", "report", "schemas"} <= set(perf.split()) and "versions" not in perf
