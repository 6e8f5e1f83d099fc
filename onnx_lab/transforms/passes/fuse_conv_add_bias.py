"""fuse_conv_add_bias: fold an Add of a per-channel constant into the Conv's bias."""

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
)
from onnx_lab.transforms.passes._util import constant_other, freed_bytes


@register_pass("fuse_conv_add_bias")
class FuseConvAddBias(PatternPass):
    r"""Fold an Add of a per-channel constant after a Conv into the Conv's bias.

    ### Conv + Add(per-channel constant) → Conv bias (`fuse_conv_add_bias`)

    A Conv computes y = W∗x + b. Adding a constant c that holds one value per output channel
    gives W∗x + (b + c), so

    $$b' = b + c$$

    and the Add goes away. The constant must broadcast per channel: shape `[1, C, 1, 1]`,
    `[C, 1, 1]` or a single value. A plain `[C]` vector is **not** per-channel — broadcasting
    aligns it with the last (width) axis — so it is skipped with a reason.

    **Why it is safe.** Addition is associative; only rounding of b + c changes."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("conv_add_bias",)
    presets = {"safe": (50,)}  # before fuse_conv_bn: Conv->Add->BN (transforms/presets.py)

    no_match_reason = "no Add of a per-channel constant directly follows a Conv"
    pattern = Pattern("conv_add_bias", "Add", producer=("Conv", "ConvTranspose"), inputs=(0, 1),
                      arity=2, where=constant_other)

    def check(self, b: Binding) -> str | None:
        conv, arr = b.producer, b.fit
        why = conv_blocker(conv, b.root, b.model)
        if why:
            return why
        w = const_array(conv.inputs[1])
        if per_channel(arr, conv_out_channels(conv, w), w.ndim) is None:
            return (f"{b.root_id} adds a constant of shape {list(arr.shape)}, not one value per "
                    f"channel (use [1, C, 1, 1])")
        return None

    def describe(self, b: Binding) -> Found:
        return Found(f"{b.root_id} adds a per-channel constant: it becomes the bias of "
                     f"{b.producer_id}", saving_bytes=freed_bytes([b.other], [b.root]),
                     data={"side": b.input})

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        conv, add = nodes[:2]
        side = m.data["side"]
        if bypass_blocker(add, 0, side):
            return
        c = add.inputs[1 - side]
        w = const_array(conv.inputs[1])
        vec = per_channel(const_array(c), conv_out_channels(conv, w), w.ndim)
        has_bias = len(conv.inputs) > 2 and conv.inputs[2] is not None
        # Conv(x) + c = W*x + (b + c): the constant joins the bias.
        b = const_array(conv.inputs[2]) if has_bias else np.zeros_like(vec)
        rw.set_const_input(conv, 2, (b.astype(np.float64) + vec).astype(w.dtype),
                           None if has_bias else f"{conv.inputs[1].name}_bias")
        fold_into_producer(rw, conv, add, side)
