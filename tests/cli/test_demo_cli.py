"""``deepedge demo`` rejects bad input with one line and exit status 2, before starting Ray;
``--site``'s end (serve on or stop, fail or not) and its ports, without a site."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deepedge.cli import app
from deepedge.cli.demo_site_bounds import chosen_ports, story_ending
from deepedge.core.errors import ConflictError, InvalidInputError


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--image-folder", "does-not-exist"], "is not a folder"),
        (["--windows", "1"], "--windows"),
        (["--site", "--port", "70000"], "--port"),
        (["--site", "--data-plane-port", "-1"], "--data-plane-port"),
        (["--site", "--port", "8123", "--data-plane-port", "8123"], "both 8123"),
    ],
)
def test_bad_demo_input(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path), *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


URL, DATA = "http://127.0.0.1:8123", Path("/srv/site")


@pytest.mark.parametrize(
    ("told", "keep_serving", "serve_on", "fails", "says"),
    [
        (True, False, False, False, "the service stops now (--keep-serving keeps it)"),
        (True, True, True, False, f"still serving at {URL}/dashboard"),
        (False, False, False, True, ""),
        (False, True, True, True, f"did not finish in 40 windows; still serving at {URL}/"),
    ],
)
def test_keep_serving_serves_on_whatever_the_story_did(
    told: bool, keep_serving: bool, serve_on: bool, fails: bool, says: str
) -> None:
    ending = story_ending(told, keep_serving, 40, URL, DATA)
    assert ending.serve_on is serve_on
    assert (ending.failure is not None) is fails
    assert says in ending.line and "\n" not in ending.line
    assert ("until Ctrl-C" in ending.line) is serve_on
    if fails:
        assert ending.failure is not None and "did not finish in 40 windows" in ending.failure
        assert str(DATA / "server.log") in ending.failure


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def test_the_ports_given_are_used_and_zero_is_a_free_one(busy_port: int) -> None:
    api, data_plane = chosen_ports(0, 0)
    assert api != data_plane and api > 0 and data_plane > 0
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        free = int(sock.getsockname()[1])
    assert chosen_ports(free, 0)[0] == free
    assert chosen_ports(0, free)[1] == free
    with pytest.raises(ConflictError, match=f"port {busy_port} .* in use \\(--data-plane-port\\)"):
        chosen_ports(0, busy_port)
    with pytest.raises(ConflictError, match="--port"):
        chosen_ports(busy_port, 0)
    with pytest.raises(InvalidInputError, match="both"):
        chosen_ports(free, free)


def test_a_busy_port_stops_the_site_demo_before_it_starts(tmp_path: Path, busy_port: int) -> None:
    result = CliRunner().invoke(
        app, ["demo", "--site", "--out", str(tmp_path / "site"), "--port", str(busy_port)]
    )
    assert result.exit_code == 5
    assert f"port {busy_port} on 127.0.0.1 is in use (--port)" in result.output
    assert not (tmp_path / "site").exists()  # no store, no service
