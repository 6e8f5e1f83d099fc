"""Issue 32: hostile metadata shapes in ``onnx_lab.sources``, ``onnx_lab.origin``, name scopes,
class hierarchies, stack traces and ``imgsz`` are ignored (never an exception), while the
well-formed metadata onnx_lab writes keeps its meaning."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.core._meta import load_json, load_str_list
from onnx_lab.errors import LabError

F = TensorProto.FLOAT
DEEP = "[" * 100_000 + "]" * 100_000

_SOURCES = "onnx_lab.sources"
_ORIGIN = "onnx_lab.origin"
_SCOPES = "pkg.torch.onnx.name_scopes"
_CLASSES = "pkg.torch.onnx.class_hierarchy"
_STACK = "pkg.torch.onnx.stack_trace"

# (key, value) per hostile shape
SHAPES = [
    (_SOURCES, json.dumps([{"path": ["m"], "file": "m.py",
                            "line": "<img src=x onerror=alert(1)>"}])),
    (_SOURCES, json.dumps([{"path": ["m"], "line": 1.5}])),
    (_SOURCES, json.dumps([{"path": ["m"], "line": [1]}])),
    (_SOURCES, json.dumps([{"path": ["m"], "line": 10 ** 40}])),
    (_SOURCES, json.dumps([{"path": ["m"], "line": True}])),
    (_SOURCES, json.dumps([{"path": "abc"}])),
    (_SOURCES, json.dumps([{"path": [1, 2], "classes": [[1]]}])),
    (_SOURCES, json.dumps([{"path": ["m"], "levels": {"a": 1}, "kind": 7}])),
    (_SOURCES, json.dumps({"path": ["m"]})),
    (_SOURCES, json.dumps([1, "x", None])),
    (_SOURCES, DEEP),
    (_SOURCES, "{" * 50_000),
    (_SOURCES, "[" + "1," * 600_000 + "1]"),
    (_ORIGIN, DEEP),
    (_ORIGIN, json.dumps({"a": 1})),
    (_ORIGIN, json.dumps([1, [2]])),
    (_SCOPES, DEEP),
    (_SCOPES, "[" * 200_000),
    (_SCOPES, "1" * 100_000),
    (_SCOPES, "{'a': 1}"),
    (_CLASSES, "[" * 200_000),
    (_STACK, 'File "m.py", line ' + "9" * 5000 + ", in f\n    x"),
    (_STACK, 'File "m.py", line 3, in f\n' * 200_000),
    ("namespace", "/" * 100_000),
]


def _model(key: str, value: str) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["y"], name="neg")]
    for n in nodes:
        e = n.metadata_props.add()
        e.key, e.value = key, value
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2])],
                          [helper.make_tensor_value_info("y", F, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    e = m.metadata_props.add()
    e.key, e.value = "imgsz", DEEP if key == _SCOPES else '["a", 1e999]'
    return m


@pytest.mark.parametrize("key,value", SHAPES, ids=[f"{k}-{i}" for i, (k, _) in
                                                  enumerate(SHAPES)])
def test_hostile_metadata_never_raises(key, value, tmp_path):
    lab = onnx_lab.open(_model(key, value).SerializeToString())
    nodes = lab.nodes
    assert list(nodes["node_id"]) == ["relu", "neg"]
    assert all(isinstance(v, (int, np.integer)) for v in nodes["source_line"].dropna())
    lab.summary()
    lab.check()
    lab.cost()
    assert lab.render().dot
    from onnx_lab.core.provenance import origins
    from onnx_lab.core.source_map import source_table

    assert set(origins(lab.model)) == {"relu", "neg"}
    source_table(lab.model)
    r = lab.apply("eliminate_identity")
    assert r.modified is False
    c = onnx_lab.compare(lab, lab, feeds={"x": np.ones(2, np.float32)})
    assert c.passed
    try:
        lab.save(tmp_path / "s.onnx")
    except LabError:  # a save may refuse; it must not crash
        pass


def test_well_formed_metadata_keeps_its_meaning():
    src = [{"path": ["model", "model.block"], "classes": ["Block", None],
            "levels": ["model", "block"], "file": "m.py", "line": 12, "function": "forward",
            "code": "return x", "kind": "metadata"}]
    lab = onnx_lab.open(_model(_SOURCES, json.dumps(src)).SerializeToString())
    row = lab.nodes.set_index("node_id").loc["relu"]
    assert row["source_line"] == 12 and row["source_file"] == "m.py"
    assert row["module"] == "model.block"
    lab2 = onnx_lab.open(_model(_ORIGIN, json.dumps(["a", "b"])).SerializeToString())
    from onnx_lab.core.provenance import origins

    assert origins(lab2.model)["relu"] == ["a", "b"]
    lab3 = onnx_lab.open(_model(_SCOPES, "['', 'block', 'relu']").SerializeToString())
    assert lab3.nodes.set_index("node_id").loc["relu", "module"] == "block"


def test_the_bounded_readers():
    assert load_json(DEEP) is None and load_json("x" * ((1 << 20) + 1)) is None
    assert load_json('[["a"], {"b": "[[[["}]') == [["a"], {"b": "[[[["}]
    assert load_json(123) is None and load_json("") is None
    assert load_str_list("['', 'a', \"b]\"]") == ["", "a", "b]"]
    assert load_str_list("[['a']]") is None and load_str_list("[" * 10_000) is None


def test_an_error_quoting_a_huge_name_stays_readable():
    # a 1 MB node name was quoted in full in the error (and the terminal line)
    from onnx_lab.errors import MESSAGE_MAX_CHARS, InputError

    e = InputError("Unknown node " + "n" * 1_000_000 + " (did you mean 'a'?).", fix="Use a.")
    assert len(e.problem) <= MESSAGE_MAX_CHARS and e.problem.endswith("(did you mean 'a'?).")
    assert "characters left out" in e.problem and str(e).endswith("Use a.")
    assert InputError("short", fix="fix").problem == "short"


def test_an_error_quoting_a_name_writes_its_terminal_codes_as_escapes():
    # outside the CLI (a script, a REPL) a tensor name's OSC 8 link and window title went to
    # the terminal raw in the message of an unresolved dim; the dim's name was repr-quoted
    osc = "\x1b]8;;http://example.invalid/\x07CLICK\x1b]8;;\x07\x1b]0;TITLE\x07"
    g = helper.make_graph([helper.make_node("Relu", [osc], ["y"], name="\x1b[2Jrelu")], "g",
                          [helper.make_tensor_value_info(osc, TensorProto.FLOAT,
                                                         ["\x1b[31mdim", 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(LabError) as info:
        lab.cost()
    text = str(info.value)
    assert "Unresolved dims" in text
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]8;;http://example.invalid/\\x07CLICK" in text  # the name, readable
    e = LabError("a\u202eb\r\x9bc\nline\ttab", fix="x\x00")
    assert e.problem == "a\\u202eb\\x0d\\x9bc\nline\ttab" and e.fix == "x\\x00"
