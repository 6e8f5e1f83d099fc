"""onnx_lab.transforms.passes."""
