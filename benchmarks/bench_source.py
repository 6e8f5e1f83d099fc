"""Source kept through every step, and what reading it costs.

A plain-torch decoder (``tests/models.py``: ``tiny_decoder(layers=12, d=256)``) is exported
with torch.onnx's dynamo exporter once (cached in ``benchmarks/_models/``). For each step (the
preset ``safe``, onnxsim, onnxslim, onnxoptimizer, ORT basic/extended, ORT's transformer
fusions, onnxscript's rewriter) on a fresh Lab: nodes before/after, the share of nodes whose
PyTorch module is known before and after (``lab.history.source_share``; target: after >= 99% of
before), and the nodes carrying a merged source (several original nodes' parts:
``onnx_lab.sources``).

Cost of reading: ``source_table`` (parsing the metadata of every node) against the rest of
``lab.nodes``, both cold, on the same model, as a ratio.

    .venv/bin/python benchmarks/bench_source.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

STEPS = ["safe", "onnxsim", "onnxslim", "onnxoptimizer", "ort:basic", "ort:extended",
         "ort_transformers", "onnxscript_rewrite"]


def decoder() -> Path:
    path = HERE / "_models" / "source_decoder_l12_d256.onnx"
    if not path.exists():
        from models import decoder_export, tiny_decoder

        out = decoder_export(path.parent / "_source_tmp", tiny_decoder(layers=12, d=256, heads=8))
        path.parent.mkdir(parents=True, exist_ok=True)
        out.rename(path)
    return path


def main() -> None:
    import onnx_lab
    from onnx_lab.analysis.tables import nodes_table
    from onnx_lab.core.source_map import SOURCES_KEY, source_table
    from onnx_lab.transforms import available

    path = decoder()
    have = set(available().name)
    print(f"model: {path.name}")
    print(f"{'step':20s} {'nodes':>11s} {'share before':>12s} {'after':>6s} {'kept':>6s} "
          f"{'merged':>6s}")
    worst = 1.0
    for step in STEPS:
        if step != "safe" and step not in have:
            print(f"{step:20s} not installed")
            continue
        lab = onnx_lab.open(path)
        if step == "safe":
            lab.apply_preset("safe", verify=False)
        else:
            kw = {"model_type": "gpt2"} if step == "ort_transformers" else {}
            lab.apply(step, verify=False, **kw)
        h = lab.history
        before, after = h.source_share.iloc[0], h.source_share.iloc[-1]
        fused = sum(SOURCES_KEY in e.node.metadata_props for e in lab.index.entries.values())
        kept = after / before if before else float("nan")
        worst = min(worst, kept)
        print(f"{step:20s} {h.nodes_after.iloc[0]:>5d}->{h.nodes_after.iloc[-1]:<5d} "
              f"{before:12.4f} {after:6.4f} {kept:6.3f} {fused:6d}")
    print(f"worst kept share: {worst:.4f} (target >= 0.99)")

    ratios = []
    for _ in range(5):
        lab = onnx_lab.open(path)
        _ = lab.index  # built before the timing
        t0 = time.perf_counter()
        source_table(lab.model)
        t1 = time.perf_counter()
        nodes_table(lab.model)  # the source columns are cached now: the rest of the table
        t2 = time.perf_counter()
        ratios.append((t1 - t0) / (t2 - t1))
    ratios.sort()
    print(f"source_table / rest of lab.nodes (cold, median of 5): {ratios[2]:.2f}x "
          f"({len(lab.index)} nodes)")


if __name__ == "__main__":
    main()
