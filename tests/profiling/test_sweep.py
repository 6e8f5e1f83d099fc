"""levels(), batch_sweep() with the knee, thread_sweep()."""

from __future__ import annotations

import math

import pytest

import onnx_lab
from onnx_lab.errors import DimError, InputError
from onnx_lab.profiling import batch_sweep, levels, thread_sweep
from onnx_lab.profiling.sweep import find_knee


def test_levels_table():
    lab = onnx_lab.open("sample:convnet")
    df = levels(lab, runs=2, warmup=1)
    assert df.opt_level.tolist() == ["disable", "basic", "extended", "all"]
    # Issue 17 adds the spread, the interval of the median and a verdict after the old columns.
    assert list(df.columns) == ["opt_level", "init_ms", "mean_ms", "p50_ms", "p90_ms", "std_ms",
                                "nodes", "nodes_model", "speedup", "runs", "p10_ms",
                                "ci_low_ms", "ci_high_ms", "rel_ci", "verdict"]
    assert df.nodes.iloc[0] == df.nodes_model.iloc[0] == lab.model.graph.num_nodes()
    # basic removes Identity/Dropout and folds BN into Conv; extended fuses Conv+Relu.
    assert df.nodes.iloc[1] < df.nodes.iloc[0]
    assert df.nodes.iloc[2] <= df.nodes.iloc[1]
    assert (df.init_ms > 0).all() and (df.mean_ms > 0).all()
    assert df.speedup.iloc[0] == 1.0


def test_batch_sweep_transformer():
    s = batch_sweep("sample:transformer_block", (1, 2, 4), dims={"seq": 8}, runs=2, warmup=1)
    t = s.table
    assert t.batch.tolist() == [1, 2, 4]
    assert (t.items_per_s > 0).all()
    assert math.isclose(t.items_per_s.iloc[1], 2 / (t.latency_ms.iloc[1] / 1e3))
    assert math.isnan(t.gain_per_doubling.iloc[0])
    assert s.knee is None or s.knee in (1, 2)
    assert s.dim == "batch"
    fig = s.plot()
    assert fig.axes
    assert "knee" in s._repr_html_()


def test_batch_sweep_lab_dims_override():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 4})
    s = batch_sweep(lab, (2, 4), runs=1, warmup=0)
    assert s.table.batch.tolist() == [2, 4]


def test_batch_sweep_needs_dynamic_batch():
    with pytest.raises(DimError, match="no dynamic dim 'batch'") as e:
        batch_sweep("sample:convnet", (1, 2))
    assert "fix_dims" in str(e.value) and "shapes=" in str(e.value)
    with pytest.raises(DimError, match="'batch', 'seq'"):
        batch_sweep("sample:transformer_block", (1, 2), dim="N", dims={"seq": 4})


def test_batch_sweep_other_dims_unresolved():
    with pytest.raises(DimError, match="seq"):
        batch_sweep("sample:transformer_block", (1, 2), runs=1)


@pytest.mark.parametrize("sizes", [(), (0, 1), (4, 2), (1, 1.5)])
def test_batch_sweep_bad_sizes(sizes):
    with pytest.raises(InputError, match="batch_sizes"):
        batch_sweep("sample:transformer_block", sizes, dims={"seq": 4})


def test_find_knee():
    # Throughput: x2.0, x1.5, x1.1 -> the knee is 4 (doubling 4 -> 8 gains < 1.2x).
    knee, gains = find_knee([1, 2, 4, 8], [100, 200, 300, 330])
    assert knee == 4
    assert math.isnan(gains[0]) and gains[1:] == pytest.approx([2.0, 1.5, 1.1])
    # A 4x step counts per doubling: 1.44x over two doublings is 1.2x each (not a knee).
    knee, gains = find_knee([1, 4], [100, 144.01])
    assert knee is None and gains[1] == pytest.approx(1.2, abs=1e-3)
    assert find_knee([1, 2], [100, 100])[0] == 1


def test_thread_sweep():
    df = thread_sweep("sample:convnet", (1, 2), runs=2, warmup=1)
    assert df.threads.tolist() == [1, 2] and df.speedup.iloc[0] == 1.0
    with pytest.raises(InputError, match="threads"):
        thread_sweep("sample:convnet", (0,))


@pytest.mark.parametrize("sample", ["sample:convnet", "sample:control_flow"])
def test_levels_node_counts_match_ort_optimized_graph(sample, tmp_path):
    # The count comes from the timed session's one profiled run (or, with subgraphs, from a
    # written optimized model): it must equal the nodes ORT writes out, bodies included.
    import onnx

    from onnx_lab.runtime.session import make_session

    def count(g):
        return len(g.node) + sum(count(a.g) for n in g.node for a in n.attribute
                                 if a.HasField("g"))

    lab = onnx_lab.open(sample)
    df = levels(lab, runs=1, warmup=0, progress=False)
    for level, nodes in zip(df.opt_level, df.nodes, strict=True):
        path = tmp_path / f"{level}.onnx"
        make_session(lab.model, opt_level=level, optimized_model_path=str(path))
        assert nodes == count(onnx.load(str(path), load_external_data=False).graph), level
    assert (df.nodes_model == len(lab.model.index)).all()


def test_batch_sweep_of_an_unnamed_batch_dim_says_so(tmp_path):
    # scikit-learn and LightGBM exports declare X [None, 6]: dynamic, but unnamed. The error
    # said "its inputs have fixed shapes"; its fix, followed, sweeps.
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("LinearRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
                            name="lin", coefficients=np.arange(6.0).tolist(), intercepts=[0.5])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                      [None, 6])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 15),
                                            helper.make_operatorsetid("ai.onnx.ml", 1)])
    path = tmp_path / "linear.onnx"
    onnx.save(m, path)
    with pytest.raises(DimError, match="unnamed") as e:
        batch_sweep(str(path), (1, 2))
    assert "fixed shapes" not in str(e.value)
    assert "lab.set_input_shape('X', ['batch', 6])" in str(e.value)
    lab = onnx_lab.open(path, shapes={"X": [1, 6]})
    lab.set_input_shape("X", ["batch", 6])
    assert lab.batch_sweep((1, 2), runs=1, warmup=0).table.batch.tolist() == [1, 2]


def test_levels_count_the_fusions_inside_a_loop_body():
    # a Loop whose body holds a MatMul + Add that 'basic' fuses into a Gemm: levels counted
    # the main graph alone (1 node, the Loop, at every level; nodes_model 1)
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["xin", "w"], ["m"], name="mm"),
         helper.make_node("Add", ["m", "b"], ["xout"], name="add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond")], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("xin", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("xout", TensorProto.FLOAT, [4, 8])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["n", "c", "x"], ["y"], name="loop", body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
         numpy_helper.from_array(np.array(3, np.int64), "n"),
         numpy_helper.from_array(np.array(True), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    df = levels(m, runs=1, warmup=0, progress=False).set_index("opt_level")
    assert (df.nodes_model == 4).all()
    assert df.loc["disable", "nodes"] == 4
    assert df.loc["basic", "nodes"] < df.loc["disable", "nodes"]
