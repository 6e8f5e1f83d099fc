"""Reading a serialized ModelProto without copying its large weights into protobuf.

Parsing a 435 MB model with protobuf copies every initializer's ``raw_data`` into the
message, and each later use (numpy, onnxruntime, saving) copies it again. Neither onnx nor
onnx_ir can parse a model while leaving the weights in the caller's buffer, so this module
walks the protobuf wire format of the three messages on the way to the weights
(ModelProto.graph -> GraphProto.initializer -> TensorProto.raw_data), returns the model
bytes without the large ``raw_data`` fields (a few MB, parsed by protobuf as usual) and
where each stripped field lies, so the weights become numpy views of the file's bytes.
"""

from __future__ import annotations

__all__ = ["split_raw_data", "read_varint", "encode_varint", "iter_fields", "len_field",
           "nesting_depth", "external_locations"]

_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def encode_varint(n: int) -> bytes:
    """Protobuf varint encoding of a non-negative int."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if not n:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def iter_fields(buf: bytes, start: int, end: int):
    """(field number, wire type, field start, payload start, field end) of one message."""
    pos = start
    while pos < end:
        # One-byte varints (field numbers below 16, lengths below 128) read inline: this
        # runs once per node of a graph of 10^5 nodes.
        key = buf[pos]
        if key < 0x80:
            p = pos + 1
        else:
            key, p = read_varint(buf, pos)
        wire = key & 7
        if wire == _LEN:
            n = buf[p]
            if n < 0x80:
                p += 1
            else:
                n, p = read_varint(buf, p)
            q = p + n
        elif wire == _VARINT:
            _, q = read_varint(buf, p)
        elif wire == _FIXED64:
            q = p + 8
        elif wire == _FIXED32:
            q = p + 4
        else:  # groups: not used by ONNX
            raise ValueError(f"unsupported wire type {wire}")
        if q > end:
            raise ValueError("field runs past its message")
        yield key >> 3, wire, pos, p, q
        pos = q


def len_field(field: int, body: bytes) -> bytes:
    """A length-delimited field (key, length, payload) in wire format."""
    return encode_varint((field << 3) | _LEN) + encode_varint(len(body)) + body


def split_raw_data(buf: bytes, min_bytes: int) -> tuple[bytes, list[tuple[int, int, int]]]:
    """Strip main-graph initializers' ``raw_data`` of at least ``min_bytes`` from a model.

    Returns:
        (the model bytes without those fields, [(initializer position in
        ``graph.initializer``, offset of its data in ``buf``, length)]). When nothing is
        stripped the bytes are ``buf`` itself.

    Raises:
        ValueError: ``buf`` is not well-formed protobuf (the caller lets protobuf explain).
    """
    spans: list[tuple[int, int, int]] = []
    mv = memoryview(buf)  # pieces are views: Constant-node weights are copied once, by join
    model: list[bytes | memoryview] = []
    k = 0  # position in graph.initializer (several graph fields would be merged)
    for field, wire, s, p, q in iter_fields(buf, 0, len(buf)):
        if field != _MODEL_GRAPH or wire != _LEN:
            model.append(mv[s:q])
            continue
        # Only the stripped initializers are rewritten; the rest of the graph (10^5 nodes in
        # an unfused export) is kept as the spans between them.
        graph: list[bytes | memoryview] = []
        kept_from = p  # start of the graph bytes not yet in ``graph``
        for f2, w2, s2, p2, q2 in iter_fields(buf, p, q):
            if f2 != _GRAPH_INITIALIZER or w2 != _LEN:
                continue
            raw = None
            if q2 - p2 >= min_bytes:
                kept: list[bytes | memoryview] = []
                for f3, w3, s3, p3, q3 in iter_fields(buf, p2, q2):
                    if f3 == _TENSOR_RAW_DATA and w3 == _LEN and q3 - p3 >= min_bytes \
                            and raw is None:
                        raw = (k, p3, q3 - p3)
                    else:
                        kept.append(mv[s3:q3])
            if raw is not None:
                spans.append(raw)
                graph.append(mv[kept_from:s2])
                graph.append(len_field(_GRAPH_INITIALIZER, b"".join(kept)))
                kept_from = q2
            k += 1
        graph.append(mv[kept_from:q])
        model.append(len_field(_MODEL_GRAPH, b"".join(graph)))
    if not spans:
        return buf, []
    return b"".join(model), spans


# Message fields on the way from a model to its nested graphs: ModelProto.graph,
# GraphProto.node, NodeProto.attribute, AttributeProto.g / .graphs.
_NESTING = {"model": {7: "graph"}, "graph": {1: "node"}, "node": {5: "attribute"},
            "attribute": {6: "graph", 11: "graph"}}


def nesting_depth(buf, limit: int) -> int | None:
    """How many messages deep ``buf``'s graphs nest (model = 1, its graph = 2, a node = 3,
    an attribute = 4, a body = 5...), counted up to ``limit``; None when ``buf`` is not
    well-formed enough to walk.

    protobuf refuses messages nested past its recursion limit (100) with the same error as
    damaged bytes; this tells the two apart. Iterative: the nesting may be arbitrarily deep.
    """
    deepest = 0
    stack = [(0, len(buf), "model", 1)]
    try:
        while stack:
            start, end, kind, depth = stack.pop()
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            fields = _NESTING[kind]
            for field, wire, _s, p, q in iter_fields(buf, start, end):
                if wire == _LEN and field in fields:
                    stack.append((p, q, fields[field], depth + 1))
    except (ValueError, IndexError):
        return deepest or None
    return deepest


_TENSOR_EXTERNAL_DATA = 13


def external_locations(buf) -> list[str]:
    """The ``location`` of every external data entry of the main graph's initializers, read
    from the wire without parsing the model (weights are skipped, not copied); [] when
    ``buf`` is not well-formed."""
    out: list[str] = []
    try:
        for field, wire, _s, p, q in iter_fields(buf, 0, len(buf)):
            if field != _MODEL_GRAPH or wire != _LEN:
                continue
            for f2, w2, _s2, p2, q2 in iter_fields(buf, p, q):
                if f2 != _GRAPH_INITIALIZER or w2 != _LEN:
                    continue
                for f3, w3, _s3, p3, q3 in iter_fields(buf, p2, q2):
                    if f3 != _TENSOR_EXTERNAL_DATA or w3 != _LEN:
                        continue
                    entry = {f4: bytes(buf[p4:q4]) for f4, w4, _s4, p4, q4
                             in iter_fields(buf, p3, q3) if w4 == _LEN}
                    if entry.get(1) == b"location" and 2 in entry:
                        out.append(entry[2].decode("utf-8", "replace"))
    except (ValueError, IndexError):
        return out
    return out
