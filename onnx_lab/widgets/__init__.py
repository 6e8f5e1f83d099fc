"""onnx_lab.widgets."""
