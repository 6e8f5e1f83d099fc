"""onnx_lab.profiling."""
