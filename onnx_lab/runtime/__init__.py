"""onnx_lab.runtime: the one place that talks to onnxruntime.

Sessions and the provider policy (:mod:`~onnx_lab.runtime.session`), seeded feeds
(:mod:`~onnx_lab.runtime.feeds`), chunked capture of intermediate tensors
(:mod:`~onnx_lab.runtime.capture`) and the one-shot in-memory runner used by verification
(:mod:`~onnx_lab.runtime._runner`). Importing this package does not import onnxruntime.
"""
