"""onnx_lab.core."""
