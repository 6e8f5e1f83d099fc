"""onnx_lab.transforms."""
