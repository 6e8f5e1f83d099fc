"""Layer-by-layer comparison: onnx_lab vs Polygraphy, whole processes, wall time and peak RSS.

For ResNet-50 and BERT-base (torch exports from ``_models.py``), the original model is compared
with its onnxsim-simplified version, every intermediate tensor included:

- onnx_lab: ``onnx-lab compare ORIG SIMP --layerwise --json`` (one process);
- Polygraphy: ``polygraphy run ORIG --onnxrt --onnx-outputs mark all --save-outputs ref.json``
  then ``polygraphy run SIMP --onnxrt --onnx-outputs mark all --load-outputs ref.json`` (two
  processes; wall times add, peak RSS is the larger).

Peak RSS is sampled every 20 ms over the process and its children (psutil). Also a multi-GB
external-data model (``_models.big_external``) is compared with itself after a pass; its peak
RSS is reported against the size of its weights.

Run: ``.venv/bin/python benchmarks/bench_compare.py [resnet50] [bert_base] [big]``.
Targets: wall <= 0.25x Polygraphy, peak RSS <= 0.5x; big model peak RSS < 2x its weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
PY = sys.executable
POLY = str(Path(PY).with_name("polygraphy"))
WORK = HERE / "_models" / "bench_compare"


def measure(cmd: list[str], show: bool = False, **kw) -> tuple[float, int, int]:
    """(wall seconds, peak RSS bytes of the process tree, exit code); ``show`` prints stdout."""
    t0 = time.perf_counter()
    out = tempfile.TemporaryFile() if show else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, **kw)
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss + sum(c.memory_info().rss
                                             for c in ps.children(recursive=True))
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):
        print(f"  ! {' '.join(cmd[:4])}... exited {proc.returncode}: {err.strip()[-400:]}")
    if show:
        out.seek(0)
        for line in out.read().decode(errors="replace").strip().splitlines():
            print("    " + line)
        out.close()
    return wall, peak, proc.returncode


def simplified(path: Path) -> Path:
    """The onnxsim-simplified copy of ``path`` (cached next to the benchmark models)."""
    import onnx
    import onnxsim

    WORK.mkdir(parents=True, exist_ok=True)
    out = WORK / (path.stem + ".sim.onnx")
    if not out.exists():
        model, ok = onnxsim.simplify(onnx.load(str(path)))
        if not ok:
            raise SystemExit(f"onnxsim could not validate {path}")
        tmp = out.with_suffix(".tmp")
        onnx.save(model, str(tmp))
        os.replace(tmp, out)
    return out


def gb(n: int) -> str:
    return f"{n / 2**30:.2f} GB"


def bench_pair(name: str, orig: Path, dims: dict[str, int], poly_args: list[str]) -> dict:
    simp = simplified(orig)
    print(f"\n== {name}: {orig.name} vs {simp.name} (layerwise)")
    dim_args = [a for k, v in dims.items() for a in ("--dims", f"{k}={v}")]
    with tempfile.TemporaryDirectory(prefix="bench_compare_") as tmp:
        out_json = Path(tmp) / "lab.json"
        lab_cmd = [PY, "-m", "onnx_lab.cli", "compare", str(orig), str(simp), "--layerwise",
                   "--json", *dim_args]
        t0 = time.perf_counter()
        with open(out_json, "w") as f:
            proc = subprocess.Popen(lab_cmd, stdout=f, stderr=subprocess.PIPE, cwd=ROOT)
            ps = psutil.Process(proc.pid)
            lab_peak = 0
            while proc.poll() is None:
                try:
                    lab_peak = max(lab_peak, ps.memory_info().rss)
                except psutil.Error:
                    pass
                time.sleep(0.02)
        lab_wall = time.perf_counter() - t0
        if proc.returncode not in (0, 1):
            print("  ! onnx-lab failed:", proc.stderr.read().decode()[-600:])
        res = json.loads(out_json.read_text())
        n_layers = len(res["layers"])
        print(f"  onnx_lab   : {lab_wall:6.1f} s, peak RSS {gb(lab_peak)}, {n_layers} layers "
              f"compared, passed={res['passed']}, first_divergence="
              f"{(res['first_divergence'] or {}).get('node_id')}")
        ref_json = Path(tmp) / "ref.json"
        inputs_json = Path(tmp) / "inputs.json"
        w1, p1, _ = measure([POLY, "run", str(orig), "--onnxrt", "--onnx-outputs", "mark", "all",
                             "--save-outputs", str(ref_json), "--save-inputs", str(inputs_json),
                             *poly_args])
        size = ref_json.stat().st_size if ref_json.exists() else 0
        w2, p2, _ = measure([POLY, "run", str(simp), "--onnxrt", "--onnx-outputs", "mark", "all",
                             "--load-inputs", str(inputs_json), "--load-outputs", str(ref_json),
                             *poly_args])
    poly_wall, poly_peak = w1 + w2, max(p1, p2)
    print(f"  polygraphy : {poly_wall:6.1f} s ({w1:.1f} + {w2:.1f}), peak RSS {gb(poly_peak)}, "
          f"saved outputs {size / 2**20:.0f} MB")
    print(f"  ratio      : wall {lab_wall / poly_wall:.2f}x (target <= 0.25x), "
          f"peak RSS {lab_peak / poly_peak:.2f}x (target <= 0.5x)")
    return {"model": name, "lab_s": lab_wall, "lab_rss": lab_peak, "poly_s": poly_wall,
            "poly_rss": poly_peak, "layers": n_layers}


def bench_big() -> dict:
    """A multi-GB external-data model compared with itself after a pass (a re-opened copy
    whose graph went through eliminate_identity when transforms are available)."""
    import _models

    path = _models.big_external()
    weights = sum(f.stat().st_size for f in path.parent.glob(path.name + "*.data"))
    script = f"""
import onnx_lab
ref = onnx_lab.open({str(path)!r})
cand = onnx_lab.open({str(path)!r})
try:
    r = cand.apply("eliminate_identity", verify=False)
    print("pass eliminate_identity: modified", r.modified, r.reason or "")
except Exception as e:  # transforms missing or pass unknown: compare the re-opened copy
    print("no pass applied:", type(e).__name__, e)
c = onnx_lab.compare(ref, cand, dims={{"batch": 1}})
print(c.summary_text())
"""
    print(f"\n== big external-data model: {path.name}, weights {gb(weights)}")
    wall, peak, code = measure([PY, "-c", script], show=True, cwd=ROOT)
    print(f"  onnx_lab   : {wall:6.1f} s, peak RSS {gb(peak)} = {peak / weights:.2f}x weights "
          f"(target < 2x), exit {code}")
    return {"model": "big_external", "lab_s": wall, "lab_rss": peak, "weights": weights}


def main(argv: list[str]) -> None:
    import _models

    which = argv or ["resnet50", "bert_base", "big"]
    if "resnet50" in which:
        bench_pair("ResNet-50", _models.resnet50(), {}, [])
    if "bert_base" in which:
        seq = 128
        bench_pair("BERT-base", _models.bert_base(), {"batch": 1, "sequence": seq},
                   ["--input-shapes", f"input_ids:[1,{seq}]", f"token_type_ids:[1,{seq}]",
                    f"attention_mask:[1,{seq}]", "--val-range", "input_ids:[0,1000]",
                    "token_type_ids:[0,1]", "attention_mask:[1,1]"])
    if "big" in which:
        bench_big()


if __name__ == "__main__":
    main(sys.argv[1:])
