"""onnx_lab.analysis."""
