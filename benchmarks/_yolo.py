"""A real ultralytics YOLOv8n export, built once for the benchmarks (never committed).

ultralytics needs torchvision, which imports only beside the torch build it was made for, so the
export runs in a virtualenv of its own, ``benchmarks/_models/yolo-venv`` (torch 2.14.1,
torchvision 0.29.1, ultralytics; pip takes torch and torchvision from the machine's wheel
store where it has them). The network is architecture-only (``yolov8n.yaml``: random weights,
no ``.pt`` download), exported by ultralytics' own ``export(format="onnx")`` at 320x320 with a
dynamic batch/height/width and opset 12 -- its anchor generation (``Range`` over a float start
and an int64 shape) and its DFL head are what users' detectors hold.

    .venv/bin/python benchmarks/_yolo.py            # prints the path, building it if missing

Set ``ONNX_LAB_YOLO_VENV`` to reuse an existing venv with ultralytics.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent / "_models"
VENV = Path(os.environ.get("ONNX_LAB_YOLO_VENV", MODELS_DIR / "yolo-venv"))
PACKAGES = ("torch==2.14.1", "torchvision==0.29.1", "ultralytics", "onnx")

_EXPORT = r"""
import sys, os, shutil
os.environ.setdefault("YOLO_OFFLINE", "1")
from ultralytics import YOLO
m = YOLO("yolov8n.yaml")                      # architecture only: random weights, no download
out = m.export(format="onnx", imgsz=320, dynamic=True, opset=12, simplify=False)
shutil.move(out, sys.argv[1])
"""


def _venv_python() -> Path:
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    probe = subprocess.run([str(py), "-c", "import ultralytics"], capture_output=True)
    if probe.returncode != 0:
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PACKAGES], check=True)
    return py


def yolov8n(imgsz: int = 320) -> Path:
    """The path of ``yolov8n_{imgsz}.onnx``, exporting it the first time."""
    target = MODELS_DIR / f"yolov8n_{imgsz}.onnx"
    if target.exists():
        return target
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    py = _venv_python()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / target.name
        script = _EXPORT.replace("imgsz=320", f"imgsz={imgsz}")
        subprocess.run([str(py), "-c", script, str(out)], check=True, cwd=tmp)
        shutil.move(str(out), str(target))
    return target


if __name__ == "__main__":
    print(yolov8n())
