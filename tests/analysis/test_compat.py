"""check(): compatibility findings from the checker, the graph and real session loads."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import fp16_model, reshape_computed_shape, save_external
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.analysis import compat
from onnx_lab.analysis.compat import FINDING_COLUMNS, check
from onnx_lab.runtime.session import ort_max_opsets

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17, extra=None, ir_version=None):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)] + [
        helper.make_opsetid(d, v) for d, v in (extra or {}).items()])
    if ir_version:
        m.ir_version = ir_version
    return m


def _vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def _codes(df):
    return set(df.code)


def test_clean_model_has_no_findings():
    df = check("sample:convnet")
    assert list(df.columns) == FINDING_COLUMNS
    assert len(df) == 0
    assert len(onnx_lab.open("sample:convnet").check(load=False)) == 0


def test_value_dependent_shapes_and_custom_domains():
    m = _model([helper.make_node("NonZero", ["x"], ["idx"]),
                helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft"),
                helper.make_node("Foo", ["x"], ["f"], domain="my.custom"),
                helper.make_node("TopK", ["x", "k"], ["v", "i"]),
                helper.make_node("TopK", ["x", "k2"], ["v2", "i2"])],
               [_vi("x", [6]), _vi("k", [1], TensorProto.INT64)],
               [_vi("idx", [1, None], TensorProto.INT64), _vi("g", [6]), _vi("f", [6]),
                _vi("v", [None]), _vi("v2", [2])],
               [numpy_helper.from_array(np.array([2], np.int64), "k2")],
               extra={"com.microsoft": 1, "my.custom": 1})
    df = check(m)
    by = {(r.code, r.node_id): r for r in df.itertuples()}
    assert by[("value_dependent_shape", "NonZero_0")].severity == "warning"
    topk = by[("value_dependent_shape", "TopK_3")]
    assert "'k'" in topk.message and topk.severity == "warning"
    assert ("value_dependent_shape", "TopK_4") not in by  # constant k: static shape
    gelu = by[("custom_domain", "Gelu_1")]
    assert "contrib op" in gelu.message
    foo = by[("custom_domain", "Foo_2")]
    assert "custom op" in foo.message and "register_custom_ops_library" in foo.fix
    # The real CPU session refuses the unknown op and names it.
    load = df.loc[df.code == "provider_load"]
    assert len(load) == 1 and load.node_id.iloc[0] == "Foo_2"
    assert "my.custom::Foo" in load.message.iloc[0] and load.severity.iloc[0] == "error"
    # Errors come first.
    sev = df.severity.tolist()
    assert sev == sorted(sev, key=["error", "warning", "info"].index)


def test_opset_above_onnxruntime():
    top = ort_max_opsets()[""]
    assert top >= 17
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])],
               opset=top + 1)
    df = check(m, load=False)
    row = df.loc[df.code == "opset_unsupported"].iloc[0]
    assert row.severity == "error" and f"({top})" in row.message
    assert f"convert_opset({top})" in row.fix


def test_checker_error_names_the_problem():
    m = _model([helper.make_node("Relu", ["x", "x"], ["y"], name="bad_relu")],
               [_vi("x", [2])], [_vi("y", [2])])
    df = check(m, load=False)
    row = df.loc[df.code == "checker"].iloc[0]
    assert row.severity == "error" and "onnx.checker" in row.message


def test_dynamic_dims_info():
    df = check("sample:transformer_block", load=False)
    assert _codes(df) == {"dynamic_dim"}
    assert set(df.severity) == {"info"}
    msgs = " ".join(df.message)
    assert "'batch'" in msgs and "'seq'" in msgs
    assert any("fix_dims" in f for f in df.fix)


def test_dims_of_inputs_whose_shapes_were_given_ask_for_nothing():
    # an skl2onnx model opened with shapes={'X': [3, 4]} was still told to pass shapes=
    m = _model([helper.make_node("Relu", ["X"], ["y"])], [_vi("X", [None, 4])],
               [_vi("y", [None, 4])])
    row = onnx_lab.open(m, shapes={"X": [3, 4]}).check().iloc[0]
    assert row.code == "dynamic_dim" and "X [3, 4] here (the shapes given)" in row.message
    assert row.fix.startswith("Nothing to pass") and "set_input_shape('X', [3, 4])" in row.fix
    row = onnx_lab.open(m).check().iloc[0]  # not given: how to give it
    assert "Pass shapes={'X': [...]}" in row.fix
    df = onnx_lab.open("sample:transformer_block", shapes={"x": [1, 8, 32]}).check()
    assert set(df.loc[df.code == "dynamic_dim"].fix.str[:15]) == {"Nothing to pass"}


def test_a_decoders_total_length_is_the_value_the_dims_give():
    # it said "filled in once those are given" with the past and new lengths given, and its
    # fix_dims advice fixed the total alone
    lab = onnx_lab.open("sample:tiny_llm", dims={"batch_size": 1, "sequence_length": 1,
                                                 "past_sequence_length": 4})
    df = lab.check()
    row = df.loc[df.message.str.contains("'total_sequence_length'")].iloc[0]
    assert "5 here (past_sequence_length + sequence_length)" in row.message
    assert "lab.fix_dims({'past_sequence_length': 4, 'sequence_length': 1})" in row.fix
    df = onnx_lab.open("sample:tiny_llm").check()  # not given: how to give it
    row = df.loc[df.message.str.contains("'total_sequence_length'")].iloc[0]
    assert "filled in once those are given" in row.message


def test_external_data_sizes_and_missing_file(tmp_path):
    m = onnx_lab.samples.build("convnet")
    path = save_external(m, tmp_path / "net.onnx", size_threshold=1024)
    df = check(str(path))
    ext = df.loc[df.code == "external_data"]
    assert len(ext) == 1 and "net.onnx.data" in ext.message.iloc[0]
    assert "tensors" in ext.message.iloc[0] and ext.severity.iloc[0] == "info"
    assert not (df.severity == "error").any()
    lab = onnx_lab.open(str(path))
    # The data file vanishes after opening: an error naming the file, before any run.
    (tmp_path / "net.onnx.data").unlink()
    df = check(lab, load=False)
    miss = df.loc[df.code == "external_data_missing"]
    assert len(miss) == 1 and miss.severity.iloc[0] == "error"
    assert "net.onnx.data" in miss.message.iloc[0]


def test_truncated_external_data(tmp_path):
    path = save_external(onnx_lab.samples.build("convnet"), tmp_path / "t.onnx",
                         size_threshold=1024)
    lab = onnx_lab.open(str(path))
    data = tmp_path / "t.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    df = check(lab, load=False)
    assert "truncated" in df.loc[df.code == "external_data_missing"].fix.iloc[0]


def test_fp16_and_bf16():
    df = check(fp16_model(), load=False)
    row = df.loc[df.code == "low_precision"].iloc[0]
    assert row.severity == "info" and "float16" in row.message
    m = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)],
               [_vi("x", [2])], [_vi("y", [2], TensorProto.BFLOAT16)])
    df = check(m, load=False)
    row = df.loc[df.code == "low_precision"].iloc[0]
    assert row.severity == "warning" and "bfloat16" in row.message


def test_proto_size_thresholds(monkeypatch):
    # The thresholds are constants; lowering them lets a small model cross them.
    monkeypatch.setattr(compat, "_PROTO_WARN", 1000)
    df = check("sample:convnet", load=False)
    assert df.loc[df.code == "proto_size"].severity.tolist() == ["warning"]
    monkeypatch.setattr(compat, "_PROTO_LIMIT", 2000)
    df = check("sample:convnet", load=False)
    row = df.loc[df.code == "proto_size"].iloc[0]
    assert row.severity == "error" and "external_data" in row.fix


def test_model_local_function_is_info():
    f = helper.make_function("my.fn", "Double", ["a"], ["b"],
                             [helper.make_node("Add", ["a", "a"], ["b"])],
                             [helper.make_opsetid("", 17)])
    m = _model([helper.make_node("Double", ["x"], ["y"], domain="my.fn")], [_vi("x", [2])],
               [_vi("y", [2])], extra={"my.fn": 1})
    m.functions.append(f)
    df = check(m)
    assert _codes(df) == {"model_local_function"}
    assert df.severity.tolist() == ["info"]


def test_unknown_provider_for_loads():
    from onnx_lab.errors import ProviderError

    with pytest.raises(ProviderError):
        check("sample:convnet", providers="nosuch")


def test_onnx_checker_is_real():
    # A model onnx.checker accepts yields no checker finding.
    m = onnx_lab.samples.build("transformer_block")
    onnx.checker.check_model(m, full_check=True)
    assert "checker" not in _codes(check(m, load=False))


def test_computed_reshape_targets():
    # A target computed from shapes resolves once dims are concrete: no finding.
    assert "value_dependent_shape" not in _codes(check(reshape_computed_shape(), load=False))
    # A target read from a graph input depends on values.
    m = _model([helper.make_node("Reshape", ["x", "s"], ["y"])],
               [_vi("x", [6]), _vi("s", [2], TensorProto.INT64)], [_vi("y", None)])
    df = check(m, load=False)
    row = df.loc[df.code == "value_dependent_shape"].iloc[0]
    assert row.node_id == "Reshape_0" and row.severity == "info" and "'s'" in row.message


@pytest.mark.parametrize("ir_version", [3, 8])
def test_initializers_listed_as_inputs(ir_version):
    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
               [_vi("x", [2, 2]), _vi("w", [2, 2])], [_vi("y", [2, 2])], [w], opset=13,
               ir_version=ir_version)
    df = check(m, load=False)
    rows = df[df.code == "initializer_input"]
    if ir_version < 4:  # required by IR 3, and constants there: nothing to report
        assert rows.empty
    else:
        assert len(rows) == 1 and rows.iloc[0]["severity"] == "warning"
        assert "1 initializer(s)" in rows.iloc[0]["message"] and "(w)" in rows.iloc[0]["message"]
        assert "remove_initializer_inputs" in rows.iloc[0]["fix"]


def _weighted(nodes, w=None):
    """x[4, 2000] @ W (a 32 KB weight: above the skeleton's inline limit)."""
    w = np.ones((2000, 4), np.float32) if w is None else w
    return _model(nodes, [_vi("x", [4, 2000])], [_vi("y", [4, 4])],
                  [w if isinstance(w, TensorProto) else numpy_helper.from_array(w, "W")])


def test_checker_runs_on_a_weight_free_skeleton_and_still_checks_weights():
    ok = _weighted([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")])
    assert "checker" not in _codes(check(ok, load=False))
    # Node problems are found with the weight left out of the checked proto...
    bad = _weighted([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm", bogus=1)])
    assert (check(bad, load=False).code == "checker").any()
    # ...strict shape inference still sees the weight's dims (2000x4 against x[4, 3])...
    bad = _weighted([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
                    np.ones((3, 4), np.float32))
    bad.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 2000
    row = check(bad, load=False).loc[lambda d: d.code == "checker"]
    assert len(row) == 1 and "strict shape inference" in row.iloc[0].message
    # ...and each weight is checked on its own (data that does not match its dims).
    t = numpy_helper.from_array(np.ones((2000, 4), np.float32), "W")
    t.raw_data = t.raw_data[:-8]
    bad = _weighted([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], t)
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_tensor(t)
    rows = check(bad, load=False).loc[lambda d: d.code == "checker"]
    assert len(rows) >= 1 and "'W'" in " ".join(rows.message)


def test_session_loads_are_cached_per_model_version():
    lab = onnx_lab.open(_weighted([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")]))
    assert len(lab.check()) == 0
    assert list(lab.model.cached(("compat", "loads"), None)) == ["CPUExecutionProvider"]
    # It loaded the weight-free skeleton: the model itself was never serialized for ORT.
    assert lab.model.is_cached(("compat", "skeleton"))
    assert not lab.model.is_cached(("runtime", "light_graph"))
    assert not lab.model.is_cached(("runtime", "runtime_proto"))
    m = _model([helper.make_node("Foo", ["x"], ["y"], domain="my.ops")], [_vi("x", [2])],
               [_vi("y", [2])], extra={"my.ops": 1})
    lab = onnx_lab.open(m)
    first = lab.check().loc[lambda d: d.code == "provider_load"]
    # A failing skeleton load is confirmed on the model itself before it is reported.
    assert lab.model.is_cached(("runtime", "light_graph"))
    again = lab.check().loc[lambda d: d.code == "provider_load"]
    assert len(first) == 1 and first.equals(again)


def test_runtime_constants_warning_names_bytes_and_fold():
    w = helper.make_node("ConstantOfShape", ["wshape"], ["W"], name="make_w",
                         value=numpy_helper.from_array(np.array([0.5], np.float32)))
    m = _model([w, helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
               [_vi("x", [2, 64])], [_vi("y", [2, 64])],
               [numpy_helper.from_array(np.array([64, 64], np.int64), "wshape")])
    lab = onnx_lab.open(m)
    rows = lab.check(load=False).loc[lambda d: d.code == "runtime_constants"]
    assert len(rows) == 1
    row = rows.iloc[0]
    assert row.severity == "warning" and row.node_id == "make_w"
    assert "16,384 bytes" in row.message and "fold_constants" in row.fix
    assert lab.apply("fold_constants").modified
    assert "runtime_constants" not in _codes(lab.check(load=False))


def test_the_runtime_constants_fix_clears_the_warning_past_the_growth_guard():
    # light ResNet-50's 102 MB of ConstantOfShape weights: the fix said
    # lab.apply('fold_constants'), whose 16 MB guard left 43 of them (81.6 MB) computed
    import re

    shape = numpy_helper.from_array(np.array([1024, 1024], np.int64), "wshape")
    nodes = [helper.make_node("ConstantOfShape", ["wshape"], [f"W{i}"], name=f"make_w{i}",
                              value=numpy_helper.from_array(np.array([0.5], np.float32)))
             for i in range(6)]  # 6 x 4 MB
    nodes += [helper.make_node("MatMul", ["x", "W0"], ["y0"])]
    nodes += [helper.make_node("MatMul", [f"y{i - 1}", f"W{i}"], [f"y{i}"]) for i in range(1, 6)]
    lab = onnx_lab.open(_model(nodes, [_vi("x", [2, 1024])], [_vi("y5", [2, 1024])], [shape]))
    assert lab.apply("fold_constants").modified
    fix = lab.check(load=False).set_index("code").loc["runtime_constants", "fix"]
    n = int(re.search(r"max_growth_bytes=([0-9_]+)", fix).group(1))
    lab.apply("fold_constants", max_growth_bytes=n)
    assert "runtime_constants" not in _codes(lab.check(load=False))


# --------------------------------------------------------------------------- decoder LLMs
def _rms(domain: str = "", op: str = "SimplifiedLayerNormalization", bogus: bool = False):
    """x -> Relu -> r -> an RMSNorm op -> Relu -> y; ``bogus`` puts an attribute ONNX
    rejects on the last Relu."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node(op, ["r", "g"], ["n"], name="norm", domain=domain, epsilon=1e-5),
             helper.make_node("Relu", ["n"], ["y"], name="relu2",
                              **({"bogus": 1} if bogus else {}))]
    extra = {domain: 1} if domain else None
    return _model(nodes, [_vi("x", [2, 8])], [_vi("y", [2, 8])],
                  [numpy_helper.from_array(np.ones(8, np.float32), "g")], opset=22, extra=extra)


def test_onnxruntimes_default_domain_ops_are_a_warning_not_an_error():
    df = check(_rms())
    assert not (df.severity == "error").any(), df.message.tolist()
    row = df.loc[df.code == "onnxruntime_op"].iloc[0]
    assert row.severity == "warning" and "SimplifiedLayerNormalization" in row.message
    assert "onnxruntime only" in row.message and row.node_id == "norm"
    # The rest of the model is still checked: a bad attribute after the op is an error.
    df = check(_rms(bogus=True), load=False)
    assert (df.loc[df.code == "checker", "severity"] == "error").all()
    assert (df.code == "checker").any()
    # A default-domain op neither ONNX nor onnxruntime knows stays an error.
    df = check(_rms(op="MadeUpNorm"), load=False)
    assert (df.loc[df.code == "checker", "severity"] == "error").any()
    assert "onnxruntime_op" not in _codes(df)


def test_contrib_ops_onnxruntime_registers_and_one_it_does_not():
    df = check(_rms("com.microsoft", "SkipSimplifiedLayerNormalization"), load=False)
    row = df.loc[df.code == "custom_domain"].iloc[0]
    assert row.severity == "warning" and "onnxruntime only" in row.message
    df = check(_rms("com.microsoft", "NoSuchFusedOp"), load=False)
    row = df.loc[df.code == "custom_domain"].iloc[0]
    assert "registers no such op" in row.message


def test_stale_value_info_of_an_intermediate_is_a_warning():
    """onnxruntime-genai's builder declares a Constant's [1] output as a scalar: onnxruntime
    runs the model, strict shape inference refuses it."""
    m = _rms()
    m.graph.value_info.append(_vi("r", [3]))  # wrong rank for [2, 8]
    df = check(m)
    assert not (df.severity == "error").any(), df.message.tolist()
    row = df.loc[df.code == "stale_value_info"].iloc[0]
    assert row.severity == "warning" and "'r'" in row.message
    # A graph output's declared shape is not stale value_info: still an error.
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x", [2, 8])],
               [_vi("y", [3])])
    df = check(m, load=False)
    assert "stale_value_info" not in _codes(df)
    assert (df.loc[df.code == "checker", "severity"] == "error").any()


@pytest.mark.parametrize("source", ["sample:tiny_llm", "sample:tiny_llm_int4"])
def test_decoder_llm_samples_check_clean(source):
    df = check(source)
    assert not (df.severity == "error").any(), df.message.tolist()
    assert {"onnxruntime_op", "custom_domain"} <= _codes(df)


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_genai_built_model_checks_without_errors(genai_model, precision):
    df = check(genai_model(precision))
    assert not (df.severity == "error").any(), df.message.tolist()
    assert "onnxruntime_op" in _codes(df)


def test_unpairable_kv_cache_is_named_and_a_paired_one_is_silent():
    m = _model([helper.make_node("Identity", ["past_key_values.0.key"], ["present.0.key"]),
                helper.make_node("Identity", ["past_key_values.0.value"], ["present.1.value"])],
               [_vi("past_key_values.0.key", [1, 2, 3, 4]),
                _vi("past_key_values.0.value", [1, 2, 3, 4])],
               [_vi("present.0.key", [1, 2, 3, 4]), _vi("present.1.value", [1, 2, 3, 4])])
    row = check(m, load=False).loc[lambda d: d.code == "kv_cache_pairing"].iloc[0]
    assert row.severity == "warning"
    assert "'past_key_values.0.value'" in row.message and "'present.1.value'" in row.message
    assert "kv_cache_pairing" not in _codes(check("sample:tiny_llm", load=False))


def _normalizer(locale: str) -> onnx.ModelProto:
    """A StringNormalizer (skl2onnx's text vectorizers start with one) naming a locale."""
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("StringNormalizer", ["text"], ["norm"], name="sn",
                          case_change_action="LOWER", locale=locale)], "g",
        [helper.make_tensor_value_info("text", TensorProto.STRING, [3])],
        [helper.make_tensor_value_info("norm", TensorProto.STRING, [3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_locale_the_machine_lacks_is_named_with_the_fix_and_onnxruntime_stays_quiet(capfd):
    # skl2onnx's CountVectorizer leaves the locale to onnxruntime's default, en_US.UTF-8,
    # which slim images lack: check() and every step blamed a missing op or provider, and
    # onnxruntime printed its own coloured ERROR lines to stderr before the one-line error
    import onnx_lab
    from onnx_lab.errors import PassError

    lab = onnx_lab.open(_normalizer("xx_NOWHERE.UTF-8"))
    rows = lab.check().query("code == 'provider_load'")
    assert len(rows) == 1 and rows.node_id.iloc[0] == "sn"
    assert "no locale 'xx_NOWHERE.UTF-8'" in rows.message.iloc[0]
    assert "lab.set_attribute('sn', 'locale', 'C.UTF-8', verify=False)" in rows.fix.iloc[0]
    with pytest.raises(PassError) as e:
        lab.apply("ort:extended")
    assert "--set-attr 'sn:locale=C.UTF-8' --no-verify" in e.value.fix
    assert "onnxruntime" not in capfd.readouterr().err
    lab.set_attribute("sn", "locale", "C", verify=False)  # a locale every machine has
    r = lab.apply("ort:extended")
    assert r.verify_passed in (True, None)


def test_a_dim_name_is_quoted_as_data_in_the_suggested_code():
    # a dim named "b': 1}) or __import__('os').system('...') or ({'b" made the suggested
    # lab.fix_dims(...) run a command when pasted
    import ast

    evil = "b': 1}) or __import__('os').system('echo INJECTED') or ({'b"
    h = onnx.helper
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g",
                     [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [evil, 4])],
                     [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [evil, 4])])
    df = check(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), load=False)
    fixes = [f for f in df.fix if "fix_dims(" in f]
    assert fixes
    for fix in fixes:
        for code in (fix[fix.index("fix_dims(") + 9:fix.rindex(")")],
                     fix[fix.index("dims=") + 5:fix.index(" / shapes=")]):
            assert ast.literal_eval(code) == {evil: 1}  # a plain dict literal, nothing else


def test_inputs_no_node_reads_are_a_warning_with_a_fix_that_works():
    # tf2onnx leaves a Keras Normalization's mean and variance as inputs nothing reads; a
    # default onnxruntime session refuses to run without them, and check() said nothing
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
               [_vi("x", [2]), _vi("mean", [2])], [_vi("y", [2])])
    lab = onnx_lab.open(m)
    row = lab.check().set_index("code").loc["unread_input"]
    assert row.severity == "warning" and "('mean')" in row.message
    assert "lab.extract(inputs=['x'], outputs=['y'])" in row.fix
    fixed = lab.extract(inputs=["x"], outputs=["y"])
    assert [v.name for v in fixed.model.graph.inputs] == ["x"]
    assert "unread_input" not in set(fixed.check().code)
    assert "unread_input" not in set(onnx_lab.open("sample:control_flow").check().code)
    # an input that is also a graph output passes through: it is read
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
               [_vi("x", [2]), _vi("z", [2])], [_vi("y", [2]), _vi("z", [2])])
    assert "unread_input" not in set(onnx_lab.open(m).check().code)


def _op23(text: str):
    return onnx.parser.parse_model('<ir_version: 10, opset_import: ["" : 23]>\n' + text)


@pytest.mark.parametrize("text, dims, bad", [
    # torch 2.13's opset-23 export: a cos/sin cache of batch 1 beside a dynamic batch
    ("g (float[b,2,8,16] x, float[1,8,8] c, float[1,8,8] s) => (float[b,2,8,16] y) "
     "{ y = RotaryEmbedding(x, c, s) }", {"b": 2}, "has batch 1 while its input has 2"),
    ("g (float[b,2,8,16] x, float[1,8,8] c, float[1,8,8] s) => (float[b,2,8,16] y) "
     "{ y = RotaryEmbedding(x, c, s) }", {"b": 1}, None),
    ("g (float[1,4,8,16] q, float[1,3,8,16] k, float[1,3,8,16] v) => (float[1,4,8,16] y) "
     "{ y = Attention(q, k, v) }", {}, "4 query heads are not a multiple of its 3"),
    ("g (float[1,4,8,16] q, float[1,2,8,16] k, float[1,2,8,16] v, float[8,5] m) "
     "=> (float[1,4,8,16] y) { y = Attention(q, k, v, m) }", {}, "ends in 5 while the "
     "key/value length is 8"),
    ("g (float[1,4,8,16] q, float[1,2,8,16] k, float[1,2,8,16] v, float[8,8] m) "
     "=> (float[1,4,8,16] y) { y = Attention(q, k, v, m) }", {}, None),
    ("g (float[2,16] x, float[8] g) => (float[2,16] y) { y = RMSNormalization<axis=1>(x, g) }",
     {}, "of shape [8] does not broadcast to the normalized dims [16]"),
    ("g (float[2,16] x, float[16] g) => (float[2,16] y) { y = RMSNormalization<axis=1>(x, g) }",
     {}, None),
])
def test_op_contracts_inference_does_not_check(text, dims, bad):
    # models whose shapes are all known and that onnxruntime refuses when they run: check()
    # said nothing
    import onnxruntime as ort

    from onnx_lab.runtime.feeds import make_feeds

    m = _op23(text)
    lab = onnx_lab.open(m, dims=dims)
    rows = lab.check(load=False)
    found = rows[rows.code == "op_contract"]
    if bad is None:
        assert found.empty, found.message.tolist()
    else:
        assert len(found) == 1 and bad in found.message.iloc[0], rows.message.tolist()
        assert found.severity.iloc[0] == "error"
    # the truth: a fresh onnxruntime session at those dims
    try:
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, make_feeds(lab))
        ran = True
    except Exception:  # noqa: BLE001 - any refusal
        ran = False
    assert ran == (bad is None)


def _baked(tmp_path, second, extra_nodes=(), out_shape=("batch", "seq", 32)):
    """x [batch, seq, 32] added to a constant: a TorchScript export traced at seq 8 keeps
    torch.arange(8)'s position embeddings as a [8, 32] constant."""
    nodes = [helper.make_node("Add", ["x", "pos"], ["h"], name="/Add"), *extra_nodes]
    last = extra_nodes[-1].output[0] if extra_nodes else "h"
    m = _model(nodes, [_vi("x", ["batch", "seq", 32])], [_vi(last, list(out_shape))],
               [numpy_helper.from_array(np.ones(second, np.float32), "pos")])
    path = tmp_path / "baked.onnx"
    onnx.save(m, path)
    return path


def test_a_dim_the_graph_fixes_is_a_warning(tmp_path):
    import onnxruntime as ort

    path = _baked(tmp_path, (8, 32))
    df = check(path, load=False)
    row = df.loc[df.code == "baked_dim"].iloc[0]
    assert row.severity == "warning" and row.node_id == "/Add"
    assert "'seq'" in row.message and "'seq' = 8 (or 1)" in row.message
    assert "dims={'seq': 8}" in row.fix and "dynamo=True" in row.fix
    assert (df.code == "baked_dim").sum() == 1  # batch stays free
    # what the warning says, onnxruntime does: seq 8 runs, seq 5 does not
    sess = ort.InferenceSession(str(path))
    sess.run(None, {"x": np.ones((2, 8, 32), np.float32)})
    with pytest.raises(Exception, match="broadcast"):
        sess.run(None, {"x": np.ones((2, 5, 32), np.float32)})
    # A Reshape to a fixed shape fixes every free dim it reads.
    path = _baked(tmp_path, (32,), [helper.make_node("Reshape", ["h", "to"], ["y"], name="/R")],
                  out_shape=(2, 8, 4, 8))
    m = onnx.load(path)
    m.graph.initializer.append(numpy_helper.from_array(np.array([2, 8, 4, 8]), "to"))
    onnx.save(m, path)
    rows = check(path, load=False).query("code == 'baked_dim'")
    assert sorted(rows.message.str.extract(r"Input dim '(\w+)'")[0]) == ["batch", "seq"]
    assert set(rows.node_id) == {"/R"} and "fixed shape [2, 8, 4, 8]" in rows.message.iloc[0]


def test_a_baked_dim_message_shows_an_unknown_dim_as_a_question_mark(tmp_path):
    """The broadcast's result can hold dims inference does not know: they read '?', not
    'None' (the expanded Attention of onnx's tests with free inputs: 'to [2, None, None, 6]')."""
    m = _model([helper.make_node("Add", ["x", "y"], ["h"], name="/Add")],
               [_vi("x", ["batch", "seq"]), _vi("y", [None, 8])], [_vi("h", None)])
    path = tmp_path / "unknown.onnx"
    onnx.save(m, path)
    rows = check(path, load=False).query("code == 'baked_dim'")
    assert len(rows) == 1 and "'seq' = 8" in rows.message.iloc[0]
    assert "[?, 8]" in rows.message.iloc[0] and "None" not in rows.message.iloc[0]


@pytest.mark.parametrize("second", [(1, 32), (32,), (1, 1, 32)])
def test_a_broadcast_that_leaves_the_dim_free_is_no_finding(tmp_path, second):
    assert "baked_dim" not in _codes(check(_baked(tmp_path, second), load=False))


def test_decoders_and_light_models_have_no_baked_dim():
    """No false alarm where the model determines a dim by design (a KV cache's head size)
    nor on the models onnx ships."""
    from pathlib import Path
    for source in ("sample:tiny_llm", "sample:tiny_llm_int4", "sample:transformer_block"):
        assert "baked_dim" not in _codes(check(source, load=False)), source
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    for path in sorted(light.glob("*.onnx"))[:4]:
        assert "baked_dim" not in _codes(check(path, load=False)), path


def test_a_shape_input_stored_as_external_data_is_an_error_that_save_fixes(tmp_path):
    # a torch dynamo export saved with size_threshold=0 held a ReduceMean's axes in its data
    # file: every onnxruntime session of the file refused it ("Cannot parse data from external
    # tensors"), while check() said only "External data file ... Ship the file with the model"
    import onnxruntime as ort

    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["m"], name="mul"),
         helper.make_node("ReduceMean", ["m", "axes"], ["y"], name="mean", keepdims=0)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.full((2, 3), 2, np.float32), "w"),
         numpy_helper.from_array(np.array([1], np.int64), "axes")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "m.onnx"
    onnx.save(onnx.ModelProto.FromString(m.SerializeToString()), str(path),  # (saves in place)
              save_as_external_data=True, location="m.data", size_threshold=0)
    with pytest.raises(Exception, match="Cannot parse data from external tensors"):
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # the truth
    lab = onnx_lab.open(path)
    rows = lab.check(load=False).set_index("code")
    assert rows.loc["external_value_input", "severity"] == "error"
    assert rows.loc["external_value_input", "node_id"] == "mean"
    assert "'axes'" in rows.loc["external_value_input", "message"]
    assert "lab.save" in rows.loc["external_value_input", "fix"]
    saved = lab.save(tmp_path / "fixed.onnx")  # the fix it names
    x = np.ones((2, 3), np.float32)
    got = ort.InferenceSession(str(saved), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got[0], [2.0, 2.0])
    assert "external_value_input" not in set(onnx_lab.open(saved).check(load=False).code)
    # a weight of a Mul in the data file is no such input
    onnx.save(onnx.ModelProto.FromString(m.SerializeToString()), str(tmp_path / "w.onnx"),
              save_as_external_data=True, location="w.data",
              size_threshold=50)  # onnx compares sys.getsizeof: axes 41, w 57
    lab = onnx_lab.open(tmp_path / "w.onnx")
    assert lab.model.external_tensors()  # w is in the data file
    assert "external_value_input" not in set(lab.check(load=False).code)
    ort.InferenceSession(str(tmp_path / "w.onnx"), providers=["CPUExecutionProvider"])


def test_an_ir_version_from_the_future_gets_a_fix_that_works(tmp_path):
    # no op conversion changes the file format's version: the fix said "Fix the node or
    # attribute named" and "convert_opset", neither of which helps
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])],
               ir_version=99)
    path = tmp_path / "ir99.onnx"
    onnx.save(m, path)
    df = check(str(path))
    rows = df.loc[df.code.isin(["checker", "provider_load"])]
    assert len(rows) >= 1, df
    for row in rows.itertuples():
        assert "IR version 99" in row.fix and "convert_opset" not in row.fix, row.fix
        assert "m.ir_version = " in row.fix
    # following it: the copy the fix names checks clean
    top = int(rows.iloc[0].fix.split("m.ir_version = ")[1].split(";")[0])
    fixed = onnx.load(path)
    fixed.ir_version = top
    onnx.save(fixed, tmp_path / "fixed.onnx")
    again = check(str(tmp_path / "fixed.onnx"))
    assert not (again.severity == "error").any(), again
