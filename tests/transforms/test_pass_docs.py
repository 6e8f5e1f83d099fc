"""The lists about passes come from the registry: the docs table, the README's count, the
pattern → pass map and the teaching texts (each in its pass's own docstring)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from onnx_lab.transforms import explain
from onnx_lab.transforms.base import _REGISTRY
from onnx_lab.transforms.explain import builtin_passes, pass_counts, pass_table, pattern_passes

ROOT = Path(__file__).resolve().parents[2]


def _sync():
    spec = importlib.util.spec_from_file_location("sync_pass_docs",
                                                  ROOT / "scripts" / "sync_pass_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_table_lists_exactly_the_registered_graph_passes():
    text = (ROOT / "docs" / "passes.md").read_text(encoding="utf-8")
    assert _sync().synced_passes_doc(text) == text, \
        "docs/passes.md is stale: run python scripts/sync_pass_docs.py"
    block = text.split("<!-- passes:begin -->", 1)[1].split("<!-- passes:end -->", 1)[0]
    listed = re.findall(r"^\| `([a-z_0-9]+)` \|", block, flags=re.M)
    assert listed == sorted(builtin_passes("graph")) and len(listed) == len(set(listed))
    assert pass_table().count("\n") == len(listed) + 1


def test_readme_counts_the_registered_passes():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    c = pass_counts()
    assert f"{c['graph']} graph passes, {c['edit']} edits" in text
    assert _sync().synced_readme(text) == text


def test_every_graph_pass_explains_itself_from_its_docstring():
    for name in builtin_passes("graph"):
        doc = _REGISTRY[name].factory.__doc__
        assert "### " in doc, f"{name}: its docstring has no teaching text"
        assert explain(name).startswith("### ") and f"`{name}`" in explain(name)
        for pattern in _REGISTRY[name].factory.patterns:
            assert pattern_passes()[pattern] == name
            assert explain(pattern).startswith(f"*Pattern `{pattern}` of pass `{name}`.*")


def test_a_pass_registered_elsewhere_brings_its_own_text_and_patterns():
    # What adding a pass takes: its class, nothing in explain.py or the tests' lists.
    from onnx_lab.transforms.base import LabPass, register_pass

    @register_pass("_test_doc_pass")
    class _DocPass(LabPass):
        r"""Do nothing, as a test.

        ### Nothing (`_test_doc_pass`)

        $$x = x$$"""

        patterns = ("_test_nothing",)

        def find(self, model):
            return []

    try:
        text = explain("_test_doc_pass")
        assert text.startswith("### Nothing (`_test_doc_pass`)") and "$$x = x$$" in text
        assert explain("_test_nothing") == "*Pattern `_test_nothing` of pass `_test_doc_pass`.*" \
            "\n\n" + text
        assert _REGISTRY["_test_doc_pass"].summary == "Do nothing, as a test."
        assert "_test_doc_pass" not in builtin_passes("graph")  # tests' passes are not ours
    finally:
        del _REGISTRY["_test_doc_pass"]
