"""fuse_conv_add_bias: fold an Add of a per-channel constant into the Conv's bias."""

from __future__ import annotations

import numpy as np

from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import LabPass, Match, Rewrite, const_array, register_pass
from onnx_lab.transforms.passes._util import alive, freed_bytes, is_std, match, walk
from onnx_lab.transforms.passes.eliminate_identity import bypass_blocker
from onnx_lab.transforms.passes.fuse_conv_bn import conv_blocker, conv_out_channels


def per_channel(c: np.ndarray, channels: int, out_rank: int) -> np.ndarray | None:
    """``c`` as a [channels] vector when adding it to an [N, C, ...] tensor adds c[k] to
    channel k (shapes [1, C, 1, 1], [C, 1, 1], a scalar...), else None.

    A plain [C] vector is *not* per-channel: broadcasting aligns it with the last axis.
    """
    if c.ndim > out_rank:
        return None
    shape = (1,) * (out_rank - c.ndim) + tuple(c.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != 1):
        return None
    if shape[1] == channels:
        return c.reshape(channels)
    if shape[1] == 1:
        return np.full(channels, c.reshape(-1)[0], dtype=c.dtype)
    return None


@register_pass("fuse_conv_add_bias")
class FuseConvAddBias(LabPass):
    """Fold an Add of a per-channel constant after a Conv into the Conv's bias."""

    no_match_reason = "no Add of a per-channel constant directly follows a Conv"

    def find(self, model: LabModel) -> list[Match]:
        out = []
        for nid, add in walk(model):
            if not is_std(add, "Add") or len(add.inputs) != 2:
                continue
            for side in (0, 1):
                x, c = add.inputs[side], add.inputs[1 - side]
                conv = x.producer() if x is not None else None
                if conv is None or not is_std(conv, ("Conv", "ConvTranspose")):
                    continue
                cid = model.index.node_id(conv)
                arr = const_array(c)
                if arr is None:
                    continue  # e.g. a residual Add of two tensors: not a bias
                why = conv_blocker(conv, add, model)
                if why:
                    self.skip(cid, why)
                    break
                w = const_array(conv.inputs[1])
                vec = per_channel(arr, conv_out_channels(conv, w), w.ndim)
                if vec is None:
                    self.skip(cid, f"{nid} adds a constant of shape {list(arr.shape)}, not one "
                                   f"value per channel (use [1, C, 1, 1])")
                    break
                out.append(match(self.name, "conv_add_bias", model, conv, [add],
                                 f"{nid} adds a per-channel constant: it becomes the bias of "
                                 f"{cid}", 1, freed_bytes([c], [add]),
                                 side=side))
                break
        return out

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            conv, add = m.data["nodes"][:2]
            if not alive(conv, add):
                continue
            side = m.data["side"]
            if bypass_blocker(add, 0, side):
                continue
            c = add.inputs[1 - side]
            w = rw.const_array(conv.inputs[1])
            vec = per_channel(rw.const_array(c), conv_out_channels(conv, w), w.ndim)
            has_bias = len(conv.inputs) > 2 and conv.inputs[2] is not None
            # Conv(x) + c = W*x + (b + c): the constant joins the bias.
            b = rw.const_array(conv.inputs[2]) if has_bias else np.zeros_like(vec)
            rw.set_const_input(conv, 2, (b.astype(np.float64) + vec).astype(w.dtype),
                               None if has_bias else f"{conv.inputs[1].name}_bias")
            if rw.bypass(add, input_index=side, keep_name=True):
                rw.drop_if_unused(c)
                rw.record(conv, [conv, add])
