"""How an LLM's next-token predictions are judged: :class:`NextToken`, its presets
(``NEXT_TOKEN``) and :func:`next_token_metrics`. Importable from
:mod:`onnx_lab.numerics.metrics`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class NextToken:
    """How an LLM's next-token predictions are judged (:func:`onnx_lab.compare_llm`).

    ``min_top1``: the fraction of decisive positions (the reference's top-1 ahead of its
    runner-up by :data:`TIE_MARGIN` nats or more) where both sides pick the same most likely
    token; ``max_kl``: the mean KL divergence KL(reference || candidate) of the next-token
    distributions, in nats.
    """

    min_top1: float
    max_kl: float

    def describe(self) -> str:
        """The targets as a short formula (shown in reports)."""
        return f"top-1 agreement >= {self.min_top1:g}, mean KL <= {self.max_kl:g} nats"

    def score(self, top1: float, kl: float) -> float:
        """<= 1 meets both targets: the worse of KL / max_kl and (1-top1) / (1-min_top1)."""
        miss = 1.0 - top1
        s_top1 = miss / (1.0 - self.min_top1) if self.min_top1 < 1 else (
            0.0 if miss <= 0 else math.inf)
        s_kl = kl / self.max_kl if self.max_kl > 0 else (0.0 if kl <= 0 else math.inf)
        return float(max(s_top1, s_kl))


#: Next-token targets per preset: what an LLM comparison calls "the same predictions".
#: int4: most next tokens unchanged (85 %) and a small KL, a usable 4-bit model; tighten them
#: (``min_top1=``, ``max_kl=``) for a model whose answers must not move.
NEXT_TOKEN: dict[str, NextToken] = {
    "exact": NextToken(1.0, 0.0), "fp64": NextToken(1.0, 1e-6),
    "fp32": NextToken(0.99, 1e-3), "fp16": NextToken(0.98, 5e-3),
    "bf16": NextToken(0.95, 0.02), "fp8": NextToken(0.9, 0.05),
    "int8": NextToken(0.9, 0.05), "int4": NextToken(0.85, 0.1),
}

#: Columns of the per-position table of :func:`next_token_metrics`.
NEXT_TOKEN_COLUMNS = ["position", "target", "ref_top1", "cand_top1", "agree", "top5_overlap",
                      "kl", "nll_ref", "nll_cand", "ref_prob", "margin"]

#: Log-probability margin (nats) below which the reference's top two tokens are a tie: a flip
#: between them is rounding, not a different prediction (random-weight and undertrained models
#: predict near-uniform distributions where int4 flips ties while KL stays ~1e-4).
TIE_MARGIN = 0.05


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def next_token_metrics(ref_logits: Any, cand_logits: Any, targets: Any = None
                       ) -> dict[str, np.ndarray]:
    """Per-position next-token metrics of two ``[positions, vocab]`` logit arrays.

    Args:
        ref_logits, cand_logits: the logits of both sides at the same positions (the same
            context: teacher-forced).
        targets: the token that follows each position (-1 or None where unknown: the last
            position); ``nll_*`` is NaN there.

    Returns:
        Arrays keyed by :data:`NEXT_TOKEN_COLUMNS`: position, target, ref_top1, cand_top1,
        agree (same top-1), top5_overlap (shared tokens among both top-5, / 5), kl
        (KL(ref || cand) in nats), nll_ref, nll_cand (negative log-likelihood of the target),
        ref_prob (the reference's probability of its own top-1), margin (the reference's
        log-probability of its top-1 minus its runner-up: below :data:`TIE_MARGIN` a tie).
        Non-finite candidate logits give kl = inf.

    Example:
        >>> m = next_token_metrics(ref, cand, tokens[1:] + [-1]); m["agree"].mean()
    """
    r = np.asarray(ref_logits, dtype=np.float64)
    c = np.asarray(cand_logits, dtype=np.float64)
    if r.shape != c.shape or r.ndim != 2:
        raise ValueError(f"logits must be two [positions, vocab] arrays of one shape, got "
                         f"{list(r.shape)} and {list(c.shape)}")
    n, vocab = r.shape
    lr = _log_softmax(r)
    with np.errstate(invalid="ignore", over="ignore"):
        lc = _log_softmax(c)
        kl = np.einsum("ij,ij->i", np.exp(lr), lr - lc)
    kl = np.where(np.isfinite(kl), np.maximum(kl, 0.0), np.inf)
    k = min(5, vocab)
    top_r = np.argpartition(-r, k - 1, axis=-1)[:, :k]
    top_c = np.argpartition(-np.nan_to_num(c, nan=-np.inf), k - 1, axis=-1)[:, :k]
    overlap = np.array([len(set(a) & set(b)) / k for a, b in zip(top_r, top_c)])
    t = np.full(n, -1, dtype=np.int64) if targets is None else np.asarray(targets, np.int64)
    known = (t >= 0) & (t < vocab)
    ti = np.where(known, t, 0)
    rows = np.arange(n)
    nll_r = np.where(known, -lr[rows, ti], np.nan)
    nll_c = np.where(known, -lc[rows, ti], np.nan)
    r1, c1 = r.argmax(-1), np.nan_to_num(c, nan=-np.inf).argmax(-1)
    two = np.sort(lr, axis=-1)[:, -2:] if vocab > 1 else np.zeros((n, 2))
    return {"position": rows, "target": t, "ref_top1": r1, "cand_top1": c1, "agree": r1 == c1,
            "top5_overlap": overlap, "kl": kl, "nll_ref": nll_r, "nll_cand": nll_c,
            "ref_prob": np.exp(lr[rows, r1]), "margin": two[:, 1] - two[:, 0]}
