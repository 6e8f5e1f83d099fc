"""make_session: providers, levels, extra outputs, profiling output location."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_lab
from onnx_lab.errors import InputError, ProviderError
from onnx_lab.numerics.feeds import make_feeds
from onnx_lab.numerics.session import make_session, resolve_providers


def test_profiling_trace_never_lands_in_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lab = onnx_lab.open("sample:convnet")
    sess = make_session(lab.model, profile=True)
    sess.run(None, make_feeds(lab))
    trace = sess.end_profiling()
    assert not str(trace).startswith(str(tmp_path)) and "onnx_lab_ort_profile" in trace
    assert list(tmp_path.iterdir()) == []


def test_extra_outputs_expose_intermediates():
    lab = onnx_lab.open("sample:convnet")
    sess = make_session(lab.model, extra_outputs=["/stem/relu/Relu_output_0"])
    names = [o.name for o in sess.get_outputs()]
    assert names == ["logits", "/stem/relu/Relu_output_0"]
    logits, relu = sess.run(None, make_feeds(lab))
    assert relu.shape == (1, 8, 32, 32) and (relu >= 0).all() and np.isfinite(logits).all()


def test_provider_names():
    assert resolve_providers("cpu") == ["CPUExecutionProvider"]
    with pytest.raises(ProviderError, match="Unknown execution provider 'gpux'"):
        resolve_providers(["gpux"])
    with pytest.raises(InputError, match="Unknown optimization level"):
        make_session(onnx_lab.open("sample:convnet").model, opt_level="max")
