"""Rewrite the int8 MiniLM graph so a table lookup never dequantises the whole table.

The model stores every weight as int8 with a float scale and dequantises it in the graph
(``Mul(Cast(W_q), S)``). For the word embeddings (30,522 × 384) that builds a 47 MB float
table and multiplies it into a second 47 MB table on every run, only for ``Gather`` to
pick a few hundred rows. onnxruntime's constant folding avoids the per-run work by turning
the whole model into 90 MB of float weights, but folding peaks ~200 MB above the process
(measured on a worker embedding a 600-file job). :func:`gather_before_dequantize` turns

    Gather(Mul(Cast(W_q), S), ids)         W_q int8 [V, D], S float [V, 1]
into
    Mul(Cast(Gather(W_q, ids)), Gather(S, ids))

which computes, for every selected element, the same ``float(q) * s`` as the original: the
output is bit-identical. Only per-row scales (``[V, 1]``) qualify; so the edit is exact.

Invariants of the edit, which works on the protobuf wire format (no ``onnx`` package):
- Only ``GraphProto.node`` entries change; every other byte of the model (weights,
  metadata, opsets) is passed through as a slice of the input, never copied or decoded.
- A rewritten node keeps all its fields (attributes such as Cast's ``to``) except its
  inputs and outputs.
- New nodes take the place of the nodes they replace, so the node list stays in
  topological order.
Field numbers are those of onnx.proto: ModelProto.graph 7; GraphProto.node 1,
.initializer 5; NodeProto.input 1, .output 2, .name 3, .op_type 4; TensorProto.dims 1,
.name 8.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

MODEL_GRAPH = 7
GRAPH_NODE, GRAPH_INITIALIZER = 1, 5
NODE_INPUT, NODE_OUTPUT, NODE_NAME, NODE_OP_TYPE = 1, 2, 3, 4
TENSOR_DIMS, TENSOR_DATA_TYPE, TENSOR_NAME, TENSOR_RAW_DATA = 1, 2, 8, 9
VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5

Chunk = bytes | memoryview


@dataclass(frozen=True, slots=True)
class Field:
    number: int
    wire_type: int
    raw: memoryview  # the whole field: tag and value
    value: memoryview | int  # the payload of a LENGTH field, else the number


@dataclass(slots=True)
class Node:
    inputs: list[str]
    outputs: list[str]
    op_type: str
    others: list[memoryview]  # every other field, raw, in order


def gather_before_dequantize(model: bytes) -> list[Chunk] | None:
    """The rewritten model as pieces to concatenate; None if it has no such lookup."""
    view = memoryview(model)
    top = list(_fields(view))
    graph_field = next((f for f in top if f.number == MODEL_GRAPH), None)
    if graph_field is None or not isinstance(graph_field.value, memoryview):
        return None
    graph = list(_fields(graph_field.value))
    nodes = [_parse_node(f.value) for f in graph if f.number == GRAPH_NODE]
    tensors = (tensor_fields(f.value) for f in graph if f.number == GRAPH_INITIALIZER)
    dims = {tensor.name: tensor.dims for tensor in tensors}
    lookups = _dequantized_lookups(nodes, dims)
    if not lookups:
        return None
    replacement: dict[int, list[Node]] = {}
    for gather_at, mul_at, cast_at in lookups:
        gather, mul, cast = nodes[gather_at], nodes[mul_at], nodes[cast_at]
        weights, scale, ids = cast.inputs[0], mul.inputs[1], gather.inputs[1]
        rows, rows_float, scale_rows = f"{weights}_rows", f"{weights}_rows_f", f"{scale}_rows"
        replacement[cast_at] = [
            _new_node("Gather", rows, [weights, ids], [rows]),
            Node([rows], [rows_float], cast.op_type, cast.others),
        ]
        replacement[mul_at] = [
            _new_node("Gather", scale_rows, [scale, ids], [scale_rows]),
            Node([rows_float, scale_rows], gather.outputs, mul.op_type, mul.others),
        ]
        replacement[gather_at] = []
    new_nodes = [n for at, node in enumerate(nodes) for n in replacement.get(at, [node])]
    graph_chunks: list[Chunk] = []
    first_node = True
    for field in graph:
        if field.number != GRAPH_NODE:
            graph_chunks.append(field.raw)
        elif first_node:
            first_node = False
            graph_chunks.extend(_length_field(GRAPH_NODE, _encode_node(n)) for n in new_nodes)
    chunks: list[Chunk] = []
    for field in top:
        if field is graph_field:
            chunks.append(_tag(MODEL_GRAPH, LENGTH) + _varint(sum(map(len, graph_chunks))))
            chunks.extend(graph_chunks)
        else:
            chunks.append(field.raw)
    return chunks


def _dequantized_lookups(
    nodes: list[Node], dims: dict[str, list[int]]
) -> list[tuple[int, int, int]]:
    """Indices (Gather, Mul, Cast) of each ``Gather(Mul(Cast(W_q), S), ids)`` where W_q
    and S are initializers, S holds one scale per row of W_q, and the dequantised table
    feeds nothing but that Gather."""
    producer = {out: at for at, node in enumerate(nodes) for out in node.outputs}
    uses: dict[str, int] = {}
    for node in nodes:
        for name in node.inputs:
            uses[name] = uses.get(name, 0) + 1
    found = []
    for gather_at, gather in enumerate(nodes):
        if gather.op_type != "Gather" or len(gather.inputs) != 2:
            continue
        mul_at = producer.get(gather.inputs[0])
        if mul_at is None:
            continue
        mul = nodes[mul_at]
        if mul.op_type != "Mul" or len(mul.inputs) != 2:
            continue
        cast_at = producer.get(mul.inputs[0])
        if cast_at is None:
            continue
        cast = nodes[cast_at]
        if cast.op_type != "Cast" or len(cast.inputs) != 1:
            continue
        table, scale = dims.get(cast.inputs[0]), dims.get(mul.inputs[1])
        if table is None or len(table) != 2 or scale != [table[0], 1]:
            continue
        if uses[cast.outputs[0]] == 1 and uses[mul.outputs[0]] == 1:
            found.append((gather_at, mul_at, cast_at))
    return found


def _parse_node(payload: memoryview | int) -> Node:
    assert isinstance(payload, memoryview)
    node = Node([], [], "", [])
    for field in _fields(payload):
        if field.number == NODE_INPUT:
            node.inputs.append(_text(field.value))
        elif field.number == NODE_OUTPUT:
            node.outputs.append(_text(field.value))
        else:
            if field.number == NODE_OP_TYPE:
                node.op_type = _text(field.value)
            node.others.append(field.raw)
    return node


def _new_node(op_type: str, name: str, inputs: list[str], outputs: list[str]) -> Node:
    others = [
        memoryview(_length_field(NODE_NAME, name.encode())),
        memoryview(_length_field(NODE_OP_TYPE, op_type.encode())),
    ]
    return Node(inputs, outputs, op_type, others)


def _encode_node(node: Node) -> bytes:
    parts = [_length_field(NODE_INPUT, name.encode()) for name in node.inputs]
    parts += [_length_field(NODE_OUTPUT, name.encode()) for name in node.outputs]
    return b"".join([*parts, *map(bytes, node.others)])


@dataclass(frozen=True, slots=True)
class TensorFields:
    """What an initializer (``TensorProto``) says of itself: its name, shape, data type
    (``TensorProto.DataType``) and raw little-endian data, where it has any."""

    name: str
    dims: list[int]
    data_type: int
    raw_data: memoryview | None


def tensor_fields(payload: memoryview | int) -> TensorFields:
    assert isinstance(payload, memoryview)
    name, dims, data_type, raw = "", [], 0, None
    for field in _fields(payload):
        if field.number == TENSOR_NAME:
            name = _text(field.value)
        elif field.number == TENSOR_DIMS and isinstance(field.value, int):
            dims.append(field.value)
        elif field.number == TENSOR_DIMS and isinstance(field.value, memoryview):  # packed
            packed, pos = field.value, 0
            while pos < len(packed):
                value, pos = _read_varint(packed, pos)
                dims.append(value)
        elif field.number == TENSOR_DATA_TYPE and isinstance(field.value, int):
            data_type = field.value
        elif field.number == TENSOR_RAW_DATA and isinstance(field.value, memoryview):
            raw = field.value
    return TensorFields(name, dims, data_type, raw)


def _fields(buf: memoryview | int) -> Iterator[Field]:
    """The fields of one protobuf message, in wire order."""
    assert isinstance(buf, memoryview)
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = _read_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        value: memoryview | int
        if wire_type == VARINT:
            value, pos = _read_varint(buf, pos)
        elif wire_type == LENGTH:
            size, pos = _read_varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire_type in (FIXED64, FIXED32):
            width = 8 if wire_type == FIXED64 else 4
            value, pos = int.from_bytes(buf[pos : pos + width], "little"), pos + width
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type} at byte {start}")
        if pos > len(buf):
            raise ValueError("truncated protobuf message")
        yield Field(number, wire_type, buf[start:pos], value)


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _length_field(number: int, payload: bytes) -> bytes:
    return _tag(number, LENGTH) + _varint(len(payload)) + payload


def _text(value: memoryview | int) -> str:
    assert isinstance(value, memoryview)
    return bytes(value).decode("utf-8")
