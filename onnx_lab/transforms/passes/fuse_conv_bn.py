"""fuse_conv_bn: fold an inference BatchNormalization into the Conv/ConvTranspose before it."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_lab.core.values import const_array
from onnx_lab.transforms.base import Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern, PatternPass, is_std
from onnx_lab.transforms.passes._shared import (
    bypass_blocker,
    conv_blocker,
    conv_out_channels,
    scale_weight,
)
from onnx_lab.transforms.passes._util import freed_bytes, not_constant, sole_user


def bn_scale_shift(bn: ir.Node) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel (s, t) with BN(x) = s·x + t: s = γ/√(σ²+ε), t = β − μ·s (float64)."""
    parts = [const_array(v) if v is not None else None for v in bn.inputs[1:5]]
    if len(parts) < 4 or any(p is None for p in parts):
        return None
    gamma, beta, mean, var = (np.asarray(p, dtype=np.float64).reshape(-1) for p in parts)
    eps = bn.attributes.get_float("epsilon", 1e-5)
    s = gamma / np.sqrt(var + eps)
    return s, beta - mean * s


@register_pass("fuse_conv_bn")
class FuseConvBN(PatternPass):
    r"""Fold BatchNormalization into the preceding Conv/ConvTranspose weights and bias.

    ### Conv + BatchNormalization → Conv (`fuse_conv_bn`)

    At inference a BatchNormalization is a fixed per-channel affine map. With scale γ, shift β,
    running mean μ and variance σ², and ε:

    $$\mathrm{BN}(y)_c = \gamma_c \frac{y_c - \mu_c}{\sqrt{\sigma^2_c + \varepsilon}} + \beta_c
    = s_c\,y_c + t_c,\qquad s_c = \frac{\gamma_c}{\sqrt{\sigma^2_c+\varepsilon}},\quad
    t_c = \beta_c - \mu_c s_c$$

    A convolution is linear in its weights, so scaling every output channel of the result is the
    same as scaling that channel's filter:

    $$W'_c = W_c \cdot \frac{\gamma_c}{\sqrt{\sigma^2_c+\varepsilon}},\qquad
    b'_c = (b_c - \mu_c)\,\frac{\gamma_c}{\sqrt{\sigma^2_c+\varepsilon}} + \beta_c$$

    (b = 0 when the Conv had no bias; the fold adds one.) The BatchNormalization node disappears;
    a Relu after it (pattern `conv_bn_relu`) stays where it is.

    **Layouts.** Conv weights are `[C_out, C_in/g, k…]`: channel c is row c, for any group
    count g. ConvTranspose weights are `[C_in, C_out/g, k…]`: output channel c = group·(C_out/g)+j
    lives in column j of its group's slice, so the scale is applied along axis 1 per group.

    **Why it is safe.** The math is exact; only float rounding changes (computed in float64, stored
    in the weight dtype). The pass skips, with a reason, a Conv whose output is also read
    elsewhere (the un-normalized value is still needed), a BN in training mode or with its extra
    outputs in use, and non-constant weights. Weights held in Constant nodes (PaddlePaddle
    exports) count as constants."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("conv_bn", "conv_bn_relu")
    presets = {"safe": (60,)}  # after fuse_conv_add_bias (transforms/presets.py)

    no_match_reason = "no BatchNormalization directly follows a Conv"
    pattern = Pattern("conv_bn", "BatchNormalization", producer=("Conv", "ConvTranspose"))

    def check(self, b: Binding) -> str | None:
        bn, conv, nid = b.root, b.producer, b.root_id
        if bn.attributes.get_int("training_mode", 0):
            return f"{nid} runs in training mode"
        extra = [o for o in bn.outputs[1:] if o.uses() or o.is_graph_output()]
        if extra:
            return f"{nid} has other outputs in use ({extra[0].name!r})"
        why = conv_blocker(conv, bn, b.model)
        if why:
            return why
        st = bn_scale_shift(bn)
        if st is None:
            bad = next((v for v in bn.inputs[1:5] if v is not None and const_array(v) is None),
                       None)
            return not_constant(bad, f"a parameter of {nid}")
        channels = conv_out_channels(conv, const_array(conv.inputs[1]))
        if st[0].size != channels:
            return f"{nid} has {st[0].size} channels, {b.producer_id} has {channels}"
        return None

    def describe(self, b: Binding) -> Found:
        bn, nid, cid = b.root, b.root_id, b.producer_id
        relu = sole_user(bn.outputs[0])
        saving = freed_bytes(bn.inputs[1:5], [bn])
        if relu is not None and is_std(relu, "Relu"):
            return Found(f"{nid} folds into {cid}; the Relu after it stays", "conv_bn_relu",
                         saving_bytes=saving, extra=[relu])
        return Found(f"{nid} folds into {cid}", saving_bytes=saving)

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        conv, bn = nodes[:2]
        if bypass_blocker(bn):
            return
        s, t = bn_scale_shift(bn)
        w = const_array(conv.inputs[1])
        has_bias = len(conv.inputs) > 2 and conv.inputs[2] is not None
        b = const_array(conv.inputs[2]).astype(np.float64) if has_bias else 0.0
        # y = s·(W*x + b) + t  =>  W' = s·W per output channel, b' = s·b + t
        #                          (= (b − μ)·γ/√(σ²+ε) + β).
        new_b = (s * b + t).astype(w.dtype)
        rw.set_const_input(conv, 1, scale_weight(conv, w, s))
        bias_name = None if has_bias else f"{conv.inputs[1].name}_bias"
        rw.set_const_input(conv, 2, new_b, bias_name)
        params = list(bn.inputs[1:5])
        rw.bypass(bn, keep_name=True)
        for v in params:
            rw.drop_if_unused(v)
        rw.record(conv, [conv, bn])
