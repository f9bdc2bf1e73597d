"""The camera against a stand-in endpoint: what its reports keep of every answer."""

from __future__ import annotations

import asyncio
import json
import struct
import time

import numpy as np
from aiohttp import web

from deepedge.dataplane.camera import CameraConfig, WindowReport, run_camera


async def _endpoint() -> tuple[web.AppRunner, int]:
    """An infer route that answers each image's first pixel as its class, by version 3."""

    async def infer(request: web.Request) -> web.Response:
        body = await request.read()
        header = int(request.headers["Inference-Header-Content-Length"])
        (pixel,) = struct.unpack("<f", body[header : header + 4])
        answer = {"model_version": "3", "outputs": [{"name": "label", "data": [int(pixel)]}],
                  "parameters": {"route": "serving"}}  # fmt: skip
        return web.Response(text=json.dumps(answer), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v2/models/{model}/infer", infer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


def _window(t: int) -> tuple[np.ndarray, np.ndarray]:
    """Image ``i`` of window ``t`` shows class ``i % 4``; its true label is ``i % 3``."""
    images = np.stack([np.full((1, 2, 2), i % 4, dtype=np.float32) for i in range(10)])
    return images, np.arange(10, dtype=np.int64) % 3


def test_the_camera_keeps_every_answer_with_its_image_and_label() -> None:
    async def scenario() -> list[WindowReport]:
        runner, port = await _endpoint()
        try:
            config = CameraConfig(f"http://127.0.0.1:{port}", "t.m", "key", rate=20.0,
                                  window_s=0.5, windows=2, first_window=5,
                                  keep_answers=True)  # fmt: skip
            return list(await run_camera(config, _window))
        finally:
            await runner.cleanup()

    began = time.time()
    reports = asyncio.run(scenario())
    assert [r.window for r in reports] == [5, 6]
    for report in reports:
        answers = report.answers
        assert len(answers) == report.answered == report.sent == 10
        assert sorted(a.index for a in answers) == list(range(10))  # each image sent once
        assert all(a.label == a.index % 3 and a.predicted == a.index % 4 for a in answers)
        assert all(a.version == "3" and began <= a.sent_at <= a.at <= time.time()
                   for a in answers)  # fmt: skip
        right = sum(a.predicted == a.label for a in answers)
        assert report.correct == right


def test_a_camera_keeps_no_answers_unless_asked() -> None:
    async def scenario() -> list[WindowReport]:
        runner, port = await _endpoint()
        try:
            config = CameraConfig(f"http://127.0.0.1:{port}", "t.m", "key", rate=20.0,
                                  window_s=0.5, windows=1)  # fmt: skip
            return list(await run_camera(config, _window))
        finally:
            await runner.cleanup()

    (report,) = asyncio.run(scenario())
    assert report.answered == 10 and report.answers == []
