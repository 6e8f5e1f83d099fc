"""onnx_lab.numerics."""
