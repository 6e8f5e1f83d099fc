"""onnx_lab.audit: a zoo of real models audited in isolated processes (a truncated file, an
endless Loop and an allocation past the memory limit among them), resumed from its manifest,
run on a Dask LocalCluster with the same table, and gated against an earlier audit."""

from __future__ import annotations

import json
import time

import numpy as np
import onnx
import pandas as pd
import pytest
from ml_models import tree_zipmap
from zoo_helpers import conv_bn, endless_loop, huge_allocation, make_zoo

import onnx_lab
from onnx_lab.errors import InputError, ModelLoadError
from onnx_lab.zoo import COLUMNS, DETERMINISTIC_COLUMNS, find_models
from onnx_lab.zoo._store import read_manifest
from onnx_lab.zoo.gate import regressions

# Small profile budgets keep each model's process at a few seconds.
FAST = {"budget_s": 0.3, "progress": False, "workers": 2}

pytestmark = pytest.mark.slow  # every audit runs models in child processes


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """The audited zoo and its result: good models, a broken one, an endless one and one
    that allocates 2 GiB under a 3 GiB address-space limit (onnxruntime alone reserves
    ~1.7 GiB)."""
    root = make_zoo(tmp_path_factory.mktemp("zoo"))
    onnx.save(endless_loop(), root / "endless.onnx")
    onnx.save(huge_allocation(2.0), root / "huge.onnx")
    out = tmp_path_factory.mktemp("audit")
    calls = []
    res = onnx_lab.audit(root, out, workers=2, timeout_s=25, memory_gb=3,
                         dims={"batch": 2, "k": 1}, budget_s=0.3,
                         progress=lambda *a: calls.append(a))
    return root, out, res, calls


def _row(res, model):
    return res.table.set_index("model").loc[model]


def test_find_models_follows_external_data(tmp_path):
    make_zoo(tmp_path)
    found = {f.name: f for f in find_models([tmp_path])}
    assert sorted(found) == ["broken.onnx", "conv_bn.onnx", "conv_bn6.onnx",
                             "nested/dynamic.onnx", "nested/external.onnx"]
    ext = found["nested/external.onnx"]
    assert [p.name for p in ext.files] == ["external.onnx", "external.onnx.data"]
    # A file given directly is named by its file name; the same file twice is one model.
    again = find_models([tmp_path / "conv_bn.onnx", tmp_path / "conv_bn.onnx"])
    assert [f.name for f in again] == ["conv_bn.onnx"]


def test_rows_of_good_models(zoo):
    _, _, res, _ = zoo
    assert list(res.table.columns) == list(COLUMNS)
    assert res.table.model.tolist() == sorted(res.table.model)
    ok = res.table.loc[res.table.status == "ok"]
    assert sorted(ok.model) == ["conv_bn.onnx", "conv_bn6.onnx", "nested/dynamic.onnx",
                                "nested/external.onnx"]
    r = _row(res, "conv_bn.onnx")
    # summary, check, cost, the safe preset (Conv+BN fused, Identity removed, each verified)
    assert r.num_nodes == 4 and r.opset == 17 and r.check_errors == 0
    assert r.macs == 3 * 3 * 3 * 4 * 8 * 8
    assert r.optimize_steps >= 2 and r.optimize_verified == r.optimize_steps
    assert r.optimize_passed and r.nodes_after == 2 and pd.isna(r.optimize_failed)
    assert r.latency_ms > 0 and r.latency_ci_low_ms <= r.latency_ms <= r.latency_ci_high_ms
    assert r.latency_runs >= 5 and r.latency_session == "CPUExecutionProvider"
    assert pd.isna(r.error_type) and pd.isna(r.fp16_passed)  # fp16 not asked
    # one model with its data file: hashed and sized together
    e = _row(res, "nested/external.onnx")
    assert e.external_data and e.file_bytes > (res.table.set_index("model").loc[
        "conv_bn.onnx", "file_bytes"])
    # the dynamic model takes the dims it has (batch), not the others (k)
    d = _row(res, "nested/dynamic.onnx")
    assert d.dynamic_dims == "batch" and d.dims_given == "batch=2" and d.latency_ms > 0


def test_failures_are_rows_and_the_rest_go_on(zoo):
    _, out, res, _ = zoo
    b = _row(res, "broken.onnx")
    assert (b.status, b.error_stage, b.error_type) == ("error", "open", "ModelLoadError")
    assert "truncated" in b.error and pd.isna(b.num_nodes)
    # the hang: killed at the timeout, the stages before it kept
    e = _row(res, "endless.onnx")
    assert (e.status, e.error_stage, e.error_type) == ("timeout", "optimize", "Timeout")
    assert "25 s" in e.error and e.num_nodes == 7 and e.check_errors == 0
    assert 25 <= e.seconds < 60
    # the allocation past the limit: this model's failure only
    h = _row(res, "huge.onnx")
    assert h.status == "memory" and h.error_stage == "profile"
    assert h.num_nodes == 4 and pd.isna(h.latency_ms)
    assert (out / "logs" / "huge.onnx.log").exists() or "allocate" in h.error.lower()


def test_progress_counts(zoo):
    _, _, res, calls = zoo
    assert calls[0][:2] == (0, 7) and calls[-1][:2] == (7, 7)
    assert "4 ok" in calls[-1][2] and "1 timeout" in calls[-1][2]


def test_files_written(zoo):
    _, out, res, _ = zoo
    assert set(res.files) == {"csv", "parquet", "html", "manifest"}
    pq = pd.read_parquet(out / "audit.parquet")
    pd.testing.assert_frame_equal(pq, res.table, check_dtype=False)
    csv = pd.read_csv(out / "audit.csv")
    assert csv.model.tolist() == res.table.model.tolist()
    assert csv.status.tolist() == res.table.status.tolist()
    page = (out / "index.html").read_text()
    assert "7 models" in page and "endless.onnx" in page and "ModelLoadError" in page
    # every model that opened has its self-contained report, linked from the index
    linked = res.table.report.dropna().tolist()
    assert "reports/conv_bn.onnx.html" in linked or any("conv_bn" in r for r in linked)
    for rel in linked:
        assert f'href="{rel}"' in page or f"href='{rel}'" in page
        assert (out / rel).read_text().lower().startswith("<!doctype html")
    entries = read_manifest(out)
    assert len(entries) == 7 and len(entries["conv_bn.onnx"]["samples"]) >= 5


def test_resume_skips_unchanged_and_reruns_changed(tmp_path):
    root = tmp_path / "zoo"
    root.mkdir()
    onnx.save(conv_bn(0), root / "a.onnx")
    from models import save_external

    save_external(conv_bn(1), root / "b.onnx")
    out = tmp_path / "out"
    first = onnx_lab.audit(root, out, **FAST)
    assert first.reused == 0 and (first.table.status == "ok").all()
    t0 = time.monotonic()
    second = onnx_lab.audit(root, out, **FAST)
    assert second.reused == 2 and second.table.reused.all()
    assert time.monotonic() - t0 < 10  # no model process started
    pd.testing.assert_frame_equal(second.table[DETERMINISTIC_COLUMNS],
                                  first.table[DETERMINISTIC_COLUMNS])
    # b's external data changes (same .onnx file): only b runs again
    save_external(conv_bn(2), root / "b.onnx")
    third = onnx_lab.audit(root, out, **FAST)
    assert third.reused == 1
    assert third.table.set_index("model").reused.to_dict() == {"a.onnx": True, "b.onnx": False}
    assert _row(third, "b.onnx").sha256 != _row(first, "b.onnx").sha256
    # other options run the model again (here a alone), and so does force
    assert onnx_lab.audit(root / "a.onnx", out, budget_s=0.4, progress=False).reused == 0
    assert onnx_lab.audit(root / "b.onnx", out, force=True, **FAST).reused == 0


def test_limit_failures_rerun_only_when_limits_change(tmp_path):
    onnx.save(endless_loop(), tmp_path / "endless.onnx")
    out = tmp_path / "out"
    first = onnx_lab.audit(tmp_path / "endless.onnx", out, timeout_s=2, **FAST)
    assert first.table.status.tolist() == ["timeout"]
    assert onnx_lab.audit(tmp_path / "endless.onnx", out, timeout_s=2, **FAST).reused == 1
    third = onnx_lab.audit(tmp_path / "endless.onnx", out, timeout_s=3, **FAST)
    assert third.reused == 0 and "3 s" in third.table.error[0]


def test_dask_cluster_gives_the_local_table(tmp_path):
    distributed = pytest.importorskip("distributed")
    root = make_zoo(tmp_path / "zoo")
    for name in ("conv_bn6.onnx", "nested/dynamic.onnx"):
        (root / name).unlink()
    local = onnx_lab.audit(root, tmp_path / "local", dims={"batch": 2}, **FAST)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        remote = onnx_lab.audit(root, tmp_path / "dask", scheduler=cluster.scheduler_address,
                                dims={"batch": 2}, **FAST)
    pd.testing.assert_frame_equal(remote.table[DETERMINISTIC_COLUMNS],
                                  local.table[DETERMINISTIC_COLUMNS])
    assert remote.table.status.value_counts().to_dict() == {"ok": 2, "error": 1}
    assert remote.table.external_data.tolist() == [pd.NA, False, True]
    assert (remote.table.loc[remote.table.status == "ok", "latency_ms"] > 0).all()


def test_the_audits_own_dask_cluster_logs_no_info_lines(tmp_path, caplog):
    # about forty INFO lines per audit (the scheduler's and workers' start, every
    # connection, the shutdown) reached the terminal and the notebook
    import logging

    pytest.importorskip("distributed")
    onnx.save(conv_bn(0), tmp_path / "a.onnx")
    before = logging.getLogger("distributed").level
    caplog.set_level(logging.INFO)
    res = onnx_lab.audit(tmp_path, None, engine="dask", **FAST)
    assert res.table.status.tolist() == ["ok"]
    chatty = [r.getMessage() for r in caplog.records
              if r.name.startswith("distributed") and r.levelno < logging.WARNING]
    assert chatty == []
    assert logging.getLogger("distributed").level == before  # the user's logging, back


def test_fp16_plan(tmp_path):
    onnx.save(conv_bn(0), tmp_path / "a.onnx")
    res = onnx_lab.audit(tmp_path, None, fp16=True, fp16_max_trials=4, **FAST)
    r = _row(res, "a.onnx")
    assert r.status == "ok" and r.fp16_passed and r.fp16_kept >= 0 and r.fp16_trials >= 1
    assert r.fp16_candidates > 0 and res.out is None and res.files == {}


def test_fp16_of_a_tree_model_is_not_applicable_not_an_error(tmp_path):
    # trees only (nothing fp16 conversion changes): no plan and no verdict, the reason in
    # the note; the model's row is not an error (a zoo of scikit-learn models was all red)
    onnx.save(tree_zipmap(ml_only=True), tmp_path / "trees.onnx")
    res = onnx_lab.audit(tmp_path, None, fp16=True, fp16_max_trials=4, dims={"N": 3}, **FAST)
    r = _row(res, "trees.onnx")
    assert r.status == "ok" and pd.isna(r.error_stage), r.error
    assert pd.isna(r.fp16_passed) and "Nothing to convert to fp16" in r.fp16_note
    assert "TreeEnsembleClassifier" in r.fp16_note


# ---------------------------------------------------------------------------- the gate
def _entry(samples, **row):
    return {"row": {"status": "ok", "optimize_steps": 2, "check_errors": 0,
                    "file_bytes": 1000, **row}, "samples": list(samples)}


def test_gate_finds_each_regression_and_no_false_alarm():
    rng = np.random.default_rng(0)
    base = rng.normal(10, 0.3, 60)
    old = {"same": _entry(base), "jitter": _entry(base),
           "slower": _entry(base), "faster": _entry(base), "broke": _entry(base),
           "step": _entry(base), "check": _entry(base), "size": _entry(base),
           "fp16": _entry(base, fp16_passed=True), "gone": _entry(base),
           "busy": _entry(base), "threads": {**_entry(base), "settings": {"threads": 2}}}
    new = {"same": _entry(base),
           # another run of the same speed, 3% apart: noise, not a regression
           "jitter": _entry(rng.normal(10.3, 0.4, 60)),
           "slower": _entry(rng.normal(13, 0.3, 60)),
           "faster": _entry(rng.normal(7, 0.3, 60)),
           "broke": _entry([], status="timeout", error_stage="profile", error_type="Timeout",
                           error="did not finish"),
           "step": _entry(base, optimize_failed="fuse_conv_bn"),
           "check": _entry(base, check_errors=1, check_error_codes="provider_load"),
           "size": _entry(base, file_bytes=1500),
           "fp16": _entry(base, fp16_passed=False, fp16_note="the fp32 model misses it"),
           "added": _entry(base),
           # slower, but measured on a busy machine, or with other threads: not the model
           "busy": _entry(rng.normal(13, 0.3, 60), latency_busy="the machine looks busy"),
           "threads": {**_entry(rng.normal(13, 0.3, 60)), "settings": {"threads": 1}}}
    df = regressions(old, new)
    worse = {(r.model, r.check) for r in df.loc[df.worse].itertuples()}
    assert worse == {("slower", "latency"), ("broke", "status"), ("step", "verification"),
                     ("check", "check"), ("size", "size"), ("fp16", "fp16")}
    info = {(r.model, r.check) for r in df.loc[~df.worse].itertuples()}
    assert info == {("faster", "latency"), ("gone", "missing"), ("added", "added"),
                    ("busy", "latency"), ("threads", "latency")}
    detail = df.set_index("model").detail
    assert "not counted as a regression: this audit: the machine looks busy" in detail["busy"]
    assert "other options (threads 2 -> 1)" in detail["threads"]
    assert "fuse_conv_bn no longer verifies" in df.set_index("model").loc["step", "detail"]
    assert df.worse.iloc[0] and not df.worse.iloc[-1]  # regressions first


def test_gate_says_a_model_whose_files_changed():
    # a weight scaled by 10 (same size, same nodes): the gate said nothing at all
    old = {"m": {**_entry([], num_nodes=7), "sha256": "aaa"},
           "same": {**_entry([]), "sha256": "bbb"}}
    new = {"m": {**_entry([], num_nodes=7), "sha256": "ccc"},
           "same": {**_entry([]), "sha256": "bbb"}}
    df = regressions(old, new)
    assert df[["model", "check", "worse"]].values.tolist() == [["m", "content", False]]
    assert "its weights or attributes changed" in df.detail.iloc[0]


def test_gate_against_an_earlier_audit(tmp_path):
    root = tmp_path / "zoo"
    root.mkdir()
    onnx.save(conv_bn(0), root / "a.onnx")
    onnx.save(conv_bn(1), root / "b.onnx")
    old = onnx_lab.audit(root, tmp_path / "audit", **FAST)
    assert old.regressions is None and not old.regressed
    # the same files again, gated against the old audit (in the same folder: the old
    # manifest is read before anything is written): nothing got worse
    same = onnx_lab.audit(root, tmp_path / "audit", against=tmp_path / "audit", **FAST)
    assert same.reused == 2 and not same.regressed and not same.regressions.worse.any()
    # b is now a broken export: one regression, written beside the table
    import shutil

    shutil.copytree(tmp_path / "audit", tmp_path / "old")
    data = conv_bn(1).SerializeToString()
    (root / "b.onnx").write_bytes(data[:100])
    worse = onnx_lab.audit(root, tmp_path / "audit", against=tmp_path / "old", **FAST)
    assert worse.regressed and worse.reused == 1
    found = worse.regressions.loc[worse.regressions.worse]
    assert found[["model", "check"]].values.tolist() == [["b.onnx", "status"]]
    assert ["b.onnx", "content"] in worse.regressions[["model", "check"]].values.tolist()
    doc = json.loads((tmp_path / "audit" / "regressions.json").read_text())
    assert doc["regressed"] and doc["findings"][0]["model"] == "b.onnx"
    assert "1 regression(s)" in (tmp_path / "audit" / "index.html").read_text()


# ---------------------------------------------------------------------------- bad input
def test_bad_input(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        onnx_lab.audit(tmp_path / "nope")
    with pytest.raises(InputError, match="No .onnx file"):
        onnx_lab.audit(tmp_path)
    onnx.save(conv_bn(0), tmp_path / "a.onnx")
    for kw, msg in (({"workers": 0}, "workers"), ({"timeout_s": -1}, "timeout_s"),
                    ({"memory_gb": float("nan")}, "memory_gb"), ({"engine": "ray"}, "engine"),
                    ({"model_options": {"*.onnx": {"dimz": {}}}}, "unknown option"),
                    ({"model_options": {"*.onnx": {"feeds": str(tmp_path / "x.npz")}}},
                     "does not exist"),
                    ({"against": tmp_path}, "No audit manifest"),
                    # sizes are checked before any model runs (a raw ValueError per model,
                    # and 2.7 silently cut to 2)
                    ({"dims": {"batch": "x"}}, "dim 'batch' must be an int >= 0, got 'x'"),
                    ({"dims": {"batch": 2.7}}, "got 2.7"),
                    ({"shapes": {"x": [1, "3"]}}, "shape of input 'x' must be a list of ints"),
                    ({"model_options": {"*.onnx": {"dims": {"n": -1}}}},
                     r"model_options\['\*.onnx'\]: dim 'n'")):
        with pytest.raises(InputError, match=msg):
            onnx_lab.audit(tmp_path, **kw)


def test_an_output_folder_that_is_an_audited_model_says_so(tmp_path):
    # refused before (nothing written), but the message blamed the disk ("a parent of the
    # path is a file. Free space or pick a writable folder")
    from onnx_lab.errors import SaveError

    onnx.save(conv_bn(0), tmp_path / "a.onnx")
    before = (tmp_path / "a.onnx").read_bytes()
    with pytest.raises(SaveError, match="is the audited model 'a.onnx'"):
        onnx_lab.audit(tmp_path, tmp_path / "a.onnx")
    assert (tmp_path / "a.onnx").read_bytes() == before


def test_model_options_pick_per_model_shapes_and_feeds(tmp_path):
    from zoo_helpers import matmul_add

    (tmp_path / "m").mkdir()
    onnx.save(matmul_add(), tmp_path / "m" / "dyn.onnx")
    feeds = tmp_path / "x.npz"
    np.savez(feeds, x=np.ones((3, 16), np.float32))
    res = onnx_lab.audit(tmp_path / "m", None, model_options={
        "dyn.onnx": {"dims": {"batch": 3}, "feeds": str(feeds)},
        "other*.onnx": {"dims": {"batch": 99}}}, **FAST)
    r = _row(res, "dyn.onnx")
    assert r.status == "ok" and r.dims_given == "batch=3" and r.latency_ms > 0


def test_a_leading_dim_no_option_can_name_takes_the_batch(tmp_path):
    # A folder of skl2onnx models (X [None, 16]) or tf2onnx ones (a per-model unk__N batch):
    # no zoo-wide dims name reaches those dims, and every row was a DimError.
    from zoo_helpers import matmul_add

    onnx.save(matmul_add(batch_dim=None), tmp_path / "skl.onnx")
    onnx.save(matmul_add(batch_dim="unk__12"), tmp_path / "tf.onnx")
    onnx.save(matmul_add(), tmp_path / "named.onnx")  # a name: given with dims, as before
    onnx.save(matmul_add(batch_dim=None), tmp_path / "given.onnx")
    res = onnx_lab.audit(tmp_path, None, model_options={"given.onnx": {"shapes": {"x": [5, 16]}}},
                         **FAST)
    for model in ("skl.onnx", "tf.onnx"):
        r = _row(res, model)
        assert r.status == "ok" and r.shapes_given == "x=1x16" and r.latency_ms > 0, r.error
        assert r.macs == 16 * 8  # a batch of one
    assert _row(res, "given.onnx").shapes_given == "x=5x16"  # a given shape wins
    n = _row(res, "named.onnx")
    assert n.error_type == "DimError" and pd.isna(n.shapes_given)
    res = onnx_lab.audit(tmp_path / "skl.onnx", None, batch=4, **FAST)
    assert _row(res, "skl.onnx").shapes_given == "x=4x16"
    assert _row(res, "skl.onnx").macs == 4 * 16 * 8
    res = onnx_lab.audit(tmp_path / "tf.onnx", None, dims={"unk__12": 3}, **FAST)
    r = _row(res, "tf.onnx")  # a dim given by name wins over the batch
    assert r.dims_given == "unk__12=3" and pd.isna(r.shapes_given) and r.macs == 3 * 16 * 8
    res = onnx_lab.audit(tmp_path / "tf.onnx", None, batch=None, **FAST)
    r = _row(res, "tf.onnx")
    assert r.error_type == "DimError" and "unk__12" in r.error
    for bad in (0, 2.5, True):
        with pytest.raises(InputError, match="batch must be an int >= 1 or None"):
            onnx_lab.audit(tmp_path, None, batch=bad, **FAST)


def test_the_index_marks_a_flops_total_that_leaves_nodes_out():
    # one custom op early in a model left 133 of 140 nodes uncounted; the page showed the
    # partial total as if complete (the count was only in the CSV)
    from onnx_lab.render.audit import _cells_html

    row = {"model": "m.onnx", "status": "ok", "flops": 2.03e6, "unknown_cost_nodes": 133,
           "num_nodes": 140}
    html = _cells_html(row, None)
    assert "+ 133 unknown" in html and "133 nodes of unknown cost are not counted" in html
    assert "unknown" not in _cells_html({**row, "unknown_cost_nodes": 0}, None)


@pytest.mark.parametrize("at_exit, limit", [
    ("time.sleep(60)", 12),  # past the timeout, after the last stage
    ("os.kill(os.getpid(), signal.SIGSEGV)", 60),  # a crash in the interpreter's teardown
])
def test_a_child_that_ends_badly_after_its_last_stage_keeps_its_row(tmp_path, monkeypatch,
                                                                     at_exit, limit):
    # The result written after the last stage is complete: the model read "timeout" (or
    # "crashed") with every figure filled, when its process was slow to exit.
    from onnx_lab.zoo._engine import run_isolated

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import atexit, os, signal, time\natexit.register(lambda: {at_exit})\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    onnx.save(conv_bn(0), tmp_path / "m.onnx")
    res = run_isolated({"path": str(tmp_path / "m.onnx"), "timeout_s": limit,
                        "memory_gb": 0, "budget_s": 0.2, "providers": "cpu", "threads": 1,
                        "preset": "safe", "report": False, "dims": {}, "shapes": {},
                        "batch": 1})
    row = res["row"]
    assert row["status"] == "ok" and row["error_type"] is None, row
    assert row["num_nodes"] == 4 and row["nodes_after"] == 2 and row["latency_ms"] > 0


def test_regressions_json_is_strict_json(tmp_path):
    # A finding with no old (or new) figure ('added', a first check error) was written as
    # "old": NaN, which JSON.parse and other strict readers reject.
    from onnx_lab.zoo import _write

    old = {"a": _entry([], check_errors=0), "c": _entry([])}
    new = {"a": _entry([], check_errors=1, check_error_codes="checker"), "b": _entry([]),
           "c": _entry([], status="error", error_stage="open")}
    gate = regressions(old, new)
    _write(tmp_path, {"a": {"model": "a", "status": "ok"}}, gate, manifest=None)

    def no_constants(name):
        raise ValueError(f"{name} is not JSON")

    doc = json.loads((tmp_path / "regressions.json").read_text(), parse_constant=no_constants)
    by = {(f["model"], f["check"]): f for f in doc["findings"]}
    assert by[("b", "added")]["old"] is None and by[("a", "check")]["old"] is None
