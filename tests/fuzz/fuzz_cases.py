"""Hypothesis strategies for the fuzz harness: malformed models, hostile references, CLI calls.

Every case starts from one of a few small, valid seed models and damages it in one family:

- ``random``: random bytes (some starting like a ModelProto);
- ``truncate``: the seed's bytes cut short;
- ``bitflip``: a few bits flipped anywhere (header, graph or weights);
- ``bytes``: byte ranges overwritten, inserted or deleted;
- ``field``: protobuf field edits (dtypes, dims, data fields, attribute types, value types,
  names that are not UTF-8, opsets, sparse tensors...);
- ``structure``: graph edits (nodes removed, duplicated, reordered, cycles, two writers of one
  tensor, dangling names, 64k-character names);
- ``external``: external data references (``..``, absolute paths, links out of the folder, NUL
  bytes, bad offsets and lengths, missing/short/odd files) in initializers, Constant tensors and
  bodies;
- ``nesting``: If bodies nested up to past protobuf's recursion limit;
- ``metadata``: hostile shapes of the metadata onnx_lab and torch.onnx write
  (``onnx_lab.sources`` with a non-int ``line`` or markup, deep or huge JSON in
  ``onnx_lab.sources`` / ``onnx_lab.origin``, ``name_scopes`` literals that are deep, huge or
  not lists, stack traces with giant line numbers, odd ``imgsz``) on every node;
- ``history``: random apply/undo/redo sequences (every version must stay as it was);
- ``cli``: ``onnx-lab`` calls with damaged models, odd option values and outputs that point
  at the inputs.

Model cases are opened as a path (read, the background reader included, or mapped), as bytes,
as an ``onnx.ModelProto`` or as an ``onnx_ir.Model``, sometimes naming a ``base_dir``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import onnx
from fuzz_worker import ABS_SECRET
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

MODEL = "model/m.onnx"
DATA = "model/m.onnx.data"
# Names that are not UTF-8 cannot be set through protobuf's Python API: edits write this
# placeholder and the serialized bytes get invalid UTF-8 of the same length in its place.
BAD_UTF8 = "\x01\x02BADUTF8\x02\x01"
BAD_UTF8_BYTES = b"\xff\xfe\xc3\x28\x80\x80\xed\xa0\x80\xf8\x88"
assert len(BAD_UTF8.encode()) == len(BAD_UTF8_BYTES)

OPS = ["nodes", "initializers", "tensors", "inputs", "outputs", "summary", "cost", "check",
       "render", "weights", "patterns", "save", "save_ext", "save_one", "save_over_source"]


@functools.cache
def _passes() -> list[str]:
    """The built-in graph passes, from the registry (a new pass is fuzzed with no edit here)."""
    from onnx_lab.transforms.explain import builtin_passes

    return sorted(builtin_passes("graph"))


F = TensorProto.FLOAT


# ------------------------------------------------------------------------------ seeds
def _finish(graph: onnx.GraphProto, opset: int = 17) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="fuzz")
    m.ir_version = 8
    return m


def _tiny() -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    shape = numpy_helper.from_array(np.array([3, 2], np.int64), "shape")
    nodes = [
        helper.make_node("Constant", [], ["c"], name="const",
                         value=numpy_helper.from_array(np.full((2, 3), 0.5, np.float32))),
        helper.make_node("Add", ["x", "w"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "c"], ["b"], name="mul"),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape"),
        helper.make_node("Identity", ["c"], ["c2"], name="ident"),
    ]
    g = helper.make_graph(nodes, "tiny", [vi("x", F, ["batch", 3])],
                          [vi("y", F, [3, 2]), vi("c2", F, [2, 3])], [w, shape],
                          value_info=[vi("a", F, ["batch", 3])])
    return _finish(g)


def _constants() -> onnx.ModelProto:
    """Constants shared by several nodes (for constants_to_initializers), a Dropout, a
    MatMul+Add and an unused initializer."""
    vi = helper.make_tensor_value_info
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Constant", [], ["k"], name="k",
                         value=numpy_helper.from_array(rng.standard_normal((4, 4)).astype(
                             np.float32))),
        helper.make_node("Constant", [], ["bias"], name="bias", value_floats=[1.0, 2.0, 3.0, 4.0]),
        helper.make_node("MatMul", ["x", "k"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "bias"], ["a"], name="add"),
        helper.make_node("Dropout", ["a"], ["dr"], name="drop"),
        helper.make_node("Identity", ["dr"], ["i"], name="id"),
        helper.make_node("MatMul", ["i", "k"], ["y"], name="mm2"),
    ]
    g = helper.make_graph(nodes, "constants", [vi("x", F, [2, 4])], [vi("y", F, [2, 4])],
                          [numpy_helper.from_array(np.ones(3, np.float32), "unused")])
    return _finish(g)


def _externalize(proto: onnx.ModelProto, location: str = "m.onnx.data",
                 min_bytes: int = 0) -> tuple[onnx.ModelProto, bytes]:
    """Move the main graph's initializers (and Constant tensors) into one data file."""
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    data = bytearray()
    tensors = list(m.graph.initializer) + [a.t for n in m.graph.node for a in n.attribute
                                           if a.type == onnx.AttributeProto.TENSOR]
    for t in tensors:
        raw = numpy_helper.to_array(t).tobytes()
        if len(raw) < min_bytes:
            continue
        while len(data) % 16:
            data.append(0)
        offset = len(data)
        data += raw
        for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                  "uint64_data"):
            t.ClearField(f)
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        for k, v in (("location", location), ("offset", str(offset)),
                     ("length", str(len(raw)))):
            t.external_data.add(key=k, value=v)
    return m, bytes(data)


@functools.cache
def seeds() -> dict[str, tuple[bytes, dict[str, bytes]]]:
    """name -> (model bytes, other files of the model folder) for every seed model."""
    from models import big_weight_model, control_flow_model

    from onnx_lab.core.samples import build

    out: dict[str, tuple[bytes, dict[str, bytes]]] = {}
    for name, proto in (("tiny", _tiny()), ("constants", _constants()),
                        ("convnet", build("convnet")),
                        ("transformer", build("transformer_block")),
                        ("control_flow", control_flow_model()),
                        ("big_weight", big_weight_model())):
        out[name] = (proto.SerializeToString(), {})
    for name in ("tiny", "constants", "control_flow"):
        m, data = _externalize(onnx.load_from_string(out[name][0]))
        out[f"{name}_ext"] = (m.SerializeToString(), {DATA: data})
    return out


def seed_proto(name: str) -> onnx.ModelProto:
    return onnx.load_from_string(seeds()[name][0])


# ------------------------------------------------------------------------------ helpers
def _bad_utf8(data: bytes) -> bytes:
    return data.replace(BAD_UTF8.encode(), BAD_UTF8_BYTES)


def _graphs(g: onnx.GraphProto) -> list[onnx.GraphProto]:
    out = [g]
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out += _graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    out += _graphs(sub)
    return out


def _tensors(m: onnx.ModelProto) -> list[onnx.TensorProto]:
    out = []
    for g in _graphs(m.graph):
        out += list(g.initializer)
        for n in g.node:
            out += [a.t for a in n.attribute if a.type == onnx.AttributeProto.TENSOR]
    return out


def _nodes(m: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for g in _graphs(m.graph) for n in g.node]


def _values(m: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    return [v for g in _graphs(m.graph) for v in (*g.input, *g.output, *g.value_info)]


def _pick(draw, items: list) -> Any:
    return items[draw(st.integers(0, len(items) - 1))] if items else None


INTS = st.sampled_from([0, 1, 2, 3, 7, -1, -2, 100000, 2**31, 2**31 - 1, 2**62, 2**63 - 1])
NAMES = st.sampled_from(["", "x", "y", "w", "c", "a", "r", BAD_UTF8, "n" * 300, "dup",
                         "with space", "../x", "a/b/c"])
DTYPES = st.sampled_from([0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 21, 22, 23,
                          24, 25, 26, 99, 1000])


# ------------------------------------------------------------------------------ field edits
def _edit_tensor(draw, m: onnx.ModelProto) -> str:
    t = _pick(draw, _tensors(m))
    if t is None:
        return "no tensor"
    what = draw(st.sampled_from(["dtype", "dims", "raw", "field", "clear", "external_flag",
                                 "name", "segment", "string"]))
    if what == "dtype":
        t.data_type = draw(DTYPES)
    elif what == "dims":
        del t.dims[:]
        t.dims.extend(draw(st.lists(INTS, max_size=4)))
    elif what == "raw":
        try:
            raw = t.raw_data or numpy_helper.to_array(t).tobytes()
        except Exception:  # noqa: BLE001 - an external or odd tensor: start from nothing
            raw = b""
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.ClearField("int32_data")
        cut = draw(st.integers(0, len(raw) + 8))
        t.raw_data = (raw + b"\x01" * 8)[:cut]
    elif what == "field":
        field = draw(st.sampled_from(["float_data", "int32_data", "int64_data", "double_data",
                                      "uint64_data"]))
        n = draw(st.integers(0, 12))
        t.ClearField("raw_data")
        getattr(t, field).extend([1] * n)
    elif what == "clear":
        for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                  "uint64_data", "string_data"):
            t.ClearField(f)
    elif what == "external_flag":
        t.data_location = TensorProto.EXTERNAL
    elif what == "name":
        t.name = draw(NAMES)
    elif what == "segment":
        t.segment.begin = draw(INTS)
        t.segment.end = draw(INTS)
    elif what == "string":
        t.data_type = TensorProto.STRING
        t.ClearField("raw_data")
        t.string_data.extend([b"\xff\x00", b"ok"][:draw(st.integers(0, 2))])
    return f"tensor {t.name!r}: {what}"


def _edit_node(draw, m: onnx.ModelProto) -> str:
    nodes = _nodes(m)
    n = _pick(draw, nodes)
    if n is None:
        return "no node"
    what = draw(st.sampled_from(["op_type", "domain", "output_dup", "input", "name",
                                 "attr_add", "attr_type", "attr_graph", "sparse_value",
                                 "output_empty", "attr_dup"]))
    if what == "op_type":
        n.op_type = draw(st.sampled_from(["", "Foo", "Conv", "Scan", "Loop", "If", "Constant",
                                          BAD_UTF8, "Relu" * 50]))
    elif what == "domain":
        n.domain = draw(st.sampled_from(["", "ai.onnx", "com.microsoft", "x.y", BAD_UTF8,
                                         "ai.onnx.ml", "d" * 5000]))
    elif what == "output_dup":
        other = _pick(draw, [o for x in nodes for o in x.output if o])
        if other is not None and n.output:
            n.output[0] = other
    elif what == "input":
        if n.input:
            n.input[draw(st.integers(0, len(n.input) - 1))] = draw(
                st.sampled_from(["", "missing", n.output[0] if n.output else "x", BAD_UTF8]))
        else:
            n.input.append(draw(NAMES))
    elif what == "name":
        n.name = draw(NAMES)
    elif what == "output_empty":
        if n.output:
            n.output[0] = ""
    elif what == "attr_add":
        a = n.attribute.add(name=draw(st.sampled_from(["axis", "value", "body", "perm",
                                                         "num_scan_inputs", BAD_UTF8, ""])))
        a.type = draw(st.integers(0, 14))
        payload = draw(st.sampled_from(["none", "i", "f", "s", "ints", "t", "g"]))
        if payload == "i":
            a.i = draw(INTS)
        elif payload == "f":
            a.f = 1.5
        elif payload == "s":
            a.s = b"\xff\xfe"
        elif payload == "ints":
            a.ints.extend([1, -1, 2**40])
        elif payload == "t":
            a.t.CopyFrom(numpy_helper.from_array(np.ones(2, np.float32)))
        elif payload == "g":
            a.g.CopyFrom(helper.make_graph([], "empty", [], []))
    elif what == "attr_type":
        a = _pick(draw, list(n.attribute))
        if a is not None:
            a.type = draw(st.integers(0, 14))
    elif what == "attr_graph":
        a = _pick(draw, [a for a in n.attribute])
        if a is not None:
            a.ClearField("g")
            a.type = draw(st.sampled_from([onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT,
                                           onnx.AttributeProto.GRAPH,
                                           onnx.AttributeProto.STRING]))
            a.i = 3
    elif what == "sparse_value":
        del n.attribute[:]
        n.op_type = "Constant"
        n.domain = ""
        sp = helper.make_sparse_tensor(
            numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "sv"),
            numpy_helper.from_array(np.array(draw(st.sampled_from(
                [[0, 3], [1, 99], [-1, 0]])), np.int64), "si"), draw(st.sampled_from(
                    [[4], [2**31], [0]])))
        n.attribute.append(helper.make_attribute("sparse_value", sp))
    elif what == "attr_dup":
        if n.attribute:
            n.attribute.append(n.attribute[0])
    return f"node {n.name!r}: {what}"


def _edit_value(draw, m: onnx.ModelProto) -> str:
    v = _pick(draw, _values(m))
    if v is None:
        return "no value"
    what = draw(st.sampled_from(["map", "optional", "sequence", "sparse", "empty", "elem",
                                 "dim", "name", "opaque"]))
    if what == "map":
        v.type.CopyFrom(helper.make_map_type_proto(TensorProto.INT64,
                                                   helper.make_tensor_type_proto(F, [3])))
    elif what == "optional":
        v.type.CopyFrom(helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2])))
    elif what == "sequence":
        v.type.CopyFrom(helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None)))
    elif what == "sparse":
        v.type.CopyFrom(helper.make_sparse_tensor_type_proto(F, [4]))
    elif what == "empty":
        v.ClearField("type")
    elif what == "opaque":
        v.type.opaque_type.domain = "x"
    elif what == "elem":
        v.type.tensor_type.elem_type = draw(DTYPES)
    elif what == "dim":
        d = v.type.tensor_type.shape.dim.add()
        if draw(st.booleans()):
            d.dim_value = draw(INTS)
        else:
            d.dim_param = draw(st.sampled_from(["", "?", "-1", BAD_UTF8, "b" * 1000]))
    elif what == "name":
        v.name = draw(NAMES)
    return f"value {v.name!r}: {what}"


def _edit_model(draw, m: onnx.ModelProto) -> str:
    what = draw(st.sampled_from(["ir_version", "opset", "no_opset", "metadata", "function",
                                 "sparse_init", "graph_name", "doc"]))
    if what == "ir_version":
        m.ir_version = draw(st.sampled_from([0, 1, 3, 4, 7, 11, 12, 100, 2**40, -1]))
    elif what == "opset":
        op = m.opset_import.add()
        op.domain = draw(st.sampled_from(["", "ai.onnx", "com.microsoft", BAD_UTF8, "x"]))
        op.version = draw(st.sampled_from([0, -1, 1, 7, 10000, 2**40]))
        if draw(st.booleans()):
            del m.opset_import[0]
    elif what == "no_opset":
        del m.opset_import[:]
        m.opset_import.add(domain="x", version=1)
    elif what == "metadata":
        m.metadata_props.add(key=BAD_UTF8, value=draw(NAMES))
    elif what == "function":
        f = m.functions.add()
        f.name, f.domain = draw(NAMES), draw(st.sampled_from(["", "local", BAD_UTF8]))
        f.node.add(op_type="Relu", input=["a"], output=["b"])
        f.input.append("a")
        f.output.append("b")
        if draw(st.booleans()):
            n = m.graph.node.add(op_type=f.name, domain=f.domain, input=["x"], output=["fy"])
            n.name = "call"
    elif what == "sparse_init":
        sp = helper.make_sparse_tensor(
            numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "sp"),
            numpy_helper.from_array(np.array([0, 1], np.int64), "sp_i"),
            draw(st.sampled_from([[4], [2, 2], [2**31]])))
        m.graph.sparse_initializer.append(sp)
        if draw(st.booleans()) and m.graph.node:
            m.graph.node[0].input.append("sp")
    elif what == "graph_name":
        m.graph.name = draw(NAMES)
    elif what == "doc":
        m.graph.doc_string = draw(NAMES)
    return f"model: {what}"


@st.composite
def field_case(draw) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(seeds())))
    m = seed_proto(name)
    edits = [draw(st.sampled_from([_edit_tensor, _edit_node, _edit_value, _edit_model]))(draw, m)
             for _ in range(draw(st.integers(1, 3)))]
    try:
        data = _bad_utf8(m.SerializeToString())
    except Exception:  # noqa: BLE001 - e.g. a string protobuf refuses: write the seed
        data = seeds()[name][0]
    return _model_case("field", name, data, draw, f"{name}: {'; '.join(edits)}")


# ------------------------------------------------------------------------------ structure
@st.composite
def structure_case(draw) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(seeds())))
    m = seed_proto(name)
    g = m.graph
    what = draw(st.sampled_from(["delete", "duplicate", "reverse", "cycle", "no_outputs",
                                 "dangling_output", "drop_initializer", "init_as_input",
                                 "long_name", "long_custom_domain", "chain", "two_writers",
                                 "input_is_output"]))
    nodes = list(g.node)
    if what == "delete" and nodes:
        del g.node[draw(st.integers(0, len(nodes) - 1))]
    elif what == "duplicate" and nodes:
        g.node.append(nodes[draw(st.integers(0, len(nodes) - 1))])
    elif what == "reverse":
        rev = list(reversed(nodes))
        del g.node[:]
        g.node.extend(rev)
    elif what == "cycle" and nodes:
        n = g.node[draw(st.integers(0, len(nodes) - 1))]
        if n.output:
            if n.input:
                n.input[0] = n.output[0]
            else:
                n.input.append(n.output[0])
    elif what == "no_outputs":
        del g.output[:]
    elif what == "dangling_output":
        g.output.add().name = "nowhere"
    elif what == "drop_initializer" and len(g.initializer):
        del g.initializer[0]
    elif what == "init_as_input" and len(g.initializer):
        t = g.initializer[0]
        g.input.append(helper.make_tensor_value_info(t.name, t.data_type or F, list(t.dims)))
    elif what == "long_name":
        # a 64k-character tensor name that onnxruntime's error messages repeat
        k = draw(st.sampled_from([1000, 65536]))
        long = "t" * k
        g.node.add(op_type="Relu", input=[g.input[0].name if g.input else "x"],
                   output=[long], name="long")
        g.output.append(helper.make_tensor_value_info(long, F, None))
    elif what == "long_custom_domain":
        k = draw(st.sampled_from([1000, 65536]))
        dom = "d" * k
        m.opset_import.add(domain=dom, version=1)
        g.node.add(op_type="CustomOp", domain=dom,
                   input=[g.input[0].name if g.input else "x"], output=["custom_out"])
        g.output.append(helper.make_tensor_value_info("custom_out", F, None))
    elif what == "chain":
        k = draw(st.sampled_from([200, 3000]))
        prev = g.input[0].name if g.input else "x"
        for i in range(k):
            g.node.add(op_type="Identity", input=[prev], output=[f"chain{i}"])
            prev = f"chain{i}"
        g.output.append(helper.make_tensor_value_info(prev, F, None))
    elif what == "two_writers" and len(nodes) >= 2:
        outs = [o for n in nodes for o in n.output if o]
        g.node[draw(st.integers(0, len(nodes) - 1))].output[0] = _pick(draw, outs)
    elif what == "input_is_output" and nodes and g.input:
        g.node[0].output[0] = g.input[0].name
    return _model_case("structure", name, m.SerializeToString(), draw, f"{name}: {what}")


# ------------------------------------------------------------------------------ bytes
@st.composite
def random_case(draw) -> dict[str, Any]:
    prefix = draw(st.sampled_from([b"", b"\x08\x08", b"\x08\x08\x3a", b"\n", b"PK\x03\x04",
                                   b"version https://git-lfs", b"\x08\x07\x12\x00\x3a\x02"]))
    data = prefix + draw(st.binary(max_size=600))
    return _model_case("random", "none", data, draw, f"{len(data)} random bytes")


@st.composite
def truncate_case(draw) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(seeds())))
    data = seeds()[name][0]
    cut = draw(st.integers(0, len(data) - 1))
    return _model_case("truncate", name, data[:cut], draw, f"{name}[:{cut}]")


@st.composite
def bitflip_case(draw) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(seeds())))
    data = bytearray(seeds()[name][0])
    # Half the flips land in the first 2 KB, where the structure (not the weights) is.
    flips = draw(st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(0, 7),
                                    st.booleans()), min_size=1, max_size=8))
    for pos, bit, head in flips:
        p = pos % min(len(data), 2048) if head else pos
        data[p] ^= 1 << bit
    return _model_case("bitflip", name, bytes(data), draw, f"{name}: {len(flips)} flips")


@st.composite
def bytes_case(draw) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(seeds())))
    data = bytearray(seeds()[name][0])
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(data)))
        what = draw(st.sampled_from(["overwrite", "insert", "delete", "varint"]))
        chunk = draw(st.binary(min_size=1, max_size=16))
        if what == "overwrite":
            data[pos:pos + len(chunk)] = chunk
        elif what == "insert":
            data[pos:pos] = chunk
        elif what == "delete":
            del data[pos:pos + len(chunk)]
        else:  # a huge length prefix
            data[pos:pos] = b"\xff\xff\xff\xff\x0f"
    return _model_case("bytes", name, bytes(data), draw, f"{name}: byte edits")


# ------------------------------------------------------------------------------ external data
LOCATIONS = ["m.onnx.data", "../secret.bin", ABS_SECRET, "sub/../../secret.bin", "", "a\x00b",
             "link.bin", "inner_link.bin", "missing.bin", "m.onnx", ".", "sub", "sub/w.bin",
             "./m.onnx.data", "sub/../m.onnx.data", "C:\\secret.bin", "//tmp/x", "~/x",
             "file:///etc/passwd"]
OFFSETS = ["0", "16", "-1", "", "abc", "1e3", str(2**63), "999999999", " 4", "+8", "0x10"]
LENGTHS = ["8", "24", "0", "-5", "", "abc", str(2**62), "999999999", "1.5", None]


@st.composite
def external_case(draw) -> dict[str, Any]:
    name = draw(st.sampled_from(["tiny_ext", "constants_ext", "control_flow_ext", "tiny",
                                 "control_flow"]))
    proto = seed_proto(name)
    files = dict(seeds()[name][1])
    where = draw(st.sampled_from(["initializer", "constant", "body", "sparse", "any"]))
    if not name.endswith("_ext") or where == "body":
        # put one reference in a body or a Constant of a seed without external data
        data = files.get(DATA, b"")
        target = None
        if where == "body":
            bodies = _graphs(proto.graph)[1:]
            g = _pick(draw, bodies) or proto.graph
            t = numpy_helper.from_array(np.ones(4, np.float32), "body_w")
            g.initializer.append(t)
            target = g.initializer[-1]
        elif where == "sparse":
            sp = helper.make_sparse_tensor(
                numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "spx"),
                numpy_helper.from_array(np.array([0, 1], np.int64), "spx_i"), [4])
            proto.graph.sparse_initializer.append(sp)
            target = proto.graph.sparse_initializer[-1].values
        else:
            target = _pick(draw, _tensors(proto))
        if target is not None:
            raw = b"\x00" * 16
            target.ClearField("raw_data")
            target.ClearField("float_data")
            target.data_location = TensorProto.EXTERNAL
            del target.external_data[:]
            target.external_data.add(key="location", value="m.onnx.data")
            target.external_data.add(key="offset", value=str(len(data)))
            target.external_data.add(key="length", value=str(len(raw)))
            files[DATA] = data + raw
    tensors = [t for t in _tensors(proto) if t.data_location == TensorProto.EXTERNAL]
    tensors += [s.values for s in proto.graph.sparse_initializer
                if s.values.data_location == TensorProto.EXTERNAL]
    edits = []
    for _ in range(draw(st.integers(0, 2))):
        t = _pick(draw, tensors)
        if t is None:
            break
        entries = {e.key: e.value for e in t.external_data}
        what = draw(st.sampled_from(["location", "offset", "length", "drop_location",
                                     "dup_key", "checksum", "not_external"]))
        if what == "location":
            entries["location"] = draw(st.sampled_from(LOCATIONS))
        elif what == "offset":
            entries["offset"] = draw(st.sampled_from(OFFSETS))
        elif what == "length":
            value = draw(st.sampled_from(LENGTHS))
            if value is None:
                entries.pop("length", None)
            else:
                entries["length"] = value
        elif what == "drop_location":
            entries.pop("location", None)
        elif what == "checksum":
            entries["checksum"] = "0" * 40
        elif what == "not_external":
            t.data_location = TensorProto.DEFAULT
        del t.external_data[:]
        for k, v in entries.items():
            t.external_data.add(key=k, value=v)
        if what == "dup_key":
            t.external_data.add(key="location", value=draw(st.sampled_from(LOCATIONS)))
        edits.append(f"{t.name}: {what} -> {entries.get('location')!r} "
                     f"{entries.get('offset')!r} {entries.get('length')!r}")
    # the data file itself
    data_edit = draw(st.sampled_from(["keep", "keep", "truncate", "empty", "missing", "dir",
                                      "link_out", "link_in"]))
    data = files.get(DATA, b"")
    if data_edit == "truncate":
        files[DATA] = data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    elif data_edit == "empty":
        files[DATA] = b""
    elif data_edit == "missing":
        files.pop(DATA, None)
    elif data_edit == "dir":
        files[DATA] = ("dir",)
    elif data_edit == "link_out":
        files[DATA] = ("link", "../secret.bin")
    elif data_edit == "link_in":
        files["model/real.data"] = data
        files[DATA] = ("link", "real.data")
    files["model/link.bin"] = ("link", "../secret.bin")
    files["model/inner_link.bin"] = ("link", "m.onnx.data")
    files["model/sub/w.bin"] = b"\x00" * 64
    try:
        model_bytes = proto.SerializeToString()
    except Exception:  # noqa: BLE001 - a NUL byte protobuf refuses in a str: wire edit
        model_bytes = seeds()[name][0]
    return _model_case("external", name, model_bytes, draw,
                       f"{name} {where}: {'; '.join(edits)} data={data_edit}", files=files)


# ------------------------------------------------------------------------------ nesting
def _wire_len(field: int, body: bytes) -> bytes:
    from onnx_lab.core._wire import len_field

    return len_field(field, body)


def nested_if_bytes(depth: int) -> bytes:
    """A model whose main graph holds an If whose then-branch holds an If... ``depth`` deep,
    built at the wire level (protobuf's Python API refuses to build past its limit)."""
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["o0"])], "leaf", [],
                             [helper.make_tensor_value_info("o0", F, [1])])
    graph = leaf_bytes = leaf.SerializeToString()
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    for level in range(depth):
        out = f"o{level + 1}"
        # NodeProto: input(1) output(2) op_type(4) attribute(5); AttributeProto: name(1)
        # g(6) type(20)
        then_attr = (_wire_len(1, b"then_branch") + _wire_len(6, graph) + b"\xa0\x01\x05")
        # the else branch stays a leaf: the size grows linearly with the depth
        else_attr = (_wire_len(1, b"else_branch") + _wire_len(6, leaf_bytes) + b"\xa0\x01\x05")
        node = (_wire_len(1, b"cond") + _wire_len(2, out.encode()) + _wire_len(4, b"If")
                + _wire_len(5, then_attr) + _wire_len(5, else_attr))
        vo = helper.make_tensor_value_info(out, F, [1]).SerializeToString()
        body = _wire_len(1, node) + _wire_len(2, f"g{level}".encode())
        if level + 1 < depth:
            graph = body + _wire_len(12, vo)
        else:
            graph = (body + _wire_len(11, cond.SerializeToString())
                     + _wire_len(11, helper.make_tensor_value_info(
                         "x", F, [1]).SerializeToString()) + _wire_len(12, vo))
    head = helper.make_model(helper.make_graph([], "top", [], []),
                             opset_imports=[helper.make_opsetid("", 17)])
    head.ir_version = 8
    head.ClearField("graph")
    return head.SerializeToString() + _wire_len(7, graph)


@st.composite
def nesting_case(draw) -> dict[str, Any]:
    depth = draw(st.sampled_from([1, 2, 8, 20, 30, 31, 32, 33, 34, 40, 60, 120]))
    return _model_case("nesting", "nested_if", nested_if_bytes(depth), draw,
                       f"If nested {depth} deep")


# ------------------------------------------------------------------------------ history
@st.composite
def history_case(draw) -> dict[str, Any]:
    name = draw(st.sampled_from(["tiny", "constants", "convnet", "transformer", "control_flow",
                                 "tiny_ext", "constants_ext"]))
    data, files = seeds()[name]
    steps: list[tuple] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["apply", "apply", "apply", "undo", "redo"]))
        if kind == "apply":
            steps.append(("apply", draw(st.sampled_from(_passes())), draw(st.booleans())))
        else:
            steps.append((kind,))
    source = draw(st.sampled_from(["path", "path", "mmap", "proto", "ir"]))
    return {"kind": "history", "family": "history", "seed": name,
            "files": {MODEL: data, **files}, "model": MODEL, "source": source,
            "base_dir": "model" if source in ("proto", "ir") and files else None,
            "steps": steps, "desc": f"{name} via {source}: {steps}"}


# ------------------------------------------------------------------------------ CLI
MODEL_ARGS = ["{d}/model/m.onnx", "{d}/model/m.onnx", "{d}/model/missing.onnx", "{d}/model",
              "sample:convnet", "sample:nope", "{d}/model/m.onnx.data"]
BAD_NUMBERS = ["-3", "0", "1", "2", "abc", "1e9", "-0", "nan", "inf", "-inf", "99999999999",
               "99999999999999999999999", "9" * 5000, "1e400", "0x10", " 3"]
BAD_DIMS = ["batch=1", "batch=-1", "batch=99999999999999999999999", "batch=" + "9" * 5000,
            "batch=nan", "batch=1e3", "batch=2,seq=99999999999", "=3", "batch"]


@st.composite
def cli_case(draw) -> dict[str, Any]:
    kind = draw(st.sampled_from(["good", "good", "damaged"]))
    if kind == "good":
        name = draw(st.sampled_from(["tiny", "constants", "tiny_ext", "control_flow"]))
        data, files = seeds()[name]
        desc = name
    else:
        inner = draw(draw(st.sampled_from([field_case(), truncate_case(), external_case(),
                                      structure_case()])))
        data, files = inner["files"][MODEL], {k: v for k, v in inner["files"].items()
                                               if k != MODEL}
        desc = inner["desc"]
    model = draw(st.sampled_from(MODEL_ARGS))
    out = draw(st.sampled_from(["{d}/out/o.onnx", "{d}/out/o.onnx", "{d}/model/m.onnx",
                                "{d}/model/m.onnx.data", "{d}/model/m.onnx/x.onnx",
                                "{d}/model", "{d}/out/sub/o.onnx"]))
    num = st.sampled_from(BAD_NUMBERS)
    cmd = draw(st.sampled_from(["summary", "tables", "weights", "render", "passes", "patterns",
                                "optimize", "extract", "fix-dims", "compare", "diff",
                                "profile", "cost", "check", "bogus", "--help-none", "report",
                                "garbage"]))
    argv: list[str]
    if cmd == "summary":
        argv = ["summary", model] + draw(st.sampled_from([[], ["--json"], ["--dims", "batch=1"],
                                                          ["--dims", "batch"],
                                                          ["--shape", "x:1x3"],
                                                          ["--dims", "nope=2"]]))
    elif cmd == "tables":
        argv = ["tables", model, "--out", draw(st.sampled_from(
            ["{d}/out/t", "{d}/model", "{d}/model/m.onnx", "{d}/out/t/../t2"]))]
    elif cmd == "weights":
        argv = ["weights", model] + draw(st.sampled_from([[], ["--json"], ["--top", draw(num)]]))
    elif cmd == "render":
        argv = ["render", model, "-o", draw(st.sampled_from(
            ["{d}/out/g.dot", "{d}/model/m.onnx", "{d}/out/g.xyz", "{d}/model/m.onnx.data"]))]
        argv += draw(st.sampled_from([[], ["--max-nodes", draw(num)], ["--radius", draw(num)],
                                      ["--timeout", draw(num)], ["--around", "nope"]]))
    elif cmd == "passes":
        argv = ["passes"] + draw(st.sampled_from([[], ["--json"], ["--bogus"]]))
    elif cmd == "patterns":
        argv = ["patterns", model]
    elif cmd == "optimize":
        argv = ["optimize", model, out, "--no-verify"] + draw(st.sampled_from(
            [[], ["--passes", ""], ["--passes", "nope"], ["--preset", "nope"],
             ["--passes", "eliminate_identity"]]))
    elif cmd == "extract":
        argv = ["extract", model, out, "--no-verify"] + draw(st.sampled_from(
            [["--outputs", "a"], ["--inputs", "nope", "--outputs", "y"], [], ["--nodes", "x"]]))
    elif cmd == "fix-dims":
        argv = ["fix-dims", model, out, draw(st.sampled_from(["batch=1", "batch=-1", "batch",
                                                              "nope=3"])), "--no-verify"]
    elif cmd == "compare":
        other = draw(st.sampled_from(["{d}/model/m.onnx", "sample:convnet", "{d}/out/none.onnx"]))
        argv = ["compare", model, other] + draw(st.sampled_from(
            [[], ["--csv", "{d}/out/c.csv"], ["--csv", model], ["--csv", other],
             ["--atol", draw(num)], ["--max-bytes", draw(num)], ["--feeds", "{d}/model/m.onnx"],
             ["--providers", "nope"]]))
    elif cmd == "diff":
        argv = ["diff", model, draw(st.sampled_from(["{d}/model/m.onnx", "sample:convnet"]))]
    elif cmd == "profile":
        argv = ["profile", model, "--runs", draw(st.sampled_from(["1", "2", "-1", "0", "x"])),
                "--warmup", draw(st.sampled_from(["0", "1", "-3"]))]
        argv += draw(st.sampled_from([[], ["--threads", draw(num)], ["--top", draw(num)],
                                      ["--batch-sweep", draw(st.sampled_from(
                                          ["1,2", "-1", "0", "a,b", ""]))],
                                      ["--opt-level", "nope"]]))
    elif cmd == "cost":
        argv = ["cost", model] + draw(st.sampled_from([[], ["--top", draw(num)], ["--json"]]))
    elif cmd == "check":
        argv = ["check", model] + draw(st.sampled_from([[], ["--no-load"], ["--strict"]]))
    elif cmd == "report":
        argv = ["report", model, "-o", draw(st.sampled_from(
            ["{d}/out/r.html", "{d}/model/m.onnx", "{d}/model/m.onnx.data", "/", "{d}/out",
             "{d}/model", "{d}/missing/r.html"])), "--no-tables"]
        argv += draw(st.sampled_from([[], ["--against", "{d}/model/m.onnx"],
                                      ["--max-views", draw(num)], ["--max-nodes", draw(num)]]))
    elif cmd == "garbage":
        argv = draw(st.sampled_from([
            ["profile", model, "--runs", "1", "--threads", draw(num)],
            ["profile", model, "--runs", draw(num)], ["profile", model, "--budget", draw(num)],
            ["summary", "sample:transformer_block", "--dims", draw(st.sampled_from(BAD_DIMS))],
            ["cost", "sample:transformer_block", "--dims", draw(st.sampled_from(BAD_DIMS))],
            ["compare", model, model, "--shape", draw(st.sampled_from(
                ["x:99999999999999x3", "x:-1x3", "x:1x" + "9" * 5000, "x:axb", "x:"]))],
            ["audit", model, "--out", "{d}/out/a", "--scheduler", draw(st.sampled_from(
                ["abc", "tcp://", "tcp://10.0.0.1:99999", "tcp://[::1", ":8786x"]))],
            ["audit", model, "--out", "{d}/out/a", "--workers", draw(num)],
            ["audit", model, "--out", "{d}/out/a", "--memory-gb", draw(num)],
        ]))
    elif cmd == "bogus":
        argv = draw(st.sampled_from([["bogus"], [], ["summary"], ["--verbose"],
                                     ["summary", model, "--unknown"]]))
    else:
        argv = [draw(st.sampled_from(["summary", "compare", "profile", "tables"])), "--help"]
    if draw(st.integers(0, 9)) == 0:
        argv = ["-v", *argv]
    return {"kind": "cli", "family": "cli", "seed": desc, "files": {MODEL: data, **files},
            "model": MODEL, "argv": argv, "desc": f"onnx-lab {' '.join(argv)} [{desc}]"}


# ------------------------------------------------------------------------------ metadata
_DEEP = 60_000
META_KEYS = ["onnx_lab.sources", "onnx_lab.origin", "pkg.torch.onnx.name_scopes",
             "pkg.torch.onnx.class_hierarchy", "pkg.torch.onnx.stack_trace", "namespace"]


def _meta_values(draw) -> str:
    import json

    payload = draw(st.sampled_from(["<img src=x onerror=alert(1)>", "</script><script>x",
                                    "{{7*7}}", "${x}", "$x^2$", "\u202e", "a\"b'c\\"]))
    return draw(st.sampled_from([
        json.dumps([{"path": ["m"], "file": "m.py", "line": payload}]),
        json.dumps([{"path": ["m"], "line": draw(st.sampled_from([1.5, [1], True, -4,
                                                                  10 ** 30, None]))}]),
        json.dumps([{"path": payload}]), json.dumps({"path": ["m"]}), json.dumps([1, None]),
        json.dumps([{"path": [1], "classes": [[1]], "levels": {"a": 1}, "kind": 3}]),
        "[" * _DEEP + "]" * _DEEP, "{" * _DEEP, '{"a":' * 5000,
        "[" + "1," * draw(st.sampled_from([10, 400_000])) + "1]",
        "['', " * 3000, "1" * 100_000, "{'a': 1}", "[" * 200_000,
        json.dumps(["a", ["b"]]), json.dumps([payload, payload]),
        f'File "{payload}", line ' + "9" * 5000 + ", in f\n    x",
        'File "m.py", line 3, in f\n' * 100_000, "/" * 50_000, ": x/" * 20_000,
    ]))


@st.composite
def metadata_case(draw) -> dict[str, Any]:
    name = draw(st.sampled_from(["tiny", "constants", "control_flow", "convnet"]))
    m = seed_proto(name)
    nodes = _nodes(m)
    keys = []
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(META_KEYS))
        value = _meta_values(draw)
        for n in nodes if draw(st.booleans()) else nodes[:1]:
            e = n.metadata_props.add()
            e.key, e.value = key, value
        keys.append(f"{key}={value[:40]!r}")
    if draw(st.booleans()):
        e = m.metadata_props.add()
        e.key, e.value = "imgsz", draw(st.sampled_from(['["a", 1e999]', "[" * _DEEP, "[-1, 2]",
                                                        "640", "[640, 640]"]))
    return _model_case("metadata", name, m.SerializeToString(), draw,
                       f"{name}: {'; '.join(keys)}")


# ------------------------------------------------------------------------------ assembly
def _model_case(family: str, seed: str, data: bytes, draw, desc: str,
                files: dict[str, Any] | None = None) -> dict[str, Any]:
    source = draw(st.sampled_from(["path", "path", "path", "mmap", "bytes", "proto", "ir"]))
    base_dir = None
    if source in ("bytes", "proto", "ir") and draw(st.booleans()):
        base_dir = "model"
    ops = draw(st.sampled_from([OPS, OPS, ["nodes", "tensors", "summary", "check", "save"],
                                ["weights", "save_one", "cost", "render"]]))
    all_files = {MODEL: data, **(files if files is not None else seeds().get(seed, (b"", {}))[1])}
    return {"kind": "model", "family": family, "seed": seed, "files": all_files,
            "model": MODEL, "source": source, "base_dir": base_dir, "ops": list(ops),
            "desc": f"[{family}] {desc} via {source}" + (" base_dir" if base_dir else "")}


FAMILIES = {
    "random": (random_case, 4), "truncate": (truncate_case, 8), "bitflip": (bitflip_case, 12),
    "bytes": (bytes_case, 6), "field": (field_case, 26), "structure": (structure_case, 10),
    "external": (external_case, 14), "nesting": (nesting_case, 3),
    "history": (history_case, 6), "cli": (cli_case, 11), "metadata": (metadata_case, 6),
}


@st.composite
def cases(draw) -> dict[str, Any]:
    """One fuzz case of any family (weights above)."""
    names = [n for n, (_, w) in FAMILIES.items() for _ in range(w)]
    family = draw(st.sampled_from(names))
    return draw(FAMILIES[family][0]())
