"""core._wire.split_raw_data: large weights leave the message, everything else stays byte for
byte (nodes between and after them included)."""

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_lab.core._wire import iter_fields, split_raw_data


def _model(sizes):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"w{i}")
             for i, n in enumerate(sizes)]
    nodes = [helper.make_node("Identity", [f"w{i}"], [f"y{i}"], name=f"n{i}")
             for i in range(len(sizes))]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info(f"y{i}", 1, None)
                                               for i in range(len(sizes))], inits)
    return helper.make_model(graph)


def test_large_raw_data_is_cut_out_and_located():
    model = _model([10, 20_000, 5, 70_000, 3])
    data = model.SerializeToString()
    stripped, spans = split_raw_data(data, 1 << 16)
    assert [k for k, *_ in spans] == [1, 3]
    back = onnx.ModelProto.FromString(stripped)
    want = onnx.ModelProto()
    want.CopyFrom(model)
    for k, offset, length in spans:
        assert data[offset:offset + length] == model.graph.initializer[k].raw_data
        want.graph.initializer[k].ClearField("raw_data")
    assert back == want  # nodes, small weights, inputs and outputs unchanged


def test_nothing_large_returns_the_bytes_themselves():
    data = _model([10, 20, 30]).SerializeToString()
    stripped, spans = split_raw_data(data, 1 << 16)
    assert stripped is data and spans == []


def test_fields_with_long_lengths_and_keys_are_walked():
    # a length of 128 or more takes two varint bytes; field 13 (value_info) one key byte
    model = _model([200, 40])
    model.graph.value_info.append(helper.make_tensor_value_info("y0", 1, ["n" * 300]))
    data = model.SerializeToString()
    fields = [f for f, *_ in iter_fields(data, 0, len(data))]
    assert 7 in fields  # the graph
    stripped, spans = split_raw_data(data, 500)  # w0: 800 bytes, w1: 160
    assert [k for k, *_ in spans] == [0]
    assert onnx.ModelProto.FromString(stripped).graph.value_info[0].name == "y0"
