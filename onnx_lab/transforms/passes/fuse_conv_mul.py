"""fuse_conv_mul: fold a Mul by a per-channel constant after a Conv into the Conv's weights."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_lab.core.values import const_array
from onnx_lab.transforms.base import Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern, PatternPass
from onnx_lab.transforms.passes._shared import (
    bypass_blocker,
    conv_blocker,
    conv_out_channels,
    fold_into_producer,
    per_channel,
    scale_weight,
)
from onnx_lab.transforms.passes._util import constant_other, freed_bytes


@register_pass("fuse_conv_mul")
class FuseConvMul(PatternPass):
    r"""Fold a Mul by a per-channel constant after a Conv into the Conv's weights and bias.

    ### Conv + Mul(per-channel constant) → Conv (`fuse_conv_mul`)

    tf2onnx writes a Keras BatchNormalization after a convolution as `Mul` by a per-channel
    scale and `Add` of a per-channel shift (the BatchNormalization already folded into two
    constants), so `fuse_conv_bn` does not see it: a MobileNetV2 keeps 17 such pairs, 34 of its
    140 nodes. A Conv computes y = W∗x + b; multiplying channel c by a constant s_c gives

    $$y'_c = s_c\,(W_c * x + b_c) = (s_c W_c) * x + s_c b_c,\qquad
    W'_c = s_c\,W_c,\quad b'_c = s_c\,b_c$$

    and the Mul goes away; the Add after it then becomes the bias (`fuse_conv_add_bias`). The
    constant must broadcast per channel: shape `[1, C, 1, 1]`, `[C, 1, 1]` or a single value
    (a plain `[C]` vector scales the last axis and is skipped with a reason).

    **Why it is safe.** The math is exact; only float rounding changes (computed in float64,
    stored in the weight dtype). As for `fuse_conv_bn`, a Conv whose output is read elsewhere
    (the unscaled value is still needed) or whose weights are not constants is skipped."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("conv_mul",)
    presets = {"safe": (45,)}  # before fuse_conv_add_bias: Conv->Mul->Add (transforms/presets.py)

    no_match_reason = "no Mul by a per-channel constant directly follows a Conv"
    pattern = Pattern("conv_mul", "Mul", producer=("Conv", "ConvTranspose"), inputs=(0, 1),
                      arity=2, where=constant_other)

    def check(self, b: Binding) -> str | None:
        conv, arr = b.producer, b.fit
        why = conv_blocker(conv, b.root, b.model)
        if why:
            return why
        w = const_array(conv.inputs[1])
        if arr.dtype.kind != "f":
            return f"{b.root_id} multiplies by a {arr.dtype} constant, not a float one"
        if per_channel(arr, conv_out_channels(conv, w), w.ndim) is None:
            return (f"{b.root_id} multiplies by a constant of shape {list(arr.shape)}, not one "
                    "value per channel (use [1, C, 1, 1])")
        if not np.all(np.isfinite(arr)):
            return f"{b.root_id} multiplies by a constant holding inf or NaN"
        return None

    def describe(self, b: Binding) -> Found:
        return Found(f"{b.root_id} scales each channel of {b.producer_id}: it folds into its "
                     "weights and bias", saving_bytes=freed_bytes([b.other], [b.root]),
                     data={"side": b.input})

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        conv, mul = nodes[:2]
        side = m.data["side"]
        if bypass_blocker(mul, 0, side):
            return
        c = mul.inputs[1 - side]
        w = const_array(conv.inputs[1])
        s = per_channel(const_array(c), conv_out_channels(conv, w), w.ndim).astype(np.float64)
        # s·(W*x + b) = (s·W)*x + s·b per output channel
        rw.set_const_input(conv, 1, scale_weight(conv, w, s))
        if len(conv.inputs) > 2 and conv.inputs[2] is not None:
            b = const_array(conv.inputs[2]).astype(np.float64)
            rw.set_const_input(conv, 2, (s * b).astype(w.dtype))
        fold_into_producer(rw, conv, mul, side)
