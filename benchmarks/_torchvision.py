"""Export torchvision's ResNet-50 and SSDlite320-MobileNetV3 (random weights) to ONNX.

Run with the Python of a separate virtual environment that holds torchvision (never a
dependency of onnx_lab, and PyPI's torchvision does not import beside the torch of the main
environment)::

    python3.11 -m venv /work/venvs/tv
    /work/venvs/tv/bin/pip install torch==2.14.1 torchvision==0.29.1 onnx onnxscript
    /work/venvs/tv/bin/python benchmarks/_torchvision.py            # every model
    /work/venvs/tv/bin/python benchmarks/_torchvision.py tv_resnet50  # one

``benchmarks/bench_optimize.py --torchvision-venv /work/venvs/tv`` runs this itself for the
files it misses. Files go to ``benchmarks/_models/`` (gitignored), written to a temporary
name and renamed into place last:

- ``tv_resnet50``: ``torchvision.models.resnet50(weights=None)``, input ``x`` [1,3,224,224],
  opset 17, TorchScript exporter with its defaults (constant folding on: the exporter folds
  every BatchNormalization into its Conv);
- ``tv_resnet50_bn``: the same without the exporter's constant folding (its 53
  BatchNormalization nodes kept, as an export in training-mode-preserving settings or by
  another tool leaves them);
- ``tv_resnet50_dynamo``: the same model by ``torch.onnx.export(..., dynamo=True)`` (opset
  18, weights inline);
- ``tv_ssdlite``: ``ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)`` in
  eval mode with its pre- and post-processing (resize, box decoding, per-class NMS), input
  ``image`` [1,3,320,320], outputs ``boxes``, ``scores``, ``labels``, opset 17, TorchScript
  exporter without constant folding (BatchNormalization nodes kept);
- ``tv_ssdlite_dynamo``: the same by the dynamo exporter, when it can export it (the file is
  left out otherwise and the benchmark skips it).

Random weights: BatchNormalization statistics are drawn (seeded) so the folds move values.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent / "_models"
VERSION = "v1"  # bump when an export changes so stale files are not reused

MODELS = ("tv_resnet50", "tv_resnet50_bn", "tv_resnet50_dynamo", "tv_ssdlite",
          "tv_ssdlite_dynamo")


def path_of(name: str) -> Path:
    """Where the export of ``name`` lives (whether or not it exists yet)."""
    return MODELS_DIR / f"{name}_{VERSION}.onnx"


def _randomize_bn(model) -> None:
    import torch

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)


def _module(name: str):
    import torch
    import torchvision

    torch.manual_seed(0)
    if name.startswith("tv_resnet50"):
        model = torchvision.models.resnet50(weights=None)
        _randomize_bn(model)
        return model.eval(), (torch.randn(1, 3, 224, 224),), ["x"], ["logits"]
    det = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None)
    _randomize_bn(det)
    det.eval()

    class Detector(torch.nn.Module):  # a batch tensor in, tensors out
        def __init__(self) -> None:
            super().__init__()
            self.det = det

        def forward(self, image):
            out = self.det([image[0]])[0]
            return out["boxes"], out["scores"], out["labels"]

    return Detector().eval(), (torch.rand(1, 3, 320, 320),), ["image"], \
        ["boxes", "scores", "labels"]


def export(name: str) -> Path | None:
    """Export ``name`` (see the module docstring) unless its file exists; its path, or None
    when the exporter cannot export it (the reason printed)."""
    import torch

    path = path_of(name)
    if path.exists():
        return path
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    module, args, ins, outs = _module(name)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if name.endswith("_dynamo"):
                prog = torch.onnx.export(module, args, dynamo=True, input_names=ins,
                                         output_names=outs, opset_version=18)
                prog.save(str(tmp), external_data=False)
            else:
                torch.onnx.export(module, args, str(tmp), opset_version=17, input_names=ins,
                                  output_names=outs, dynamo=False,
                                  do_constant_folding=name == "tv_resnet50")
    except Exception as e:  # noqa: BLE001 - an exporter's failure: reported, the model skipped
        print(f"{name}: not exported ({type(e).__name__}: {str(e).splitlines()[0][:300]})")
        for p in tmp.parent.glob(tmp.name + "*"):
            p.unlink()
        return None
    os.replace(tmp, path)
    return path


def main(argv: list[str]) -> None:
    import onnx

    for name in argv or MODELS:
        if name not in MODELS:
            raise SystemExit(f"unknown model {name!r}: one of {', '.join(MODELS)}")
        path = export(name)
        if path is not None:
            nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
            print(f"{name}: {path.name} nodes={nodes} size={path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main(sys.argv[1:])
