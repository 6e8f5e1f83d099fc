"""The rule kinds are one table (numerics.metrics.RULES): the accumulator, the reports, the
precision search, its CLI flag and its widget read it, so a new kind is one row."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_lab
from onnx_lab.errors import UnknownNameError
from onnx_lab.numerics.metrics import RULE_KINDS, RULES, MetricAccumulator, Rule, RuleKind
from onnx_lab.numerics.precision.trials import METRICS, make_tolerance, search_metrics


def _acc(rule, ref, cand):
    a = MetricAccumulator(rule=rule)
    a.add(np.asarray(ref, np.float32), np.asarray(cand, np.float32))
    return a


def test_the_table_is_the_kinds():
    assert RULE_KINDS == tuple(RULES) == ("elementwise", "scaled", "max_abs", "sqnr", "cosine")
    assert METRICS == search_metrics() == ("elementwise", "max_abs", "sqnr", "cosine")
    assert Rule("sqnr", min_sqnr_db=20).describe() == "sqnr >= 20 dB"
    assert Rule("scaled", 1e-4, 1e-3).describe() == "max|err| <= 0.0001 + 0.001*max|ref|"
    # Defaults of the search come from the rows: a preset of the same kind, else the row.
    assert make_tolerance("int8").min_sqnr_db == 20.0
    assert make_tolerance("fp16", "sqnr").min_sqnr_db == 30.0
    assert make_tolerance("fp16", "cosine").min_cosine == 0.999
    assert make_tolerance("fp16", "max_abs") == Rule("max_abs", atol=1e-2)
    assert make_tolerance("fp16", "max_abs", atol=0.5) == Rule("max_abs", atol=0.5)
    assert make_tolerance("fp16", "cosine", 0.99) == Rule("cosine", min_cosine=0.99)


@pytest.mark.parametrize("kind", RULE_KINDS)
def test_every_kind_passes_equal_and_fails_far(kind):
    rule = {"elementwise": Rule("elementwise", 1e-3, 1e-3), "scaled": Rule("scaled", 1e-3, 1e-3),
            "max_abs": Rule("max_abs", atol=1e-3), "sqnr": Rule("sqnr", min_sqnr_db=30.0),
            "cosine": Rule("cosine", min_cosine=0.999)}[kind]
    ref = np.linspace(-1, 1, 64)
    same = _acc(rule, ref, ref)
    assert same.result()["passed"] and same.score() <= 1.0
    far = _acc(rule, ref, -ref)
    assert not far.result()["passed"] and far.score() > 1.0
    assert far.result()["rule"] == rule.describe()


def test_a_new_kind_is_one_row():
    from onnx_lab.widgets.precision import PrecisionDoctor

    RULES["_mean_abs"] = RuleKind(
        "_mean_abs", lambda r: f"mean|err| <= {r.atol:g}",
        lambda a: (a.sum_abs / a.n_finite / a.atol) if a.n_finite else 0.0,
        tolerances=True, statistics=True, threshold="atol", search=True, label="mean |err|",
        threshold_label="max mean")
    try:
        rule = make_tolerance("fp32", "_mean_abs", 0.1)
        assert rule == Rule("_mean_abs", atol=0.1) and rule.describe() == "mean|err| <= 0.1"
        ok = _acc(rule, [1.0, 2.0], [1.05, 2.05]).result()
        bad = _acc(rule, [1.0, 2.0], [1.5, 2.5]).result()
        assert ok["passed"] and not bad["passed"] and ok["rule"] == "mean|err| <= 0.1"
        assert "_mean_abs" in search_metrics()
        wdg = PrecisionDoctor(onnx_lab.open("sample:convnet"), background=False)
        assert ("mean |err|", "_mean_abs") in wdg.metric.options
        wdg.metric.value = "_mean_abs"
        assert wdg.threshold.description == "max mean" and wdg.threshold.value == 1e-2  # fp16: its atol
    finally:
        del RULES["_mean_abs"]
    with pytest.raises(UnknownNameError, match="_mean_abs|Metrics"):
        make_tolerance("fp32", "_mean_abs", 0.1)


def test_cli_help_names_every_search_metric():
    import argparse

    from onnx_lab.cli import precision

    parser = argparse.ArgumentParser()
    precision.register(parser.add_subparsers())
    text = " ".join(a.help or "" for p in parser._subparsers._group_actions[0].choices.values()
                    for a in p._actions if "--metric" in a.option_strings)
    assert all(m in text for m in METRICS), text
