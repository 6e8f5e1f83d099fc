"""onnx_lab.core."""

# ONNX-ML map types: onnx_ir learns them when core._mltypes is imported, which core.shapes and
# core.load do (every model is read through them). Not here: `onnx-lab --help` imports core
# modules that need no onnx_ir.
