"""Teaching texts: what each pass does, why it keeps the outputs, and its math (markdown).

Used by the FusionLab widget and the teaching notebook.

Example:
    >>> from onnx_lab.transforms import explain
    >>> print(explain("conv_bn"))
"""

from __future__ import annotations

from onnx_lab.errors import unknown_name
from onnx_lab.transforms.base import _REGISTRY, pass_names

__all__ = ["explain", "PATTERN_PASS"]

# pattern name -> pass name
PATTERN_PASS: dict[str, str] = {
    "conv_bn": "fuse_conv_bn", "conv_bn_relu": "fuse_conv_bn",
    "conv_add_bias": "fuse_conv_add_bias", "matmul_add": "fuse_matmul_add",
    "constant_subgraph": "fold_constants", "dead_nodes": "eliminate_dead_nodes",
    "identity": "eliminate_identity", "dropout": "eliminate_dropout",
    "transpose_cancel": "fuse_transposes", "transpose_merge": "fuse_transposes",
    "noop_transpose": "eliminate_noop", "noop_reshape": "eliminate_noop",
    "noop_cast": "eliminate_noop", "noop_slice": "eliminate_noop", "noop_pad": "eliminate_noop",
    "noop_concat": "eliminate_noop", "noop_expand": "eliminate_noop",
    "noop_arith": "eliminate_noop", "reshape_chain": "fuse_reshapes",
    "squeeze_cancel": "fuse_reshapes", "squeeze_merge": "fuse_reshapes",
    "unsqueeze_merge": "fuse_reshapes", "duplicate_initializer": "dedupe_initializers",
    "unused_initializer": "remove_unused_initializers",
    "initializer_input": "remove_initializer_inputs",
    "constant_node": "constants_to_initializers", "zipmap": "remove_zipmap",
}

_PROVENANCE = ("\n\n**Provenance.** Every node the pass creates or changes records the "
               "original nodes it stands for (node metadata `onnx_lab.origin`), so "
               "`onnx_lab.transforms.origins(model)` maps it back across any number of steps.")

_TEXTS: dict[str, str] = {
    "fuse_conv_bn": r"""### Conv + BatchNormalization → Conv (`fuse_conv_bn`)

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
exports) count as constants.""",
    "fuse_conv_add_bias": r"""### Conv + Add(per-channel constant) → Conv bias (`fuse_conv_add_bias`)

A Conv computes y = W∗x + b. Adding a constant c that holds one value per output channel
gives W∗x + (b + c), so

$$b' = b + c$$

and the Add goes away. The constant must broadcast per channel: shape `[1, C, 1, 1]`,
`[C, 1, 1]` or a single value. A plain `[C]` vector is **not** per-channel — broadcasting
aligns it with the last (width) axis — so it is skipped with a reason.

**Why it is safe.** Addition is associative; only rounding of b + c changes.""",
    "fuse_matmul_add": r"""### MatMul + Add → Gemm (`fuse_matmul_add`)

Gemm computes Y = α·A·B + β·C. With α = β = 1, B the MatMul's constant weight `[K, N]` and C
the Add's bias (`[N]` or `[1, N]`):

$$\mathrm{Gemm}(A, B, C) = A B + C = \mathrm{Add}(\mathrm{MatMul}(A, B), C)$$

Gemm only takes 2-D A, so the pass fuses only when the MatMul input is 2-D. Transformer
exports feed 3-D `[batch, seq, hidden]` tensors; wrapping a Gemm in Reshapes would add nodes,
and onnxruntime already fuses N-D MatMul+Add at run time, so those are skipped with a reason.

**Why it is safe.** The same products and sums, in one kernel.""",
    "fold_constants": r"""### Constant folding (`fold_constants`)

A node whose inputs are all constants (initializers, Constant nodes, or results of other such
nodes) computes the same value on every run. The pass evaluates each such subgraph once with
`onnx.reference.ReferenceEvaluator`, stores the results as initializers under the same tensor
names, and removes the nodes (and the inputs nothing else reads).

Example: sample:convnet stores its head weight flat and reshapes it at run time:
`Reshape(weight_flat[160], [10, 16])` becomes the initializer `[10, 16]` itself.

**The guard.** Folding can *grow* a model: `Expand(1.0, [4096, 4096])` is 4 bytes before and
64 MB after. Folds are applied while the step's total growth (bytes produced minus bytes freed)
stays within `max_growth_bytes` (default 16 MB); the others are refused, and the result's notes
say so. An Identity of a constant is left to `eliminate_identity`: folding it would copy the
weight.

**Never folded.** Random ops (RandomNormal, RandomUniform, Bernoulli, Multinomial…), Dropout,
nodes with bodies (If/Loop/Scan), and ops in non-default domains — their values are not
fixed, or not ours to compute. A subgraph that ends in a graph output keeps its node.""",
    "eliminate_dead_nodes": r"""### Dead nodes (`eliminate_dead_nodes`)

A node is dead when none of its outputs reaches a graph output — directly or through other
nodes. Walking the graph backwards from the outputs finds whole dead chains at once
(`/dead/Mul → /dead/Relu` in sample:convnet); connected dead nodes form one match, because a
dead node that feeds another cannot go alone. Nodes inside If/Loop bodies are checked against
their body's outputs, and a value read by a live body keeps its producer alive.

**Why it is safe.** Standard ONNX ops have no side effects: a result nobody reads changes
nothing. Nodes of custom domains are kept (they may have effects).""",
    "eliminate_identity": r"""### Identity (`eliminate_identity`)

Identity(x) = x. Its readers are rewired to read x directly. When the Identity's output is a
graph output, x takes over that name, so model outputs keep their names. An Identity that
copies a graph input (or an initializer, or a value of an enclosing graph) to a graph output
is kept: both names must survive.""",
    "remove_zipmap": r"""### ZipMap → the probabilities tensor (`remove_zipmap`)

ZipMap(P, labels) turns the `[N, C]` probabilities P into N maps
$\{\ell_j: P_{ij}\}_{j<C}$, a `seq(map(int64,float))` output (skl2onnx's and onnxmltools'
default for every classifier). The pass removes the ZipMap and makes P the graph output under
the output's name: the name stays, the **type changes** to a float tensor, which is an
interface change you ask for by running the pass (it is in no preset). Verification compares
row i of P with map i's values in key order. Kept when the maps are read by another node,
when the labels are not in ascending order (the maps come back with sorted keys), or when P
is itself a graph input or output.""",
    "eliminate_dropout": r"""### Dropout at inference (`eliminate_dropout`)

With `training_mode` absent or false, Dropout(x) = x (the inverted-dropout scaling 1/(1−p)
happens only in training). The node is removed like an Identity. It is kept when
`training_mode` is true or not a constant, or when its `mask` output is used.""",
    "fuse_transposes": r"""### Transpose pairs (`fuse_transposes`)

Transpose with perm p gives y.shape[i] = x.shape[p[i]]. Two in a row compose:

$$\mathrm{Transpose}(\mathrm{Transpose}(x, p_1), p_2) = \mathrm{Transpose}(x, p),\qquad
p[i] = p_1[p_2[i]]\quad (p = p_1 \circ p_2)$$

When p is the identity the pair **cancels** (`transpose_cancel`, NHWC→NCHW round trips);
otherwise the pair **merges** into one Transpose (`transpose_merge`). A missing perm means
reversed axes. The first Transpose's output must have no other reader.""",
    "eliminate_noop": r"""### No-op nodes (`eliminate_noop`)

Nodes that return their input unchanged: Transpose with the identity perm, Reshape to the shape
the input already has (0 copies a dim, −1 fills in; symbolic dims count when copied), Cast to
the dtype it already has, Slice with start 0, step 1 and end past the dim (or INT_MAX), Pad
with all-zero pads, Concat of one input, Expand to a shape that broadcasts to the input's own,
and x·1, x/1, x+0, x−0 when the constant does not broadcast x to a bigger shape. Each is
removed like an Identity.""",
    "fuse_reshapes": r"""### Reshape and Squeeze/Unsqueeze chains (`fuse_reshapes`)

Reshape only reinterprets the element order, which never changes, so
Reshape(Reshape(x, s₁), s₂) = Reshape(x, s₂) — with s₂ replaced by the final static shape
when it is known (a 0 in s₂ copies a dim of the *intermediate* tensor, so it cannot be kept
as is).

Unsqueeze(a) followed by Squeeze(a) of the same axes, and Squeeze then Unsqueeze of the same
axes, **cancel**. Two Unsqueezes (or two Squeezes) **merge** into one whose axes are the union
expressed in one coordinate system: for Unsqueeze, the first node's axes are mapped to the
positions the second leaves free in the final rank; for Squeeze, the second node's axes are
mapped back to input positions not removed by the first.""",
    "dedupe_initializers": r"""### Duplicate initializers (`dedupe_initializers`)

Initializers with the same dtype, shape and bytes (compared by SHA-256 of the data, only
within groups whose dtype and shape already agree) are merged: readers of the copies read the
first one and the copies are removed. Tied embeddings exported twice are the typical case.""",
    "remove_unused_initializers": r"""### Unused initializers (`remove_unused_initializers`)

Initializers no node reads (often left behind by other rewrites) are removed. Initializers that
are also graph inputs or outputs are kept: they are part of the model's interface.""",
    "remove_initializer_inputs": r"""### Initializers listed as inputs (`remove_initializer_inputs`)

From IR version 4 on, an initializer that is also listed among the graph inputs is only a
default value: a caller may feed another tensor under that name. `torch.onnx.export(...,
keep_initializers_as_inputs=True)` exports every weight this way, and then no optimizer
(onnx_lab's passes, onnxruntime's constant folding and fusions) may treat the weights as
constants. Removing the input entries makes them plain weights. The values do not change; the
interface does (those names can no longer be fed), so the pass is not in the `safe` preset.
IR < 4 required the listing and treated the initializers as constants: nothing to do there.""",
    "constants_to_initializers": r"""### Constant nodes → initializers (`constants_to_initializers`)

A Constant node holds a tensor in an attribute; an initializer holds the same tensor in the
graph's weight list. Turning one into the other (same tensor name) changes no value but lets
every tool that looks at initializers (weight statistics, external data, deduplication) see
it. PaddlePaddle exports keep all their weights in Constant nodes.""",
}


def explain(pass_or_pattern: str) -> str:
    """Markdown explaining a pass or a pattern: what it does, why it is safe, its math.

    Args:
        pass_or_pattern: a pass name (``"fuse_conv_bn"``) or a pattern name (``"conv_bn"``,
            the ``pattern`` column of ``lab.patterns()``), or a match id
            (``"fuse_conv_bn:/stem/conv/Conv"``).

    Raises:
        UnknownNameError: for a name that is neither.

    Example:
        >>> print(explain("conv_bn_relu"))  # the BN folding formulas
    """
    key = str(pass_or_pattern)
    if key not in _TEXTS and key not in PATTERN_PASS and ":" in key:
        key = key.split(":", 1)[0]  # a match id: explain its pass
    name = PATTERN_PASS.get(key, key)
    if name in _TEXTS:
        text = _TEXTS[name]
        if key != name:
            text = f"*Pattern `{key}` of pass `{name}`.*\n\n" + text
        return text + _PROVENANCE

    pass_names()
    if name in _REGISTRY:  # a tool wrapper or a pass without a teaching text yet
        entry = _REGISTRY[name]
        return f"### `{name}`\n\n{entry.summary}"
    raise unknown_name("pass or pattern", key, [*_TEXTS, *PATTERN_PASS],
                       fix="See onnx_lab.transforms.available() and lab.patterns().")
