"""The sessions and runs of a comparison: a model cut at the tensors it compares, run on
the shared feeds (``_session``, ``_run_all``, ``_run_once``). Importable from
:mod:`onnx_lab.numerics.compare`."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from onnx_lab.core.model import LabModel
from onnx_lab.errors import LabError
from onnx_lab.runtime.session import (
    RUNTIME_PROTO_KEY,
    make_session,
    run_session,
)

_ORT_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc",
                "com.microsoft.experimental", "ai.onnx.preview.training", "ai.onnx.training",
                "com.ms.internal.nhwc"}


def _session(model: LabModel, names: list[str], providers: list[str], what: str):
    try:
        return make_session(model, providers=providers, outputs=names, arena=False)
    except LabError as e:
        custom = [f"{e2.node.op_type} (domain {e2.node.domain!r}, node {nid!r})"
                  for nid, e2 in model.index.entries.items()
                  if e2.node.domain not in _ORT_DOMAINS]
        hint = f" Ops of unknown domains: {', '.join(custom[:5])}." if custom else ""
        raise type(e)(f"{what} model: {e.problem}.{hint}", fix=e.fix) from e


# The fix when the candidate fails on inputs the reference ran on: the feeds are fine (an
# encoder that lost a category refused one the reference knows, and the fix blamed the
# seeded inputs and asked for real ones).
CANDIDATE_ONLY_FIX = ("The reference model ran on these same inputs: the candidate refuses "
                      "inputs the reference takes (a category, key, index or size it no longer "
                      "accepts), a difference between the models, not a problem of the feeds.")


def _run(sess, feeds: Mapping[str, np.ndarray], names: list[str], what: str
         ) -> dict[str, np.ndarray]:
    return run_session(sess, feeds, names, what=f"the {what} model")


def _run_all(model: LabModel, feed_list: list, names: list[str], providers: list[str],
             what: str) -> list[dict[str, np.ndarray]]:
    sess = _session(model, names, providers, what)
    return [_run(sess, f, names, what) for f in feed_list]


def _run_once(model: LabModel, feeds, name: str, providers: list[str], what: str) -> np.ndarray:
    """One tensor of one run, without leaving a runtime-proto cache on the model."""
    cached = model.is_cached(RUNTIME_PROTO_KEY)
    try:
        return _run(_session(model, [name], providers, what), feeds, [name], what)[name]
    finally:
        if not cached:
            model.forget(RUNTIME_PROTO_KEY)
