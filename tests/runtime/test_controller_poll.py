"""The long poll that replicas follow the data-plane controller with."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from deepedge.runtime.serving import controller_poll
from deepedge.runtime.serving.controller_poll import ControllerPoll


class Controller:
    """Answers each ask from a script; an Exception in it is raised (the actor lost)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers, self.asked = answers, []

    async def ask(self, held: str, wait_s: float) -> tuple[str, str]:
        self.asked.append(held)
        if not self.answers:
            await asyncio.sleep(3600)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_applies_new_revisions_once_and_looks_the_controller_up_again(monkeypatch) -> None:
    first = Controller([("plan-a", "r1"), ("plan-b", "r2"), ("plan-b", "r2"),
                        RuntimeError("actor died")])  # fmt: skip
    second = Controller([("plan-c", "r3")])
    lookups = iter([first, second])
    monkeypatch.setattr(controller_poll.ray, "get_actor",
                        lambda name, namespace: next(lookups))  # fmt: skip
    monkeypatch.setattr(controller_poll, "RETRY_S", 0.0)
    monkeypatch.setattr(controller_poll.ray, "get",
                        lambda awaitable: asyncio.run(awaitable))  # fmt: skip
    poll = ControllerPoll("controller", "ns", lambda c, held, wait_s: c.ask(held, wait_s), "plan")
    assert poll.first() == ("plan-a",) and poll.revision == "r1"
    applied: list[str] = []

    async def apply(plan: str) -> None:
        applied.append(plan)

    async def run() -> None:
        task = asyncio.create_task(poll.follow(apply, 10.0))
        for _ in range(200):
            if applied == ["plan-b", "plan-c"]:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert applied == ["plan-b", "plan-c"]  # r2 answered twice, applied once
    assert first.asked == ["", "r1", "r2", "r2"] and second.asked[0] == "r2"
    assert poll.revision == "r3"
