"""What bounds ``deepedge demo --site``: the ports it starts its service on, and how it
ends (:func:`story_ending`, pure)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from deepedge.core.errors import ConflictError, InvalidInputError


def free_port() -> int:
    """A port of 127.0.0.1 free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Ending:
    """What the demo does once its story is told or its windows are spent."""

    serve_on: bool  # the service (and the CLI's context) stays until Ctrl-C
    line: str  # what the demo says of it ("" when ``failure`` says it all)
    failure: str | None  # the run failed (the story did not finish): the error's message


def story_ending(told: bool, keep_serving: bool, windows: int, url: str,
                 data_dir: Path) -> Ending:  # fmt: skip
    """The demo's end (pure). ``keep_serving`` serves on whatever the story did; a story
    not told within ``windows`` windows fails the run, after the serving if any::

        told  keep_serving  ->  serve_on  failure
        yes   no                no        None
        yes   yes               yes       None
        no    no                no        the story's message
        no    yes               yes       the story's message (after Ctrl-C)
    """
    failure = None
    if not told:
        failure = (
            f"the story did not finish in {windows} windows (the drift not recovered, the "
            "first scene not served again, or the planted model not rolled back yet): see "
            f"{data_dir / 'server.log'} and the update job's log under {data_dir / 'jobs'}"
        )
    serving = f"still serving at {url}/dashboard, the camera going on, until Ctrl-C"
    if told and keep_serving:
        line = ("done: live requests, drift, update, canary, promotion and an automatic "
                f"rollback; {serving} (--keep-serving)")  # fmt: skip
    elif told:
        line = ("done: live requests, drift, update, canary, promotion and an automatic "
                "rollback; the service stops now (--keep-serving keeps it)")  # fmt: skip
    elif keep_serving:
        line = (f"the story did not finish in {windows} windows; {serving} (--keep-serving), "
                "then the run fails")  # fmt: skip
    else:
        line = ""
    return Ending(serve_on=keep_serving, line=line, failure=failure)


def chosen_ports(port: int, data_plane_port: int) -> tuple[int, int]:
    """The API's and the data plane's ports on loopback: those given (0: a free one each),
    checked free now so that a busy one is said at once, not as a service that exited."""
    if port and port == data_plane_port:
        raise InvalidInputError(
            f"--port and --data-plane-port are both {port}: give two ports",
            field="data_plane_port",
        )
    chosen = []
    for given, option in ((port, "--port"), (data_plane_port, "--data-plane-port")):
        if given == 0:
            chosen.append(free_port())
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", given))
            except OSError as exc:
                raise ConflictError(
                    f"port {given} on 127.0.0.1 is in use ({option}): stop what holds it or "
                    f"choose another {option} (0: a free one)"
                ) from exc
        chosen.append(given)
    return chosen[0], chosen[1]
