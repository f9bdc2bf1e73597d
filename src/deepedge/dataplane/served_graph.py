"""A served version as data, not code: an ONNX graph checked before anything runs it.

Whatever a tenant uploads or trains is code until proven data: a TorchScript file can call
``torch.from_file`` or write files when it is loaded or run, so it never runs in a service
process. What the data plane's replicas and the control loop's scoring run is instead the
version's export to ONNX (made in the tenant's sandbox), accepted only when
:func:`check_graph` proves, from the file alone:

1. **No I/O and no foreign code.** Every node is an operator of the standard ``ai.onnx``
   domain from :data:`ALLOWED_OPS` (tensor arithmetic, convolutions, pooling,
   normalisations, shape manipulation: none reads or writes anything but tensors); no
   other domain is imported (no custom operator library, no contrib or Azure operator),
   no model-local function, no sub-graph (``If``, ``Loop``, ``Scan`` are refused), and
   every tensor's data is inside the file (an external-data reference could name any file
   of the host). The runtime is given the bytes, never a path, and only the CPU (or
   CUDA) execution provider.
2. **Bounded work, the same for every input.** With the batch fixed, ONNX's shape
   inference (with data propagation, strict) must give every value a static shape; a shape
   computed from input values (``NonZero``, a ``Reshape`` read from the data, ...) is
   refused. Without loops and with static shapes the work of a forward pass does not
   depend on the values of the input: no crafted pixel can make it spin or allocate. The
   elements of all values per sample (:data:`MAX_ELEMENTS_PER_SAMPLE`) and the
   multiply-adds of convolutions and matrix products per sample
   (:data:`MAX_GFLOP_PER_SAMPLE`) are bounded, so a pass over ``n`` samples costs at most
   ``n`` times a known figure.
3. **The interface the sidecar promises.** One float input ``[batch, *input_shape]``,
   one float output ``[batch, classes]``, the batch dimension free.

What it does not prove: that ONNX Runtime's kernels and the ``onnx`` parser are free of
memory-safety bugs on malformed attributes (the graph is otherwise well-formed by
``onnx.checker``), and anything about the model's accuracy (the gate's work).

:class:`GraphSession` runs a checked graph with ONNX Runtime on a number of intra-op
threads (Ekya's share on a CPU edge server) and, where the installed runtime offers it
and the caller has a GPU, CUDA.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.core.errors import UnsafeModelError

log = logging.getLogger(__name__)

STANDARD_DOMAINS = frozenset({"", "ai.onnx"})
ALLOWED_OPS = frozenset({
    # arithmetic and activations (elementwise)
    "Abs", "Add", "Ceil", "Clip", "Cos", "Div", "Elu", "Erf", "Exp", "Floor", "Gelu",
    "HardSigmoid", "HardSwish", "LeakyRelu", "Log", "Max", "Mean", "Min", "Mish", "Mul",
    "Neg", "Pow", "PRelu", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin",
    "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Tanh", "ThresholdedRelu", "Celu",
    # comparisons and selection
    "And", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not", "Or", "Where",
    "Xor", "IsNaN", "IsInf",
    # linear algebra, convolution, pooling, normalisation
    "AveragePool", "BatchNormalization", "Conv", "ConvTranspose", "Gemm",
    "GlobalAveragePool", "GlobalMaxPool", "GroupNormalization", "InstanceNormalization",
    "LayerNormalization", "LpNormalization", "LRN", "MatMul", "MaxPool",
    # reductions and classifier heads
    "ArgMax", "ArgMin", "LogSoftmax", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceMax",
    "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Softmax",
    # shapes, layout and constants (their sizes must come out static, see the module text)
    "Cast", "Concat", "Constant", "ConstantOfShape", "DepthToSpace", "Dropout", "Expand",
    "Flatten", "Gather", "GatherElements", "Identity", "Pad", "Range", "Reshape", "Resize",
    "Shape", "Size", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile", "Transpose",
    "Unsqueeze", "Upsample", "CumSum", "Trilu",
})  # fmt: skip
MAX_GRAPH_BYTES = 1 << 29  # 512 MiB: protobuf's own limit is 2 GiB
MAX_ELEMENTS_PER_SAMPLE = 1 << 27  # every value of one sample's pass: 512 MiB of float32
MAX_GFLOP_PER_SAMPLE = 40.0  # 2 x multiply-adds; ResNet-50 at 224x224 is about 8
FLOAT = 1  # onnx.TensorProto.FLOAT
EXTERNAL = 1  # onnx.TensorProto.EXTERNAL
GRAPH_ATTRIBUTES = (5, 10)  # AttributeProto.GRAPH, GRAPHS
SPARSE_ATTRIBUTES = (11, 12)  # AttributeProto.SPARSE_TENSOR, SPARSE_TENSORS
TENSOR_ATTRIBUTES = (4, 9)  # AttributeProto.TENSOR, TENSORS


@dataclass(frozen=True)
class GraphFacts:
    """What the check measured of an accepted graph."""

    nodes: int
    ops: tuple[str, ...]  # the distinct operators, sorted
    parameters: int  # elements of the initializers and constants
    elements_per_sample: int  # of every value of a one-sample pass
    gflop_per_sample: float  # 2 x multiply-adds of convolutions and matrix products

    def document(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "ops": list(self.ops), "parameters": self.parameters,
                "elements_per_sample": self.elements_per_sample,
                "gflop_per_sample": round(self.gflop_per_sample, 6)}  # fmt: skip


def _refuse(reason: str) -> UnsafeModelError:
    return UnsafeModelError(f"served model refused: {reason}", field="model", reason=reason)


def _parse(data: bytes) -> Any:
    import onnx
    from google.protobuf.message import DecodeError

    if len(data) > MAX_GRAPH_BYTES:
        raise _refuse(f"{len(data)} bytes, over {MAX_GRAPH_BYTES}")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise _refuse(f"not an ONNX model ({type(exc).__name__})") from exc
    if not model.HasField("graph") or not model.graph.node:
        raise _refuse("not an ONNX model (no graph)")
    return model


def _tensor_problem(tensor: Any, where: str) -> str | None:
    if tensor.data_location == EXTERNAL or len(tensor.external_data) > 0:
        return f"{where} keeps its data outside the file"
    return None


def _check_structure(model: Any) -> int:
    """Rule 1 of the module text; the elements of the graph's stored tensors."""
    import onnx

    foreign = [o.domain for o in model.opset_import if o.domain not in STANDARD_DOMAINS]
    if foreign:
        raise _refuse(f"operator domain {foreign[0]!r} (only the standard ai.onnx domain)")
    if len(model.functions) > 0:
        raise _refuse("model-local functions")
    graph = model.graph
    if len(graph.sparse_initializer) > 0:
        raise _refuse("sparse initializers")
    parameters = 0
    for tensor in graph.initializer:
        problem = _tensor_problem(tensor, f"initializer {tensor.name!r}")
        if problem:
            raise _refuse(problem)
        parameters += math.prod(tensor.dims)
    for node in graph.node:
        if node.domain not in STANDARD_DOMAINS:
            raise _refuse(f"operator {node.domain}.{node.op_type}")
        if node.op_type not in ALLOWED_OPS:
            raise _refuse(f"operator {node.op_type} is not in the allowed set")
        for attribute in node.attribute:
            if attribute.type in GRAPH_ATTRIBUTES:
                raise _refuse(f"{node.op_type} holds a sub-graph")
            if attribute.type in SPARSE_ATTRIBUTES:
                raise _refuse(f"{node.op_type} holds a sparse tensor")
            if attribute.type in TENSOR_ATTRIBUTES:
                for tensor in [attribute.t] if attribute.type == 4 else list(attribute.tensors):
                    problem = _tensor_problem(tensor, f"{node.op_type} {node.name!r}")
                    if problem:
                        raise _refuse(problem)
                    parameters += math.prod(tensor.dims)
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError, RuntimeError) as exc:
        raise _refuse(f"malformed graph ({str(exc).splitlines()[0][:200]})") from exc
    return parameters


def _float_dims(value: Any, what: str) -> list[Any]:
    kind = value.type.WhichOneof("value")
    tensor = value.type.tensor_type
    if kind != "tensor_type" or tensor.elem_type != FLOAT or not tensor.HasField("shape"):
        raise _refuse(f"{what} {value.name!r} is not a float tensor of known rank")
    return list(tensor.shape.dim)


def _check_interface(model: Any, input_shape: tuple[int, ...], classes: int) -> None:
    graph = model.graph
    stored = {t.name for t in graph.initializer}
    inputs = [v for v in graph.input if v.name not in stored]
    if len(inputs) != 1 or len(graph.output) != 1:
        raise _refuse(f"{len(inputs)} inputs and {len(graph.output)} outputs (one of each)")
    dims = _float_dims(inputs[0], "input")
    fixed = [d.dim_value if d.HasField("dim_value") else None for d in dims[1:]]
    if len(dims) != 1 + len(input_shape) or fixed != list(input_shape):
        wanted = ", ".join(map(str, input_shape))
        raise _refuse(f"input {inputs[0].name!r} is not [batch, {wanted}]")
    out = _float_dims(graph.output[0], "output")
    if len(out) != 2 or (out[1].HasField("dim_value") and out[1].dim_value != classes):
        raise _refuse(f"output {graph.output[0].name!r} is not [batch, {classes}]")


def _static_shapes(model: Any, batch: int) -> dict[str, tuple[int, ...]]:
    """Every value's shape with the batch fixed (rule 2), or the refusal naming one that
    is not static."""
    import onnx

    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    stored = {t.name for t in fixed.graph.initializer}
    graph_input = next(v for v in fixed.graph.input if v.name not in stored)
    first = graph_input.type.tensor_type.shape.dim[0]
    first.Clear()
    first.dim_value = batch
    try:
        inferred = onnx.shape_inference.infer_shapes(
            fixed, check_type=True, strict_mode=True, data_prop=True
        )
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError) as exc:
        raise _refuse(f"shape inference failed ({str(exc).splitlines()[0][:200]})") from exc
    known: dict[str, tuple[int, ...]] = {}
    for value in [*inferred.graph.value_info, *inferred.graph.output, graph_input]:
        tensor = value.type.tensor_type
        if value.type.WhichOneof("value") != "tensor_type" or not tensor.HasField("shape"):
            continue
        if all(d.HasField("dim_value") for d in tensor.shape.dim):
            known[value.name] = tuple(int(d.dim_value) for d in tensor.shape.dim)
    for node in inferred.graph.node:
        for name in node.output:
            if name and name not in known:
                raise _refuse(f"{node.op_type} {node.name!r} has a shape known only at run "
                              f"time ({name!r})")  # fmt: skip
    return known


def _gflop(model: Any, shapes: dict[str, tuple[int, ...]]) -> float:
    """2 x multiply-adds of the convolutions and matrix products of one pass."""
    flop = 0
    for node in model.graph.node:
        if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1:
            weight = shapes.get(node.input[1]) or _stored_shape(model, node.input[1])
            out = shapes[node.output[0]]
            if node.op_type == "Conv":
                flop += 2 * math.prod(out) * math.prod(weight[1:])
            else:
                flop += 2 * math.prod(shapes.get(node.input[0], ())) * math.prod(weight[1:])
        elif node.op_type in ("MatMul", "Gemm"):
            a = shapes.get(node.input[0]) or _stored_shape(model, node.input[0])
            out = shapes[node.output[0]]
            flop += 2 * math.prod(out) * (a[-1] if a else 1)
    return flop / 1e9


def _stored_shape(model: Any, name: str) -> tuple[int, ...]:
    for tensor in model.graph.initializer:
        if tensor.name == name:
            return tuple(int(d) for d in tensor.dims)
    return ()


def check_graph(data: bytes, input_shape: tuple[int, ...], classes: int) -> GraphFacts:
    """Accept ``data`` as a servable graph (the module text's three rules) or raise
    :class:`~deepedge.core.errors.UnsafeModelError` naming the rule it broke."""
    model = _parse(data)
    parameters = _check_structure(model)
    _check_interface(model, input_shape, classes)
    one = _static_shapes(model, 1)
    two = _static_shapes(model, 2)
    output = model.graph.output[0].name
    if one[output] != (1, classes) or two[output] != (2, classes):
        raise _refuse(f"output {output!r} is {one[output]} for one sample, not (1, {classes})")
    elements = sum(math.prod(s) for s in one.values())
    if elements > MAX_ELEMENTS_PER_SAMPLE:
        raise _refuse(f"{elements} elements per sample, over {MAX_ELEMENTS_PER_SAMPLE}")
    gflop = _gflop(model, one)
    if gflop > MAX_GFLOP_PER_SAMPLE:
        raise _refuse(f"{gflop:.1f} GFLOP per sample, over {MAX_GFLOP_PER_SAMPLE}")
    ops = tuple(sorted({n.op_type for n in model.graph.node}))
    return GraphFacts(len(model.graph.node), ops, parameters, elements, gflop)


class GraphSession:
    """A checked graph run by ONNX Runtime (module text); ``run`` maps a float32 batch
    ``[n, *input_shape]`` to its logits ``[n, classes]``."""

    def __init__(
        self, data: bytes, input_shape: tuple[int, ...], classes: int, threads: int = 1,
        gpu: bool = False,
    ) -> None:  # fmt: skip
        import onnxruntime as ort

        self.facts = check_graph(data, input_shape, classes)
        self.input_shape, self.classes, self.threads = input_shape, classes, max(1, threads)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        available = ort.get_available_providers()
        providers = ["CPUExecutionProvider"]
        if gpu and "CUDAExecutionProvider" in available:
            providers.insert(0, "CUDAExecutionProvider")
        self.device = "cuda" if providers[0] == "CUDAExecutionProvider" else "cpu"
        self._session = ort.InferenceSession(data, options, providers=providers)
        self._input = self._session.get_inputs()[0].name

    @classmethod
    def load(cls, path: Path | str, input_shape: tuple[int, ...], classes: int,
             threads: int = 1, gpu: bool = False) -> GraphSession:  # fmt: skip
        return cls(Path(path).read_bytes(), input_shape, classes, threads, gpu)

    def run(self, batch: np.ndarray) -> np.ndarray:
        batch = np.ascontiguousarray(batch, dtype=np.float32)
        if batch.shape[1:] != self.input_shape:
            raise ValueError(f"a batch of {batch.shape[1:]}, the graph takes {self.input_shape}")
        out: np.ndarray = self._session.run(None, {self._input: batch})[0]
        return out.astype(np.float32, copy=False)

    def predict(self, images: np.ndarray, batch_size: int = 256) -> np.ndarray:
        """The argmax class of each image (in batches)."""
        if len(images) == 0:
            return np.zeros(0, dtype=np.int64)
        parts = [self.run(images[i : i + batch_size]).argmax(axis=1)
                 for i in range(0, len(images), batch_size)]  # fmt: skip
        return np.concatenate(parts).astype(np.int64)
