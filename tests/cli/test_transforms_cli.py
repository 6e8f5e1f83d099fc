"""CLI: passes, patterns, optimize (JSON keys, exit codes), extract, fix-dims."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from _machinery import chain_proto
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.cli import main
from onnx_lab.samples import build

STEP_KEYS = {"name", "modified", "nodes_before", "nodes_after", "seconds", "verify_passed",
             "max_abs_err"}


@pytest.fixture
def convnet(tmp_path):
    path = tmp_path / "convnet.onnx"
    onnx.save(build("convnet"), str(path))
    return path


@pytest.fixture
def chain(tmp_path):
    path = tmp_path / "chain.onnx"
    onnx.save(chain_proto(), str(path))
    return path


def _json(capsys):
    return json.loads(capsys.readouterr().out)


def test_passes_lists_the_registry(capsys):
    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    assert "onnxsim" in out and "ort:extended" in out and "onnxoptimizer:fuse_bn_into_conv" in out
    assert main(["passes", "--json"]) == 0
    rows = _json(capsys)
    assert {"name", "summary", "parameters", "kind"} <= set(rows[0])


def test_patterns_json(convnet, capsys):
    assert main(["patterns", str(convnet), "--json"]) == 0
    rows = _json(capsys)
    assert rows and {"match_id", "pattern", "pass", "node_ids"} <= set(rows[0])


def test_patterns_text_shows_savings(convnet, capsys):
    assert main(["patterns", str(convnet)]) == 0
    lines = capsys.readouterr().out.splitlines()
    fold = next(x for x in lines if x.startswith("fold_constants:"))
    assert fold.endswith("(-1 nodes, -16 B)")  # the Reshape and its int64 shape vector
    assert not any("-0 nodes" in x for x in lines)


def test_optimize_passes_json_and_output(convnet, tmp_path, capsys):
    before = convnet.read_bytes()
    out = tmp_path / "opt.onnx"
    code = main(["optimize", str(convnet), str(out), "--passes",
                 "fuse_conv_bn,eliminate_identity", "--json"])
    assert code == 0
    doc = _json(capsys)
    assert {"passes", "nodes_before", "nodes_after"} <= set(doc)
    assert [p["name"] for p in doc["passes"]] == ["fuse_conv_bn", "eliminate_identity"]
    assert all(STEP_KEYS <= set(p) for p in doc["passes"])
    assert all(p["verify_passed"] for p in doc["passes"])
    assert doc["nodes_before"] == 21 and doc["nodes_after"] == 18
    assert len(onnx_lab.open(out).index) == 18
    assert convnet.read_bytes() == before


def test_optimize_preset_text_output(convnet, tmp_path, capsys):
    pytest.importorskip("onnx_lab.transforms.presets")
    assert main(["optimize", str(convnet), str(tmp_path / "o.onnx"), "--preset", "safe"]) == 0
    assert "nodes, written to" in capsys.readouterr().out


def test_failed_verification_exits_1_and_still_writes(chain, tmp_path, capsys):
    out = tmp_path / "bad.onnx"
    code = main(["optimize", str(chain), str(out), "--passes", "test_perturb_weight",
                 "--dims", "batch=2", "--json"])
    assert code == 1
    doc = _json(capsys)
    assert doc["passes"][0]["verify_passed"] is False and doc["verify_passed"] is False
    assert doc["passes"][0]["first_failure"] == "h2"
    assert out.is_file()


def test_no_verify_and_feeds(chain, tmp_path, capsys):
    assert main(["optimize", str(chain), str(tmp_path / "a.onnx"), "--passes",
                 "test_perturb_weight", "--no-verify", "--json"]) == 0
    assert _json(capsys)["passes"][0]["verify_passed"] is None
    feeds = tmp_path / "x.npz"
    np.savez(feeds, x=np.ones((3, 8), np.float32))
    assert main(["optimize", str(chain), str(tmp_path / "b.onnx"), "--passes",
                 "test_drop_identity", "--feeds", str(feeds), "--json"]) == 0
    assert _json(capsys)["passes"][0]["verify_passed"] is True


def test_errors_exit_2(convnet, chain, tmp_path, capsys):
    assert main(["optimize", str(convnet), str(tmp_path / "o.onnx"), "--passes", "nope"]) == 2
    assert "Unknown pass 'nope'" in capsys.readouterr().err
    # symbolic dims without values: the message says how to pass them
    assert main(["optimize", str(chain), str(tmp_path / "o.onnx"), "--passes",
                 "test_drop_identity"]) == 2
    assert "--dims" in capsys.readouterr().err
    assert main(["extract", str(convnet), str(tmp_path / "e.onnx"), "--outputs", "nope"]) == 2
    assert main(["optimize", str(convnet), str(convnet), "--passes", "eliminate_identity"]) == 2
    assert "overwrite" in capsys.readouterr().err


def test_extract_and_fix_dims_commands(convnet, chain, tmp_path, capsys):
    out = tmp_path / "sub.onnx"
    assert main(["extract", str(convnet), str(out), "--inputs",
                 "/block1/relu/Relu_output_0", "--outputs", "logits", "--json"]) == 0
    doc = _json(capsys)
    assert doc["passes"][0]["name"] == "extract" and doc["passes"][0]["verify_passed"]
    assert list(onnx_lab.open(out).inputs.name) == ["/block1/relu/Relu_output_0"]
    fixed = tmp_path / "fixed.onnx"
    assert main(["fix-dims", str(chain), str(fixed), "batch=3", "--json"]) == 0
    assert _json(capsys)["passes"][0]["verify_passed"]
    assert onnx_lab.open(fixed).inputs.loc[0, "shape"] == (3, 8)


def test_fix_dims_of_some_dims_sizes_the_others_with_dims_for_the_verification(tmp_path,
                                                                               capsys):
    # fixing batch alone asked for --dims seq=..., which fix-dims did not accept
    src = onnx_lab.samples.path("transformer_block")  # dims batch and seq
    out = tmp_path / "fixed.onnx"
    assert main(["fix-dims", str(src), str(out), "batch=2"]) == 2
    assert "--dims" in capsys.readouterr().err
    assert main(["fix-dims", str(src), str(out), "batch=2", "--dims", "seq=5", "--json"]) == 0
    assert _json(capsys)["passes"][0]["verify_passed"]
    shape = onnx_lab.open(out).inputs["shape"].iloc[0]
    assert shape[0] == 2 and "seq" in shape  # batch fixed; seq stays a dim of the saved model


def test_optimize_with_ort_on_an_optimum_decoder_verifies(tmp_path, capsys):
    # onnxruntime's TransposeOptimizer moves a Shape above a Transpose (the Shape keeps its
    # name, reads another tensor): a correct rewrite, so the step verifies and exits 0, and
    # --find-culprit blames nothing.
    from rewrite_models import DECODER_DIMS, optimum_decoder

    src = tmp_path / "decoder.onnx"
    onnx.save(optimum_decoder(), str(src))
    dims = [f"--dims={k}={v}" for k, v in DECODER_DIMS.items()]
    out = tmp_path / "basic.onnx"
    assert main(["optimize", str(src), str(out), "--tool", "ort:basic", "--find-culprit",
                 "--json", *dims]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verify_passed"] is True and doc["passes"][0]["first_failure"] is None
    assert "TransposeOptimizer" in doc["culprit"]["switches"]  # it did move the Shape
    assert doc["culprit"]["culprit"] is None
    assert doc["culprit"]["message"] == "no culprit: the step verifies"
    assert out.exists()


def test_a_verdict_says_the_new_model_does_not_run_instead_of_naming_a_weight():
    # every row of a step whose result onnxruntime cannot load fails with that note; the
    # first row of an IR 3 model is a weight, which says nothing about why
    from types import SimpleNamespace

    import pandas as pd

    from onnx_lab.numerics.verify import failed_where

    note = "the new model does not run: onnxruntime cannot load or run the model: boom"
    rows = pd.DataFrame({"tensor": ["w", "y"], "passed": [False, False], "note": [note, note]})
    r = SimpleNamespace(verification=rows, first_failure="w")
    assert failed_where(r) == f": {note}"
    rows = pd.DataFrame({"tensor": ["h", "y"], "passed": [True, False], "note": ["", ""]})
    assert failed_where(SimpleNamespace(verification=rows, first_failure="y")) == " at y"


def test_a_tool_that_fixes_the_inputs_says_so(tmp_path, capsys):
    # onnxslim given --dims writes a model that takes only that batch; the CLI printed just
    # "8 -> 7 nodes verified" (the note was in the Python result only)
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("MatMul", ["feat", "w"], ["h"], name="mm"),
         helper.make_node("Identity", ["h"], ["i"], name="id"),
         helper.make_node("Relu", ["i"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("feat", TensorProto.FLOAT, ["batch", 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(np.ones((20, 4), np.float32), "w")])
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    assert main(["optimize", str(src), str(out), "--tool", "onnxslim", "--dims", "batch=4"]) == 0
    text = capsys.readouterr().out
    assert "note: the result's inputs take only the sizes it ran with: feat ['batch', 20] -> " \
        "[4, 20]" in text


def test_fix_dims_names_its_own_argument(capsys):
    # "--dims 'batch' is not NAME=VALUE" named a flag the user had not written
    assert main(["fix-dims", "sample:transformer_block", "unused.onnx", "batch"]) == 2
    err = capsys.readouterr().err
    assert "fix-dims argument 'batch' is not NAME=VALUE" in err and "--dims" not in err


def _growing_constants(tmp_path):
    # six 4 MB ConstantOfShape weights: the 16 MB default guard refuses two folds
    shape = numpy_helper.from_array(np.array([1024, 1024], np.int64), "wshape")
    nodes = [helper.make_node("ConstantOfShape", ["wshape"], [f"W{i}"], name=f"make_w{i}",
                              value=numpy_helper.from_array(np.array([0.5], np.float32)))
             for i in range(6)]
    nodes += [helper.make_node("MatMul", ["x", "W0"], ["y0"], name="mm0")]
    nodes += [helper.make_node("MatMul", [f"y{i - 1}", f"W{i}"], [f"y{i}"], name=f"mm{i}")
              for i in range(1, 6)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 1024])],
                          [helper.make_tensor_value_info("y5", 1, [2, 1024])], [shape])
    path = tmp_path / "consts.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_optimize_text_shows_what_a_pass_refused_and_param_lifts_it(tmp_path, capsys):
    src = _growing_constants(tmp_path)
    assert main(["optimize", str(src), str(tmp_path / "a.onnx")]) == 0
    out = capsys.readouterr().out
    assert "fold_constants: 12 -> 8 nodes verified" in out
    assert "note: fold of make_w4 refused" in out and "note: fold of make_w5 refused" in out
    assert "the preset's outputs match the original's" in out
    # the guard named in the note is a parameter the command line can give
    assert main(["optimize", str(src), str(tmp_path / "b.onnx"), "--param",
                 "fold_constants.max_growth_bytes=50_331_648", "--json"]) == 0
    doc = _json(capsys)
    step = next(p for p in doc["passes"] if p["name"] == "fold_constants")
    assert step["nodes_after"] == 6 and step["verify_passed"] is True
    assert not any("refused" in n for n in step["notes"])
    saved = onnx.load(str(tmp_path / "b.onnx"))
    assert [n.op_type for n in saved.graph.node] == ["MatMul"] * 6
    # and a value below it refuses every fold (the parameter reached the pass)
    assert main(["optimize", str(src), str(tmp_path / "c.onnx"), "--passes", "fold_constants",
                 "--param", "fold_constants.max_growth_bytes=1000", "--json"]) == 0
    assert _json(capsys)["passes"][0]["modified"] is False


def test_long_notes_are_cut_to_the_first_two_and_the_last(tmp_path, capsys):
    src = _growing_constants(tmp_path)
    assert main(["optimize", str(src), str(tmp_path / "a.onnx"), "--passes", "fold_constants",
                 "--param", "fold_constants.max_growth_bytes=5_000_000"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  note:")]
    # 5 refusals + the folded count + the preset's verdict: 7 notes, 4 lines
    assert len(lines) == 4 and lines[2] == "  note: ... 4 more (--json lists them)", lines
    assert "the preset's outputs match" in lines[-1]


@pytest.mark.parametrize("argv,says", [
    (["--param", "max_growth_bytes=1"], "is not PASS.NAME=VALUE"),
    (["--param", "fold_constant.max_growth_bytes=1"], "Close matches: 'fold_constants'"),
    (["--param", "fold_constants.max_growth=1"], "has no parameter 'max_growth'"),
    (["--param", "fold_constants.max_growth_bytes=abc"], "must be int, got str"),
    (["--tool", "onnxslim", "--param", "fold_constants.max_growth_bytes=1"],
     "but --tool runs onnxslim only"),
])
def test_bad_params_are_one_line_errors(convnet, tmp_path, capsys, argv, says):
    assert main(["optimize", str(convnet), str(tmp_path / "o.onnx"), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert not (tmp_path / "o.onnx").exists()


def test_apply_preset_params_reach_their_pass_and_refuse_a_pass_it_does_not_run(tmp_path):
    lab = onnx_lab.open(_growing_constants(tmp_path))
    with pytest.raises(onnx_lab.errors.UnknownNameError, match="fuse_conv_bnn"):
        lab.apply_preset("safe", params={"fuse_conv_bnn": {}})
    with pytest.raises(onnx_lab.errors.PassError, match="not a mapping"):
        lab.apply_preset("safe", params={"fold_constants": 5})
    rs = lab.apply_preset("safe", params={"fold_constants": {"max_growth_bytes": 1 << 30}})
    assert next(r for r in rs if r.name == "fold_constants").nodes_after == 6
    assert len(lab.index) == 6


def test_skip_and_a_param_of_the_same_switches_are_refused_not_merged_silently(convnet, tmp_path,
                                                                               capsys):
    # --param disabled_optimizers=[...] replaced --skip's list without a word
    assert main(["optimize", str(convnet), str(tmp_path / "o.onnx"), "--tool", "ort:extended",
                 "--skip", "ConvBNFusion", "--param", "disabled_optimizers=['ConvAddFusion']"]
                ) == 2
    err = capsys.readouterr().err
    assert "--skip and --param disabled_optimizers" in err and "both set" in err
    assert not (tmp_path / "o.onnx").exists()


def test_param_takes_true_and_false_as_a_shell_user_writes_them(convnet, tmp_path, capsys):
    assert main(["optimize", str(convnet), str(tmp_path / "o.onnx"), "--tool", "onnxoptimizer",
                 "--param", "fixed_point=false", "--json"]) == 0
    assert _json(capsys)["passes"][0]["name"] == "onnxoptimizer"
