"""The served-model check: the models deepedge trains pass; every way a graph could touch
the host, run a tenant's code, or make its work depend on the input is refused."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from deepedge.core.errors import InvalidInputError, UnsafeModelError
from deepedge.dataplane.served_graph import (
    MAX_ELEMENTS_PER_SAMPLE,
    GraphSession,
    check_graph,
)
from deepedge.learning.export import export_onnx
from deepedge.learning.models import make_edge_model
from deepedge.learning.resnet import make_resnet
from deepedge.learning.small_models import make_bn_cnn, make_mlp

OPSET = [helper.make_opsetid("", 17)]


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto] | None = None,
    outputs: list[onnx.ValueInfoProto] | None = None,
    initializers: list[onnx.TensorProto] | None = None,
    opsets: list[onnx.OperatorSetIdProto] | None = None,
) -> bytes:
    graph = helper.make_graph(
        nodes, "g",
        inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        initializer=initializers or [],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=opsets or OPSET)
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _linear(extra: list[onnx.NodeProto] | None = None, source: str = "x") -> bytes:
    """``y = source @ W`` with W [4, 2] stored in the file."""
    weight = numpy_helper.from_array(np.ones((4, 2), np.float32), "W")
    return _model([*(extra or []), helper.make_node("MatMul", [source, "W"], ["y"])],
                  initializers=[weight])  # fmt: skip


@pytest.mark.parametrize(
    ("name", "make", "shape", "classes"),
    [
        ("edge CNN", lambda: make_edge_model(10, 16, 8), (1, 16, 16), 10),
        ("BatchNorm CNN", lambda: make_bn_cnn(3, 3, width=4, blocks=2), (3, 12, 12), 3),
        ("tabular MLP", lambda: make_mlp(30, 2), (30,), 2),
        ("GroupNorm ResNet-18", lambda: make_resnet(4, 32, 16), (3, 32, 32), 4),
    ],
)
def test_deepedges_models_export_to_an_accepted_graph_that_answers_alike(
    name: str, make: Callable[[], nn.Module], shape: tuple[int, ...], classes: int
) -> None:
    model = make().eval()
    example = torch.rand(3, *shape)
    data = export_onnx(model, example)
    facts = check_graph(data, shape, classes)
    assert facts.nodes > 0 and facts.parameters > 0 and facts.gflop_per_sample > 0
    session = GraphSession(data, shape, classes, threads=2)
    with torch.no_grad():
        expected = model(example).numpy()
    assert np.allclose(session.run(example.numpy()), expected, atol=1e-4, rtol=1e-3), name
    assert session.predict(example.numpy()).tolist() == expected.argmax(axis=1).tolist()
    assert session.threads == 2 and session.device == "cpu"


def test_the_batch_stays_free() -> None:
    data = export_onnx(make_edge_model(10, 16, 8).eval(), torch.rand(2, 1, 16, 16))
    session = GraphSession(data, (1, 16, 16), 10)
    for n in (1, 7, 33):
        assert session.run(np.zeros((n, 1, 16, 16), np.float32)).shape == (n, 10)


class _ReadsAFile(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x[0, 0] == 123.0):
            return torch.from_file("/etc/hostname", size=2, dtype=torch.uint8).float() + x
        return x


def test_a_model_that_reads_files_is_not_served() -> None:
    """Exported in the tenant's sandbox, the file read becomes a branch the check refuses
    (or has no export at all); either way nothing of it runs in the service."""
    try:
        data = export_onnx(torch.jit.script(_ReadsAFile()), torch.rand(2, 2))
    except InvalidInputError as exc:
        assert "cannot be exported" in exc.message
        return
    with pytest.raises(UnsafeModelError, match=r"sub-graph|allowed set"):
        check_graph(data, (2,), 2)


def _external_data_model(secret: Path) -> onnx.ModelProto:
    """A graph whose weight is 'stored' in another file: the attack on a service that loads
    a tenant's graph from a path."""
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 2])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", secret.name), ("offset", "0"), ("length", "32")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        initializer=[weight],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=OPSET)
    model.ir_version = 8
    return model


def test_data_outside_the_file_is_refused_though_onnx_runtime_would_read_it(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret.token"
    secret.write_bytes(np.arange(8, dtype=np.float32).tobytes())
    model = _external_data_model(secret)
    on_disk = tmp_path / "evil.onnx"
    on_disk.write_bytes(model.SerializeToString())
    # the attack is real: a runtime given the path reads the file beside it into the answer
    # (ONNX Runtime itself refuses absolute and escaping locations, not a neighbour)
    leaked = ort.InferenceSession(str(on_disk), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.eye(4, dtype=np.float32)}
    )[0]
    assert leaked.ravel().tolist() == list(range(8))
    with pytest.raises(UnsafeModelError, match="outside the file"):
        check_graph(model.SerializeToString(), (4,), 2)


def _loop_body() -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Identity", ["v"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, ["batch", 4])],
    )  # fmt: skip


def _function_model() -> bytes:
    twice = [helper.make_node("Add", ["a", "a"], ["b"])]
    function = helper.make_function("local", "Twice", ["a"], ["b"], twice, OPSET)
    graph = helper.make_graph(
        [helper.make_node("Twice", ["x"], ["t"], domain="local"),
         helper.make_node("MatMul", ["t", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        initializer=[numpy_helper.from_array(np.ones((4, 2), np.float32), "W")],
    )  # fmt: skip
    model = helper.make_model(graph, functions=[function],
                              opset_imports=[*OPSET, helper.make_opsetid("local", 1)])  # fmt: skip
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _torchscript_bytes() -> bytes:
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(nn.Linear(4, 2)), buffer)
    return buffer.getvalue()


BIG = MAX_ELEMENTS_PER_SAMPLE  # a static Expand past the elements bound
REFUSED: list[tuple[str, Callable[[], bytes], str]] = [
    ("garbage", lambda: b"\x08\x07not a model at all", "not an ONNX model"),
    ("a TorchScript archive", _torchscript_bytes, "not an ONNX model"),
    ("a custom operator domain", lambda: _model(
        [helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft"),
         helper.make_node("MatMul", ["g", "W"], ["y"])],
        initializers=[numpy_helper.from_array(np.ones((4, 2), np.float32), "W")],
        opsets=[*OPSET, helper.make_opsetid("com.microsoft", 1)]), "domain"),
    ("a string operator", lambda: _linear(
        [helper.make_node("RegexFullMatch", ["x"], ["r"], pattern="a")]), "allowed set"),
    ("a model-local function", _function_model, "domain 'local'"),
    ("a loop", lambda: _linear([
        helper.make_node("Constant", [], ["n"],
                         value=helper.make_tensor("n", TensorProto.INT64, [], [10**12])),
        helper.make_node("Constant", [], ["c"],
                         value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
        helper.make_node("Loop", ["n", "c", "x"], ["looped"], body=_loop_body())], "looped"),
     "allowed set"),
    ("a shape read from the input's values", lambda: _linear([
        helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64),
        helper.make_node("ReduceMax", ["xi"], ["m"], keepdims=0),
        helper.make_node("Constant", [], ["zero"],
                         value=helper.make_tensor("z", TensorProto.INT64, [1], [0])),
        helper.make_node("Unsqueeze", ["m", "zero"], ["m1"]),
        helper.make_node("Concat", ["m1", "m1"], ["shape"], axis=0),
        helper.make_node("ConstantOfShape", ["shape"], ["huge"]),
        helper.make_node("ReduceSum", ["huge"], ["s"], keepdims=0),
        helper.make_node("Add", ["x", "s"], ["xs"])], "xs"), "known only at run time"),
    ("values as output shape (NonZero)", lambda: _linear([
        helper.make_node("NonZero", ["x"], ["nz"])]), "allowed set"),
    ("a static Expand past the bound", lambda: _linear([
        helper.make_node("Constant", [], ["shape"],
                         value=helper.make_tensor("s", TensorProto.INT64, [3], [BIG, 1, 4])),
        helper.make_node("Expand", ["x", "shape"], ["wide"]),
        helper.make_node("ReduceMean", ["wide"], ["xm"], axes=[0], keepdims=0),
    ], "xm"), "elements per sample"),
    ("a second input", lambda: _model(
        [helper.make_node("Add", ["x", "z"], ["s"]), helper.make_node("MatMul", ["s", "W"], ["y"])],
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
                helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 4])],
        initializers=[numpy_helper.from_array(np.ones((4, 2), np.float32), "W")]),
     "2 inputs"),
    ("another input shape than the sidecar's", lambda: _model(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        initializers=[numpy_helper.from_array(np.ones((3, 2), np.float32), "W")]),
     "is not \\[batch, 4\\]"),
    ("another class count", lambda: _model(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        initializers=[numpy_helper.from_array(np.ones((4, 3), np.float32), "W")]),
     "is not \\[batch, 2\\]"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "build", "reason"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_graph_that_is_not_data_is_refused(
    name: str, build: Callable[[], bytes], reason: str
) -> None:
    with pytest.raises(UnsafeModelError, match=reason) as caught:
        check_graph(build(), (4,), 2)
    assert caught.value.http_status == 422 and caught.value.fields["reason"]


def test_the_plain_linear_graph_the_refusals_start_from_is_accepted() -> None:
    """(So each refusal above is the one change it makes, not the base graph.)"""
    facts = check_graph(_linear(), (4,), 2)
    assert facts.ops == ("MatMul",)
    assert (
        GraphSession(_linear(), (4,), 2).run(np.ones((3, 4), np.float32)).tolist()
        == [[4.0, 4.0]] * 3
    )


def test_a_session_refuses_a_batch_of_another_shape() -> None:
    session = GraphSession(_linear(), (4,), 2)
    with pytest.raises(ValueError, match="takes"):
        session.run(np.zeros((2, 5), np.float32))
