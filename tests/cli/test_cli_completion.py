"""TAB completion of job ids and deployment names: asked of the service, silent offline."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import typer

from deepedge.cli import completion
from deepedge.cli.app import build_command

JOBS = {
    "jobs": [
        {"id": "3f23ad6c" + "0" * 24, "name": "update", "status": "RUNNING"},
        {"id": "9a00bb11" + "1" * 24, "name": "other", "status": "COMPLETED"},
    ]
}
DEPLOYMENTS = {
    "deployments": [
        {"name": "digits-line", "status": "SERVING"},
        {"name": "photos", "status": "STOPPED"},
    ]
}


def context(url: str | None = None, token: str | None = None) -> typer.Context:
    ctx = typer.Context(build_command("jobs"))
    ctx.params = {"url": url, "token": token}
    return ctx


def test_job_ids_and_deployment_names_are_offered_by_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = {"/v1/jobs": JOBS, "/v1/deployments": DEPLOYMENTS}
    monkeypatch.setattr(completion, "_ask", lambda ctx, path, **params: answers[path])
    assert completion.complete_job_ids(context(), "3f") == [("3f23ad6c", "update (RUNNING)")]
    whole = completion.complete_job_ids(context(), "3f23ad6c0")
    assert [value for value, _ in whole] == [JOBS["jobs"][0]["id"]]
    assert completion.complete_deployments(context(), "dig") == [("digits-line", "SERVING")]


@pytest.mark.parametrize("token", [None, "dpe_x"])
def test_offline_or_without_a_token_nothing_is_offered(token: str | None) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    assert completion.complete_job_ids(context(url, token), "") == []
    assert completion.complete_deployments(context(url, token), "") == []


def test_the_reference_arguments_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    """The completion functions are wired to the arguments that name jobs and deployments."""
    jobs = build_command("jobs").commands["status"]
    show = build_command("deployments").commands["show"]
    calls: list[str] = []

    def ask(ctx: Any, path: str, **params: Any) -> Any:
        calls.append(path)
        return {"/v1/jobs": JOBS, "/v1/deployments": DEPLOYMENTS}[path]

    monkeypatch.setattr(completion, "_ask", ask)
    for command in (jobs, show):
        argument = next(p for p in command.params if p.param_type_name == "argument")
        offered = argument.shell_complete(typer.Context(command), "")
        assert len(offered) == 2
    assert calls == ["/v1/jobs", "/v1/deployments"]
