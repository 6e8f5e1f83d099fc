"""onnx_lab.core."""

# onnx_ir learns ONNX-ML map types before any model is read or written (see _mltypes).
from onnx_lab.core import _mltypes as _mltypes
