"""Named lists of passes applied in order (``lab.apply_preset("safe")``).

``safe`` holds only rewrites that keep the outputs equal up to float rounding. The order lets
each pass see the others' results: Identity/Dropout go first so Conv->Add->BN chains are
adjacent; Conv+Add bias runs before Conv+BN (block2 of sample:convnet is Conv->Add->BN);
dead nodes are swept again at the end, after the fusions left unused nodes behind, and unused
initializers last of all.
"""

from __future__ import annotations

__all__ = ["PRESETS"]

PRESETS: dict[str, list[str]] = {
    "safe": [
        "eliminate_identity",
        "eliminate_dropout",
        "eliminate_dead_nodes",
        "fold_constants",
        "fuse_conv_add_bias",
        "fuse_conv_bn",
        "fuse_transposes",
        "fuse_reshapes",
        "eliminate_dead_nodes",
        "remove_unused_initializers",
    ],
}
