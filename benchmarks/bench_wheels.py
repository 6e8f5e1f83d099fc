"""Real models that ship inside PyPI wheels, opened the way a user meets them (prints figures;
asserts nothing).

Setup (network, once): ``pip download --no-deps`` of ``rapidocr-onnxruntime`` (PP-OCRv4 text
detector and recognizer, a mobile angle classifier: Paddle exports at opset 11-12) and
``silero-vad`` (a voice-activity model whose work happens inside If branches) into
``benchmarks/_models/wheels/``; their ``.onnx`` files are unpacked there. Nothing is committed
and the package never downloads anything.

Per model, with the input shapes a user would give:

- **typed**: tensors with a complete shape after ``lab.model.types(shapes=...)``, beside
  ``onnx.shape_inference.infer_shapes(data_prop=True)`` on the same model with the same input
  shapes (the anchor: what ONNX tools start from);
- **cost**: ``lab.cost()`` GFLOPs and nodes of unknown cost;
- **optimize**: ``apply_preset("safe")`` (every step verified) then ``save``, against
  ``onnxslim.slim`` then ``onnx.save`` (nodes after each; wall time ratio ours/theirs);
- **fp16**: ``find_precision("fp16")``: nodes kept, trials, seconds.

Run: ``.venv/bin/python benchmarks/bench_wheels.py [--only det,rec,cls,vad]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import onnx_lab  # noqa: E402

WHEELS = HERE / "_models" / "wheels"
PACKAGES = ("rapidocr-onnxruntime==1.4.4", "silero-vad==6.2.3")
OCR = "rapidocr_onnxruntime/models"
# name: (file inside a wheel, input shapes, feeds builder or None)
MODELS = {
    "det": (f"{OCR}/ch_PP-OCRv4_det_infer.onnx", {"x": [1, 3, 640, 640]}, None),
    "rec": (f"{OCR}/ch_PP-OCRv4_rec_infer.onnx", {"x": [1, 3, 48, 320]}, None),
    "cls": (f"{OCR}/ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": [1, 3, 48, 192]}, None),
    # The sample rate picks the If branch: random integers would pick neither.
    "vad": ("silero_vad/data/silero_vad.onnx", {"input": [1, 512], "state": [2, 1, 128]},
            lambda: {"input": np.random.default_rng(0).normal(0, 0.1, (1, 512)).astype(
                np.float32), "state": np.zeros((2, 1, 128), np.float32),
                "sr": np.array(16000, np.int64)}),
}


def fetch() -> dict[str, Path]:
    """The models' paths, downloading and unpacking the wheels the first time."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    if not list(WHEELS.glob("*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                        str(WHEELS), *PACKAGES], check=True)
    paths: dict[str, Path] = {}
    for wheel in WHEELS.glob("*.whl"):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                for key, (inner, _, _) in MODELS.items():
                    if name.endswith(inner):
                        target = WHEELS / "unpacked" / inner
                        if not target.exists():
                            target.parent.mkdir(parents=True, exist_ok=True)
                            target.write_bytes(z.read(name))
                        paths[key] = target
    return paths


def _complete(info) -> bool:
    return info is not None and info.shape is not None and not info.dynamic


def onnx_typed(path: Path, shapes: dict[str, list[int]]) -> tuple[int, int]:
    """(tensors with a complete static shape, node outputs) by ONNX's own inference with the
    inputs fixed to ``shapes``."""
    m = onnx.load(str(path))
    for vi in m.graph.input:
        if vi.name in shapes:
            dims = vi.type.tensor_type.shape.dim
            for d, v in zip(dims, shapes[vi.name]):
                d.Clear()
                d.dim_value = v
    out = onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=False,
                                            data_prop=True)
    typed = {}

    def walk(g: onnx.GraphProto) -> None:
        for vi in (*g.value_info, *g.output):
            tt = vi.type.tensor_type
            typed[vi.name] = tt.HasField("shape") and all(
                d.HasField("dim_value") for d in tt.shape.dim)
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)

    walk(out.graph)
    names = []

    def outs(g: onnx.GraphProto) -> None:
        for n in g.node:
            names.extend(o for o in n.output if o)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    outs(a.g)

    outs(out.graph)
    return sum(bool(typed.get(n)) for n in names), len(names)


def bench(key: str, path: Path) -> None:
    _, shapes, feeds_of = MODELS[key]
    feeds = feeds_of() if feeds_of else None
    verify = {"feeds": feeds} if feeds else True
    print(f"\n== {key}: {path.name} ({path.stat().st_size / 1e6:.1f} MB), shapes {shapes}")
    t0 = time.perf_counter()
    lab = onnx_lab.open(path, shapes=shapes)
    types = lab.model.types(shapes=shapes)
    names = [o.name for e in lab.model.index.entries.values() for o in e.node.outputs if o.name]
    ours = sum(_complete(types.get(n)) for n in names)
    t_types = time.perf_counter() - t0
    theirs, total = onnx_typed(path, shapes)
    print(f"[typed] onnx_lab {ours}/{total} node outputs with a complete shape "
          f"({t_types:.2f} s with open); onnx.shape_inference {theirs}/{total}")
    cost = lab.cost()
    print(f"[cost] {cost.total['flops'] / 1e9:.3f} GFLOPs, {cost.total['unknown_nodes']} of "
          f"{cost.total['nodes']} nodes of unknown cost")

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        lab2 = onnx_lab.open(path, shapes=shapes)
        results = lab2.apply_preset("safe", verify=verify)
        lab2.save(Path(tmp) / "ours.onnx")
        t_ours = time.perf_counter() - t0
        verified = all(r.verify_passed is not False for r in results)
        import onnxslim

        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            slim = onnxslim.slim(str(path))
        onnx.save(slim, str(Path(tmp) / "slim.onnx"))
        t_slim = time.perf_counter() - t0
    # Constant nodes are counted apart: onnxslim turns them into initializers, onnx_lab's
    # safe preset leaves that housekeeping to constants_to_initializers (not in the preset).
    def count(nodes) -> str:
        nodes = list(nodes)
        const = sum(n.op_type == "Constant" for n in nodes)
        return f"{len(nodes) - const} (+{const} Constant)"

    print(f"[optimize] main-graph nodes {count(lab.model.graph)}; onnx_lab safe -> "
          f"{count(lab2.model.graph)} (every step verified: {verified}) in {t_ours:.2f} s; "
          f"onnxslim -> {count(slim.graph.node)} (not verified) in {t_slim:.2f} s; "
          f"time ratio {t_ours / t_slim:.2f}x")
    plan = onnx_lab.open(path, shapes=shapes).find_precision("fp16", feeds=feeds,
                                                            progress=False)
    print(f"[fp16] {plan.summary_text()}" + "".join(f"\n  note: {n}" for n in plan.notes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(MODELS))
    args = ap.parse_args()
    paths = fetch()
    for key in args.only.split(","):
        if key not in paths:
            print(f"{key}: not found in the downloaded wheels")
            continue
        bench(key, paths[key])


if __name__ == "__main__":
    main()
