"""The weights of the int8 MiniLM ONNX model as float32 arrays, named as in BERT.

The model stores every weight matrix as int8 with a float32 scale (one per row of a
lookup table, one per output column of a projection) and dequantises it in the graph as
``Mul(Cast(W_q), S)``. :func:`dequantized_weights` reads the initializers from the
protobuf wire format (no ``onnx`` package) and computes the same ``float32(q) * s``
with numpy, so each array holds exactly the values onnxruntime multiplies with.

Names follow the graph: a projection's weight is named after the bias its ``MatMul`` is
added to (``encoder.layer.0.attention.self.query.bias`` gives
``encoder.layer.0.attention.self.query.weight``), stored ``[in, out]`` as the graph
multiplies it (``x @ W``); the embedding tables are ``embeddings.*.weight``; the
``inner.`` prefix of the exported names is dropped.
"""

from __future__ import annotations

import numpy as np

from rifflux.embed.onnx_graph import (
    GRAPH_INITIALIZER,
    GRAPH_NODE,
    MODEL_GRAPH,
    Node,
    _fields,
    _parse_node,
    tensor_fields,
)

# onnx.TensorProto.DataType values this model uses.
_DTYPES = {1: np.float32, 3: np.int8, 7: np.int64}
EXPORT_PREFIX = "inner."


def initializers(model: bytes) -> dict[str, np.ndarray]:
    """Every initializer of the graph with raw data, by name, as a numpy array."""
    view = memoryview(model)
    graph = next(f for f in _fields(view) if f.number == MODEL_GRAPH)
    out: dict[str, np.ndarray] = {}
    for field in _fields(graph.value):
        if field.number == GRAPH_INITIALIZER:
            name, array = _tensor(field.value)
            if array is not None:
                out[name] = array
    return out


def graph_nodes(model: bytes) -> list[Node]:
    view = memoryview(model)
    graph = next(f for f in _fields(view) if f.number == MODEL_GRAPH)
    return [_parse_node(f.value) for f in _fields(graph.value) if f.number == GRAPH_NODE]


def dequantized_weights(model: bytes) -> dict[str, np.ndarray]:
    """The model's parameters as float32 arrays (see the module docstring)."""
    tensors = initializers(model)
    nodes = graph_nodes(model)
    producer = {out: node for node in nodes for out in node.outputs}
    dequantized: dict[str, np.ndarray] = {}
    for node in nodes:
        if node.op_type != "Mul" or len(node.inputs) != 2:
            continue
        cast = producer.get(node.inputs[0])
        if cast is None or cast.op_type != "Cast" or cast.inputs[0] not in tensors:
            continue
        scale = tensors.get(node.inputs[1])
        if scale is None:
            continue
        quantized = tensors[cast.inputs[0]]
        dequantized[node.outputs[0]] = quantized.astype(np.float32) * scale
    weights: dict[str, np.ndarray] = {}
    for name, array in dequantized.items():
        if name.startswith(EXPORT_PREFIX):  # the embedding tables keep their names
            weights[name[len(EXPORT_PREFIX) :]] = array
    # A projection: MatMul(x, W) whose output an Add with a named bias consumes.
    consumers: dict[str, list[Node]] = {}
    for node in nodes:
        for name in node.inputs:
            consumers.setdefault(name, []).append(node)
    for node in nodes:
        if node.op_type != "MatMul" or node.inputs[1] not in dequantized:
            continue
        for add in consumers.get(node.outputs[0], []):
            bias = next((i for i in add.inputs if i.endswith(".bias") and i in tensors), None)
            if add.op_type == "Add" and bias is not None:
                base = bias[len(EXPORT_PREFIX) :].removesuffix(".bias")
                weights[f"{base}.weight"] = dequantized[node.inputs[1]]
    for name, array in tensors.items():
        is_parameter = name.endswith((".weight", ".bias"))
        if name.startswith(EXPORT_PREFIX) and is_parameter and array.dtype == np.float32:
            weights[name[len(EXPORT_PREFIX) :]] = array
    return weights


def _tensor(payload: memoryview | int) -> tuple[str, np.ndarray | None]:
    tensor = tensor_fields(payload)
    if tensor.raw_data is None or tensor.data_type not in _DTYPES:
        return tensor.name, None
    array = np.frombuffer(tensor.raw_data, dtype=_DTYPES[tensor.data_type])
    return tensor.name, array.reshape(tensor.dims).copy()
