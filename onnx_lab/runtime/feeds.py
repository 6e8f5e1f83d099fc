"""Seeded model inputs that respect dtypes and dims, and loading of user-given feeds.

Example:
    >>> from onnx_lab.numerics import make_feeds
    >>> feeds = make_feeds(onnx_lab.open("sample:transformer_block"), dims={"batch": 1, "seq": 8})
    >>> feeds["x"].shape
    (1, 8, 32)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnx_ir as ir

from onnx_lab.core._location import user_path
from onnx_lab.core._meta import load_json
from onnx_lab.core._mltypes import MapType
from onnx_lab.core.branches import branch_switches, switch_values
from onnx_lab.core.derived import length_sums, with_derived
from onnx_lab.core.dimexpr import dim_expression, resolve_dim
from onnx_lab.core.limits import check_feed_bytes
from onnx_lab.core.llm import decoder_io
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import (
    dtype_name,
    dynamic_dims,
    is_container,
    shape_tuple,
    type_label,
    validate_dims,
    value_type,
)
from onnx_lab.core.source import resolve
from onnx_lab.core.values import const_array
from onnx_lab.errors import CacheError, DimError, InputError, LabError

__all__ = ["make_feeds", "as_feed_list", "read_feeds_file", "branch_feeds", "tree_samples", "cache_length_feeds", "past_length", "input_specs", "resolve_input_shapes", "mask_over_past", "widened_mask", "cache_switch_values",
           "npy_load_fix", "Feeds"]

Feeds = dict[str, np.ndarray]

_NP_DTYPES = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16,
    "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16,
    "int32": np.int32, "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64,
    "bool": np.bool_,
}


def _ml_dtypes() -> dict[str, Any]:
    """The types numpy has no dtype for, as ml_dtypes (onnx's own dependency) gives them:
    feeds of these go to onnxruntime as typed OrtValues (:mod:`onnx_lab.runtime.typed`)."""
    import ml_dtypes

    names = {"bfloat16": "bfloat16", "float8e4m3fn": "float8_e4m3fn",
             "float8e4m3fnuz": "float8_e4m3fnuz", "float8e5m2": "float8_e5m2",
             "float8e5m2fnuz": "float8_e5m2fnuz", "float8e8m0": "float8_e8m0fnu",
             "float4e2m1": "float4_e2m1fn", "int4": "int4", "uint4": "uint4",
             "int2": "int2", "uint2": "uint2"}
    return {k: getattr(ml_dtypes, v) for k, v in names.items() if hasattr(ml_dtypes, v)}


_NP_DTYPES.update(_ml_dtypes())


def _int_high(np_dtype: Any) -> int | None:
    """The exclusive upper bound of generated values of an integer dtype (10, or less for
    int4/int2 types), None for a non-integer one."""
    if np.issubdtype(np_dtype, np.integer):
        return 10
    if type(np.dtype(np_dtype)).__module__.startswith("ml_dtypes") and "int" in str(
            np.dtype(np_dtype)):
        import ml_dtypes

        return min(10, int(ml_dtypes.iinfo(np_dtype).max) + 1)
    return None


def input_specs(model: LabModel) -> list[tuple[str, str | None, tuple | None]]:
    """(name, dtype, declared shape) of each real graph input (initializers excluded).

    A sequence, map or optional input has its type label as dtype (``seq(float)``,
    ``map(int64,float)``: :func:`onnx_lab.core.shapes.type_label`) and no shape."""
    g = model.graph
    return [(v.name, dtype_name(v.dtype), shape_tuple(v.shape))
            if v.type is None or not is_container(type_label(v.type))
            else (v.name, type_label(v.type), None)
            for v in g.inputs if v.name not in g.initializers]


def resolve_input_shapes(model: LabModel, dims: Mapping[str, int] | None = None,
                         shapes: Mapping[str, Sequence[int]] | None = None
                         ) -> dict[str, tuple[int, ...]]:
    """Concrete shape of every input, or DimError listing every unresolved dim and the fix.

    Dims the model determines (``kv_cache_dim`` from its attention, a total length from the
    past and new lengths: :func:`onnx_lab.core.derived.derived_dims`) need not be given.
    """
    shapes = dict(shapes or {})
    validate_dims(model, dims, shapes)
    dims = with_derived(model, dims)
    out: dict[str, tuple[int, ...]] = {}
    missing: list[str] = []  # unnamed dims and unknown ranks
    unnamed: set[str] = set()  # their inputs
    named: dict[str, list[str]] = {}  # symbolic dim -> "input[axis]" uses
    for name, dtype, shape in input_specs(model):
        if is_container(dtype):
            continue  # a sequence, map or optional: make_feeds builds it from its element
        if name in shapes:
            out[name] = tuple(int(d) for d in shapes[name])
            continue
        if shape is None:
            missing.append(f"input {name!r} has unknown rank")
            unnamed.add(name)
            continue
        resolved = []
        for i, d in enumerate(shape):
            if isinstance(d, int) and d > 0:
                resolved.append(d)
            elif isinstance(d, int) and d == 0:
                resolved.append(0)
            elif isinstance(d, str) and isinstance(value := _resolve(d, dims, name, i), int):
                resolved.append(value)
            else:
                if isinstance(d, str):
                    # An expression asks for the names it uses that are not given.
                    expr = dim_expression(d)
                    for n in (d,) if expr is None else [n for n in expr.names if n not in dims]:
                        named.setdefault(n, []).append(f"{name}[{i}]")
                else:
                    missing.append(f"input {name!r} dim {i} (unnamed)")
                    unnamed.add(name)
                resolved.append(-1)
        out[name] = tuple(resolved)
    # A decoder's total length follows from the past and new lengths: when those are missing
    # too, ask for them only (a total given beside them could contradict their sum).
    sums = {d: s for d, s in length_sums(model).items()
            if d in named and len(named) > 1}
    for d in sums:
        del named[d]
    if missing or named:
        # One entry per symbolic dim with the inputs using it (BERT listed 'batch' and
        # 'sequence' once per input: six entries for two values to give).
        problems = [f"{d!r} (used by {', '.join(uses)})" for d, uses in named.items()] + missing
        fixes = []
        if named:
            # 1 is a fine batch or sequence length, but not an image size: a detector run at
            # 1x1 says nothing. Spatial sizes come from the model (metadata) or the user.
            typical = {**_past_lengths(model), **_typical_dims(model)}
            fixes.append("dims={" + ", ".join(
                f"{d!r}: {typical.get(d, '...' if _is_spatial(d) else 1)}"
                for d in sorted(named)) + "}")
        if unnamed:
            fixes.append("shapes={" + ", ".join(f"{n!r}: [...]" for n in sorted(unnamed)) + "}")
        asked = [d for d in sorted(named) if d not in _typical_dims(model) and _is_spatial(d)]
        ask = (f" Choose the size of {', '.join(map(repr, asked))} the model is meant to run "
               "at." if asked else "")
        derived = "".join(f" {d!r} is {s}, filled in once those are given." for d, s in
                          sums.items())
        err = DimError(
            f"Unresolved dims: {'; '.join(problems)}.{derived}",
            fix=f"Pass {' and '.join(fixes)} (to open(), or to this call; "
            f"on the CLI --dims NAME=V / --shape INPUT:AxB).{ask}")
        err.dims = sorted(named)  # the widgets' run-context bar focuses these fields
        raise err
    mask_over_past(model, dims, shapes, out)
    return out


def mask_over_past(model: LabModel, dims: Mapping[str, int], shapes: Mapping[str, Any],
                   out: dict[str, tuple[int, ...]]) -> None:
    """A KV-cache decoder's attention mask covers the past and the new tokens. optimum's merged
    decoders declare it ``[batch_size, sequence_length]`` (the no-cache decoder's shape), so a
    sample with a past of 3 built a mask of the new tokens only, which the cache branch cannot
    run (its Gather read past the mask): size it past + new, in ``out`` (in place)."""
    wide = _mask_length(model, dims, shapes)
    if wide is not None and wide[0] in out:
        out[wide[0]] = (out[wide[0]][0], wide[1])


def widened_mask(model: LabModel, dims: Mapping[str, int], shapes: Mapping[str, Any]
                 ) -> str | None:
    """The attention mask :func:`mask_over_past` sizes past + new where it is declared over the
    new tokens (an optimum merged decoder at a decode step), else None: shape inference must
    be given its size (:func:`resolve_input_shapes`'s) to type the cache branch as it runs."""
    wide = _mask_length(model, dims, shapes)
    return wide[0] if wide is not None \
        and wide[1] != dims.get(decoder_io(model).sequence_dim) else None


def _mask_length(model: LabModel, dims: Mapping[str, int], shapes: Mapping[str, Any]
                 ) -> tuple[str, int] | None:
    """(the attention mask, past + new) for a decoder whose mask is declared over the new
    tokens only (``[batch, sequence_length]``) and not given in ``shapes``, else None."""
    try:
        io = decoder_io(model)
    except CacheError:
        return None
    if io is None or not io.attention_mask or io.attention_mask in shapes \
            or not io.past_dim or not io.sequence_dim:
        return None
    declared = next((s for n, _d, s in input_specs(model) if n == io.attention_mask), None)
    past, new = dims.get(io.past_dim), dims.get(io.sequence_dim)
    if declared is None or len(declared) != 2 or declared[1] != io.sequence_dim \
            or not isinstance(past, int) or not isinstance(new, int):
        return None
    return io.attention_mask, past + new


def _resolve(d: str, dims: Mapping[str, int], name: str, axis: int) -> object:
    """A named or expression dim's value (the dim itself when not resolved)."""
    try:
        return resolve_dim(d, dims, strict=True)
    except DimError as e:  # an expression that divides by zero or comes out negative
        raise DimError(f"{e.problem} (input {name}[{axis}])", fix=e.fix) from e


def _is_spatial(dim: str) -> bool:
    d = dim.lower()
    if "batch" in d:  # batch_size is a count, not an image size
        return False
    return any(k in d for k in ("height", "width", "img", "image", "size")) or d in (
        "h", "w", "x", "y")


def _past_lengths(model: LabModel) -> dict[str, int]:
    """A decoder's past length: 0 (an empty cache, the prefill) is the size to start from."""
    try:
        io = decoder_io(model)
    except CacheError:
        return {}
    return {io.past_dim: 0} if io is not None and io.past_dim else {}


def _typical_dims(model: LabModel) -> dict[str, int]:
    """Dim values the model itself states: ``imgsz`` metadata (Ultralytics exports:
    ``[640, 640]``) for dims named like height/width."""
    props = dict(getattr(model.ir, "metadata_props", {}) or {})
    raw = props.get("imgsz")
    out: dict[str, int] = {}
    if raw:
        hw = load_json(raw, max_depth=1)  # bounded: a hostile value is None
        if isinstance(hw, int):
            hw = [hw, hw]
        if isinstance(hw, list) and len(hw) == 2 and all(
                type(x) is int and 0 < x < 1 << 20 for x in hw):
            for v in model.graph.inputs:
                for d in (v.shape or ()):
                    name = str(d)
                    if "height" in name.lower() or name.lower() == "h":
                        out[name] = int(hw[0])
                    elif "width" in name.lower() or name.lower() == "w":
                        out[name] = int(hw[1])
    return out


def _gather_vocab(model: LabModel, name: str) -> int | None:
    """Rows of an embedding table the integer input indexes (Gather(table, input)), or the
    columns an ArrayFeatureExtractor picks with it (its last axis: ONNX's conformance case
    takes the indices as an input; [0, 10) was out of range for 3 columns)."""
    idx = model.index
    for nid in idx.consumers.get(name, ()):
        node = idx.node(nid)
        if node.op_type in ("Gather", "ArrayFeatureExtractor") and len(node.inputs) > 1 \
                and node.inputs[1] is not None and node.inputs[1].name == name \
                and node.inputs[0] is not None:
            table = node.inputs[0]
            shape = shape_tuple(table.shape) or (shape_tuple(table.const_value.shape)
                                                 if table.const_value is not None else None)
            if not shape:
                info = model.types().get(table.name or "")
                shape = info.shape if info is not None else None
            if node.op_type == "Gather":
                axis = node.attributes.get("axis")
                ax = axis.value if axis is not None else 0
            else:
                ax = -1
            if shape and -len(shape) <= ax < len(shape) and isinstance(shape[ax], int):
                return int(shape[ax])
    return None


# Categorical ops whose attributes list the strings (or integers) an input takes: a feed drawn
# from them reaches every branch, where made-up strings would all hit the default.
_VOCAB_ATTRS = {"LabelEncoder": ("keys_strings", "keys_int64s", "keys_floats"),
                "OneHotEncoder": ("cats_strings", "cats_int64s"),
                "CategoryMapper": ("cats_strings", "cats_int64s"),
                "DictVectorizer": ("string_vocabulary", "int64_vocabulary")}
# The default domain's op that names its tokens: TfIdfVectorizer (CountVectorizer and TF-IDF
# exports): made-up words are in no pool, and every count was 0.
_POOL_ATTRS = ("pool_strings", "pool_int64s")
# Ops whose first output holds values of their first input (moved or picked, not changed):
# skl2onnx reshapes a column, and its ColumnTransformer picks it with a Gather; its
# OrdinalEncoder picks a column with an ArrayFeatureExtractor.
_PASS_THROUGH = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
                           "Gather", "GatherElements", "Slice", "Expand", "Tile",
                           "ArrayFeatureExtractor"})
# Text ops before a TfIdfVectorizer: a feed reaching it through a Tokenizer is a sentence of
# pool words (the tokenizer splits it back).
_TEXT_OPS = frozenset({"StringNormalizer", "Tokenizer"})
# The made-up strings when the graph reveals no vocabulary: short, deterministic, distinct.
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
_SEQ_LEN = 2  # elements of a generated sequence
# Vocabulary entries kept (a draw of n values walks through them from a random start: all of
# a 300-key LabelEncoder's keys are reached by enough samples; only the first 256 were).
_VOCAB_MAX = 1 << 16


@dataclass(frozen=True)
class Vocab:
    """The values a categorical op names for an input (or one column of it); ``sentences``:
    drawn as runs of them joined by ``joiner`` (the input is split into tokens first; a
    TfIdfVectorizer's n-gram is one value, its tokens already joined)."""

    values: tuple
    sentences: bool = False
    joiner: str = " "  # what separates a sentence's words (the Tokenizer's first separator)
    splits: bool = False  # a tree ensemble's values around its thresholds on this column

    def draw(self, n: int, rng: np.random.Generator) -> list:
        """``n`` values: consecutive entries from a random start, in random order (every
        entry is drawn once per ``len(values)`` values).

        Sentences hold 3 entries each while ``n`` of them reach every entry; for a larger
        vocabulary, half of them (at least one) hold every entry between them and the
        others 3 entries each: 8 sentences of 3 words reached 24 of a vocabulary's words (2
        % of a bigram model's n-grams), and a coefficient or idf weight of any other word
        passed compare; the short ones keep what long ones flatten (a naive Bayes model's
        probabilities saturate on a sentence of 50 character n-grams)."""
        k = len(self.values)
        if not self.sentences:
            picks = rng.permutation((int(rng.integers(0, k)) + np.arange(n)) % k)
            return [self.values[i] for i in picks]
        short = n // 2 if k > 3 * n else 0
        per = max(3, -(-k // (n - short)))
        picks = rng.permutation((int(rng.integers(0, k)) + np.arange((n - short) * per)) % k)
        words = [str(self.values[i]) for i in picks]
        rows = [self.joiner.join(words[per * j:per * j + per]) for j in range(n - short)]
        if not short:
            return rows
        few = rng.integers(0, k, size=(short, 3))
        rows += [self.joiner.join(str(self.values[i]) for i in r) for r in few]
        return [rows[i] for i in rng.permutation(n)]


@dataclass(frozen=True)
class _Split:
    """How a Tokenizer splits text: on its first separator, or by its token expression."""

    separator: str | None = None
    pattern: str | None = None

    def joiner(self, tokens: Sequence[str]) -> str:
        """What to put between ``tokens`` for this Tokenizer to give them back: its first
        separator; for a token expression, a space or nothing, whichever gives more of the
        tokens back (skl2onnx's character n-grams split with ``.``: a space is a token of
        its own, and a character bigram 'ab' was never formed from 'a b'); else a space."""
        if self.separator is not None or not self.pattern:
            return self.separator or " "
        import re

        if len(self.pattern) > 256:
            return " "
        try:
            exp = re.compile(self.pattern)
        except (re.error, RecursionError, OverflowError, ValueError):
            return " "  # a pattern of RE2's only: a space, as before
        # (Python's re backtracks where onnxruntime's RE2 does not: a hostile pattern is
        # only ever matched against a few strings of at most 16 characters)
        sample = [t for t in tokens if 0 < len(t) <= 8][:64]
        sample = [t for t in sample if exp.fullmatch(t)]
        if not sample:
            return " "
        return max((" ", ""), key=lambda j: sum(
            exp.findall(j.join((t, t))) == [t, t] for t in sample))


def _ngrams(node: ir.Node, tokens: tuple) -> tuple:
    """A TfIdfVectorizer's pool as its n-grams, a tuple of tokens each (``ngram_counts``
    gives where the pool's n-grams of each length start): the tokens of an n-gram fed apart
    (three random words a sentence) almost never formed one, and a changed bigram or its
    weight passed compare. The pool's own tokens when the counts do not describe it."""
    counts = node.attributes.get("ngram_counts")
    starts = [int(c) for c in counts.value] if counts is not None else []
    if not starts or starts[0] != 0 or any(b < a for a, b in zip(starts, starts[1:])) \
            or starts[-1] > len(tokens):
        return tokens
    out: list = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(tokens)
        size = i + 1
        if (end - start) % size:
            return tokens
        out.extend(tuple(tokens[j:j + size]) for j in range(start, end, size))
    return tuple(out)


def _picked_columns(node: ir.Node) -> list[int] | None:
    """The columns (last axis) a Gather or ArrayFeatureExtractor picks with constant indices
    (non-negative), else None."""
    if len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    index = const_array(node.inputs[1])
    if index is None or index.size == 0 or index.dtype.kind not in "iu" or index.ndim > 1 \
            or (index < 0).any():
        return None
    if node.op_type == "Gather" and node.attributes.get_int("axis", 0) == 0:
        return None
    return [int(i) for i in index.reshape(-1)]


# Casts whose values stay the same categories: between integer types (skl2onnx casts a
# picked int64 column before an integer OneHotEncoder).
_INT_TYPES = frozenset({int(t) for t in (ir.DataType.INT8, ir.DataType.INT16,
                                         ir.DataType.INT32, ir.DataType.INT64,
                                         ir.DataType.UINT8, ir.DataType.UINT16,
                                         ir.DataType.UINT32, ir.DataType.UINT64)})


_TREE_OPS = frozenset({"TreeEnsembleClassifier", "TreeEnsembleRegressor", "TreeEnsemble"})


def _tree_values(node: ir.Node) -> dict[int, tuple]:
    """{feature: values}: one value in each interval the ensemble's thresholds on that
    feature cut the line into (the midpoints of consecutive distinct thresholds, and one below
    the lowest and one above the highest), the thresholds of equality nodes (BRANCH_EQ/NEQ)
    and the members of set nodes (ML opset 5's BRANCH_MEMBER, whose split value is a
    placeholder), in a fixed shuffled order, so a draw of a few rows crosses thresholds all
    along the feature instead of walking one end of it."""
    def ints(name: str) -> list[int] | None:
        a = node.attributes.get(name)
        return [int(x) for x in a.value] if a is not None else None

    feats = ints("nodes_featureids")
    thresholds = None
    for key in ("nodes_values", "nodes_values_as_tensor", "nodes_splits"):
        a = node.attributes.get(key)
        if a is None:
            continue
        v = a.value
        try:  # (a malformed tensor of text: no thresholds, not a ValueError out of make_feeds)
            thresholds = (np.asarray(v.numpy(), np.float64).reshape(-1) if hasattr(v, "numpy")
                          else np.asarray(list(v), np.float64))
        except (TypeError, ValueError):
            return {}
        break
    if feats is None or thresholds is None or len(feats) != len(thresholds):
        return {}
    modes = node.attributes.get("nodes_modes")
    leaf = np.zeros(len(feats), bool)
    exact = np.zeros(len(feats), bool)  # BRANCH_EQ/NEQ: the threshold itself is a value
    member = np.zeros(len(feats), bool)  # BRANCH_MEMBER (ML opset 5): a set, no threshold
    if modes is not None and hasattr(modes.value, "numpy"):  # TreeEnsemble: 0..6
        m = np.asarray(modes.value.numpy()).reshape(-1)
        if m.size == len(feats):
            exact, member = np.isin(m, (4, 5)), m == 6
    elif modes is not None and len(modes.value) == len(feats):
        leaf = np.array([m == "LEAF" for m in modes.value])
        exact = np.array([m in ("BRANCH_EQ", "BRANCH_NEQ") for m in modes.value])
    sets: dict[int, list[float]] = {}  # feature -> the values its member nodes name
    mv = node.attributes.get("membership_values")
    try:
        members = np.asarray(mv.value.numpy(), np.float64).reshape(-1) \
            if member.any() and mv is not None and hasattr(mv.value, "numpy") else None
    except (TypeError, ValueError):  # members of text: a malformed model
        members = None
    if members is not None:
        groups = np.split(v := members, np.flatnonzero(np.isnan(v)))
        groups = [g[~np.isnan(g)] for g in groups]
        for f, g in zip(np.asarray(feats)[member], groups):
            sets.setdefault(int(f), []).extend(g.tolist())
    split = ~leaf & ~member
    feats_a = np.asarray(feats)
    out: dict[int, tuple] = {}
    for f in sorted({int(f) for f, use in zip(feats, ~leaf) if use and f >= 0}):
        t = np.unique(thresholds[(feats_a == f) & split])
        t = t[np.isfinite(t)]
        named = np.unique(np.concatenate([t[np.isin(t, thresholds[(feats_a == f) & exact])],
                                          np.asarray(sets.get(f, []), np.float64)]))
        if not t.size and not named.size:
            continue
        ends = np.concatenate([t, named])
        step = max(1.0, float(np.max(np.abs(ends)))) * 1e-3
        if t.size:
            gaps = np.diff(t)
            mids = (t[:-1] + gaps / 2)[gaps > 4 * step * 1e-3]  # not between near-equal ones
            values = np.concatenate([[t[0] - max(step, (t[-1] - t[0]) / 8)], mids,
                                     [t[-1] + max(step, (t[-1] - t[0]) / 8)]])
        else:  # member nodes only: a value in no set takes their other branch
            values = np.asarray([float(np.max(named)) + 1.0])
        # an equality's value and a set's members (a midpoint never equals them)
        values = np.concatenate([values, named])
        values = values[np.random.default_rng(f).permutation(values.size)][:_VOCAB_MAX]
        out[f] = tuple(float(x) for x in values)
    return out


def vocabularies(model: LabModel, name: str) -> dict[int | None, Vocab]:
    """{column: Vocab}: the values the categorical ops reading input ``name`` name
    (LabelEncoder keys, OneHotEncoder and CategoryMapper categories, DictVectorizer
    vocabularies, a TfIdfVectorizer's pool), also through ops in between that move or pick the
    values (Identity, Reshape, Squeeze-like, Transpose, a Gather, Slice or
    ArrayFeatureExtractor of them, a Cast between integer types, StringNormalizer and
    Tokenizer before a TfIdfVectorizer, whose pool's n-grams are then drawn as sentences
    the Tokenizer splits back: :class:`Vocab`, :class:`_Split`). A Gather (axis > 0) or ArrayFeatureExtractor of constant
    indices picks columns of the last axis, and picks of picked columns compose: an encoder's
    values are its columns' (a two-column OneHotEncoder export feeds each column to its own
    encoder); None keys what reads the whole input. Empty when no op names any."""
    return model.cached(("feeds", "vocabularies", name), lambda: _vocabularies(model, name))


def _vocabularies(model: LabModel, name: str) -> dict[int | None, Vocab]:
    idx = model.index
    out: dict[int | None, Vocab] = {}
    # (value, its route back to the input (None: the input itself), how a Tokenizer split
    # the text on the way)
    todo: list[tuple[str, _Route | None, _Split | None]] = [(name, None, None)]
    # (value, route) pairs reached: one value may be reached by several routes (each
    # transformer of a ColumnTransformer on one input reaches its Concat; only the first one
    # reached had its columns fed in the input's units)
    seen: set[tuple[str, _Route | None]] = {(name, None)}
    strict: set[int | None] = set()  # columns an op reads that takes no value off its list
    compared: set[int | None] = set()  # integer columns whose values come from an Equal
    while todo:  # through the ops that only move, pick, join or rescale values
        value, route, joiner = todo.pop(0)
        cols = route.cols if route is not None else None
        for nid in idx.consumers.get(value, ()):
            node = idx.node(nid)
            first = _reads_first(node, value)  # (a Gather's indices are not its values)
            if _reads_as_index(node, value):  # a value off the list may be past the table
                strict.update(c for c in (cols if cols is not None else (None,))
                              if c is not None or cols is None)
            attrs = _VOCAB_ATTRS.get(node.op_type, ()) if node.domain == "ai.onnx.ml" else \
                _POOL_ATTRS if node.op_type == "TfIdfVectorizer" and node.domain in ("",
                                                                                 "ai.onnx") \
                else ()
            if node.domain == "ai.onnx.ml" and node.op_type in _TREE_OPS and first:
                # a tree ensemble's thresholds per feature: standard-normal values on data
                # of another scale (ages, prices) all took the same branches, and every
                # threshold moved by 3 years passed compare; behind a scaler or a Concat of
                # columns (a Pipeline, a ColumnTransformer), in the input's own units
                for feature, values in _tree_values(node).items():
                    back = route.back(feature, values) if route is not None \
                        else (feature, values)
                    if back is not None:
                        out.setdefault(back[0], Vocab(back[1], splits=True))
                continue
            listed = _equal_constants(node, value)
            if listed is not None and (route is None or not route.rescaled):
                # an Equal with a constant list (skl2onnx's LabelBinarizer): made-up words
                # matched no class, every row was all zeros, and a renamed class passed
                vocab = Vocab((*listed, _unknown(listed)))
                for column in (cols if cols is not None else (None,)):
                    if column is not None or cols is None:
                        if not isinstance(listed[0], str):
                            compared.add(column)
                        out.setdefault(column, vocab)
                continue
            if attrs and first and (route is None or not route.rescaled):
                kind = _dtype_of(model, value)
                for attr in attrs:
                    a = node.attributes.get(attr)
                    if a is None or not len(a.value) or (  # a CategoryMapper names both
                            kind is not None and attr.endswith("strings")
                            != (kind == int(ir.DataType.STRING))):
                        continue
                    values = tuple(list(a.value)[:_VOCAB_MAX])
                    sentences = joiner is not None and attr == "pool_strings"
                    between = joiner.joiner([str(v) for v in values]) if sentences \
                        and joiner is not None else " "
                    if sentences:  # each n-gram of the pool, its tokens in a row
                        values = tuple(dict.fromkeys(
                            between.join(str(t) for t in g) if isinstance(g, tuple) else g
                            for g in _ngrams(node, tuple(a.value))))[:_VOCAB_MAX]
                    defaulted = node.op_type in _DEFAULTED and not _default_refused(model, node)
                    if defaulted:  # one value in no list: the default
                        values = (*values, _unknown(values))
                    vocab = Vocab(values, sentences=sentences, joiner=between)
                    for column in (cols if cols is not None else (None,)):
                        if column is not None or cols is None:  # (not a joined column)
                            if not defaulted:
                                strict.add(column)
                            out.setdefault(column, vocab)
                continue
            if not (node.outputs and node.outputs[0].name and len(seen) < 256):
                continue
            new_route: _Route | None | bool = False  # False: values do not reach the output
            new_joiner = joiner
            if node.op_type == "Concat" and node.domain in ("", "ai.onnx"):
                new_route = _joined(node, value, route, model)
            elif node.op_type in _RESCALES and first:
                new_route = _rescaled(node, route)
            elif first and node.op_type == "Imputer" and node.domain == "ai.onnx.ml":
                # a SimpleImputer in front: every value but the missing one passes unchanged
                # (make_feeds plants the missing one on top): trees behind it took
                # standard-normal ages and prices, and a moved root threshold passed
                new_route = route
            elif first and (node.op_type in _PASS_THROUGH or node.op_type in _TEXT_OPS or (
                    node.op_type == "Cast" and node.attributes.get_int("to", 0) in _INT_TYPES)
                    or (node.op_type == "Cast"
                        and node.attributes.get_int("to", 0) in _FLOAT_TYPES
                        # (an integer input cast to float before a tree: counts, skl2onnx's
                        # Int64TensorType; its feeds were integers in [0, 10))
                        and _dtype_of(model, value) in _FLOAT_TYPES | _INT_TYPES)):
                new_route = route
                picked = _picked_columns(node) \
                    if node.op_type in ("Gather", "ArrayFeatureExtractor") else None
                if picked is not None:  # compose: a pick of picked columns
                    new_route = (route or _Route.identity(max(picked) + 1)).picked(picked)
                if node.op_type == "Tokenizer":
                    seps = node.attributes.get("separators")
                    first_sep = next((str(x) for x in (seps.value if seps is not None else ())
                                      if str(x)), None)
                    new_joiner = _Split(first_sep, None if first_sep is not None
                                        else node.attributes.get_string("tokenexp", None))
            if new_route is False and first and route is not None and route.rescaled:
                # a scaler's output read by an op that computes with it (a linear model, an
                # SVM, a MatMul): the input in the units the scaler expects
                for column, values in _scaled_normal(route).items():
                    out.setdefault(column, Vocab(values))
            if new_route is False or (node.outputs[0].name, new_route) in seen:
                continue
            seen.add((node.outputs[0].name, cast("_Route | None", new_route)))
            todo.append((node.outputs[0].name, cast("_Route | None", new_route), new_joiner))
    for column in compared:
        if strict and (column in strict or None in strict or column is None):
            # an integer column that also indexes a table (a Gather): an Equal's constants
            # may lie past it, and onnxruntime would refuse the feeds of a correct model
            out.pop(column, None)
    if strict:  # the default's value stays out where an op would reject it
        for column, vocab in out.items():
            if column in strict or None in strict or column is None:
                out[column] = Vocab(tuple(v for v in vocab.values if not _is_unknown(v)),
                                    vocab.sentences, vocab.joiner, vocab.splits)
    declared = next((v.dtype for v in model.graph.inputs if v.name == name), None)
    if declared is not None and int(declared) in _INT_TYPES:
        # an integer input read by trees through a Cast: each value's two nearest integers
        # (truncated, both sides of a lone threshold at 50.5, 50.45 and 50.55, were 50)
        for column, vocab in out.items():
            if any(isinstance(v, float) and math.isfinite(v) and v != int(v)
                   for v in vocab.values):
                out[column] = Vocab(tuple(dict.fromkeys(
                    w for v in vocab.values for w in ((math.floor(v), math.ceil(v))
                                                      if isinstance(v, float)
                                                      and math.isfinite(v) else (v,)))),
                    vocab.sentences, vocab.joiner, vocab.splits)
    return out


def _equal_constants(node: ir.Node, value: str) -> tuple | None:
    """The distinct values of the constant an ``Equal`` compares ``value`` with (strings, or
    at least two integers: a scalar is a padding id or a flag, not a list of classes), else
    None. skl2onnx's LabelBinarizer compares its input with the classes this way."""
    if node.op_type != "Equal" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2 \
            or value not in [v.name for v in node.inputs if v is not None]:
        return None
    other = next((v for v in node.inputs if v is not None and v.name != value), None)
    if other is None:
        return None
    try:  # (Equal's two inputs have one type: the constant's is the value's)
        c = const_array(other)
    except (TypeError, ValueError):
        return None
    if c is None or not c.size:
        return None
    if c.dtype.kind in "OSU":
        return tuple(dict.fromkeys(x.decode("utf-8", "replace") if isinstance(x, bytes)
                                   else str(x) for x in c.reshape(-1)))[:_VOCAB_MAX]
    if c.dtype.kind not in "iu" or c.size < 2:
        return None
    return tuple(dict.fromkeys(int(x) for x in c.reshape(-1)))[:_VOCAB_MAX]


# Encoders that map a value off their list to a default (LabelEncoder's default_*, a
# CategoryMapper's default_string / default_int64): their feeds hold one such value, else
# the default was never taken and a changed one passed compare. A OneHotEncoder
# (zeros=0), a DictVectorizer or a tree reading the same column keeps it off.
_DEFAULTED = frozenset({"LabelEncoder", "CategoryMapper"})


# Inputs that ops read as positions in a table (a value past it fails in onnxruntime):
# {op type: the input positions}
_INDEX_INPUTS = {"Gather": (1,), "GatherElements": (1,), "GatherND": (1,),
                 "ScatterElements": (1,), "ScatterND": (1,), "ArrayFeatureExtractor": (1,)}


def _reads_first(node: ir.Node, value: str) -> bool:
    """Whether ``value`` is ``node``'s first input (the values an op moves or encodes)."""
    return bool(node.inputs) and node.inputs[0] is not None and node.inputs[0].name == value


def _moves(node: ir.Node, value: str) -> bool:
    """Whether ``node``'s outputs hold the values of ``value`` moved, cast or joined (a
    Concat)."""
    return (_reads_first(node, value) and (node.op_type in _PASS_THROUGH
                                           or node.op_type == "Cast")) \
        or node.op_type == "Concat"


def _reads_as_index(node: ir.Node, value: str) -> bool:
    return any(i < len(node.inputs) and node.inputs[i] is not None
               and node.inputs[i].name == value for i in _INDEX_INPUTS.get(node.op_type, ()))


def _default_refused(model: LabModel, encoder: ir.Node) -> bool:
    """Whether the encoder's output, moved, cast or joined, reaches an op that may refuse its
    default (a OneHotEncoder with ``zeros=0``, the indices of a Gather): a value off its
    list would then fail the run of a correct model, so none is fed."""
    idx = model.index
    todo = [o.name for o in encoder.outputs if o is not None and o.name]
    seen = set(todo)
    while todo:
        value = todo.pop()
        for nid in idx.consumers.get(value, ()):
            node = idx.node(nid)
            if _reads_as_index(node, value) or (
                    node.domain == "ai.onnx.ml" and node.op_type == "OneHotEncoder"
                    and node.attributes.get_int("zeros", 1) == 0):
                return True
            if not _moves(node, value):
                continue
            for o in node.outputs:
                if o is not None and o.name and o.name not in seen:
                    if len(seen) >= 256:
                        return True  # not followed to its end: kept off
                    seen.add(o.name)
                    todo.append(o.name)
    return False


def _unknown(values: tuple) -> Any:
    """A value of the kind of ``values`` that is none of them."""
    if values and isinstance(values[0], str):
        word = "unlisted"
        while word in values:
            word += "_"
        return _UnknownStr(word)
    if values and isinstance(values[0], int):
        # in integers (hashed ids past 2**53 went through a float: the "unknown" was a listed
        # key, and one past int64's range made every fed value garbage)
        ints = {int(v) for v in values if isinstance(v, int)}
        lo, hi = -(1 << 63), (1 << 63) - 1
        top = max(ints, default=-1)
        if top < hi:
            return _UnknownInt(top + 1)
        bottom = min(ints)
        if bottom > lo:
            return _UnknownInt(bottom - 1)
        return _UnknownInt(next(k for k in range(lo, hi) if k not in ints))
    top = max((float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)),
              default=0.0)
    return _UnknownFloat(top + 1.0)


class _UnknownStr(str):
    """A value off an encoder's list (told apart where an op that rejects it reads it)."""


class _UnknownInt(int):
    """An integer off an encoder's list."""


class _UnknownFloat(float):
    """A float off an encoder's list."""


def _is_unknown(v: Any) -> bool:
    return isinstance(v, (_UnknownStr, _UnknownInt, _UnknownFloat))


@dataclass(frozen=True)
class _Route:
    """How a value's last-axis columns come from the input's: the value ``v`` in column k
    was ``v * scale[k] + shift[k]`` in the input's column ``cols[k]`` (None: a column of
    something else, joined by a Concat). ``cols`` None: the input's own columns, any number;
    a scale or shift of one entry is every column's."""

    cols: tuple[int | None, ...] | None
    scale: tuple[float, ...] = (1.0,)  # one entry: every column's
    shift: tuple[float, ...] = (0.0,)

    @staticmethod
    def identity(n: int) -> _Route:
        return _Route(tuple(range(n)))

    @property
    def rescaled(self) -> bool:
        return any(a != 1.0 for a in self.scale) or any(b != 0.0 for b in self.shift)

    def _at(self, values: tuple[float, ...], k: int) -> float:
        return values[k] if len(values) > 1 else values[0]

    def back(self, k: int, values: tuple) -> tuple[int | None, tuple] | None:
        """(the input's column, the values in its units) for the value's column ``k``; None
        where it is no input column (or the scale is 0)."""
        if self.cols is not None and (k >= len(self.cols) or self.cols[k] is None):
            return None
        if len(self.scale) > 1 and k >= len(self.scale):
            return None
        a, b = self._at(self.scale, k), self._at(self.shift, k)
        if a == 0.0 or not math.isfinite(a) or not math.isfinite(b):
            return None
        column = self.cols[k] if self.cols is not None else k
        return column, tuple(float(v * a + b) for v in values)

    def picked(self, picks: Sequence[int]) -> _Route | bool:
        n = len(self.cols) if self.cols is not None else None
        if n is not None and any(k >= n for k in picks):
            return False
        cols = tuple(self.cols[k] if self.cols is not None else k for k in picks)
        per = [len(self.scale) > 1, len(self.shift) > 1]
        if (per[0] and any(k >= len(self.scale) for k in picks)) or (
                per[1] and any(k >= len(self.shift) for k in picks)):
            return False
        scale = tuple(self.scale[k] for k in picks) if per[0] else self.scale
        shift = tuple(self.shift[k] for k in picks) if per[1] else self.shift
        return _Route(cols, scale, shift)


# Ops whose output is an affine function of their first input, column by column (the
# scalers of a Pipeline or a ColumnTransformer: skl2onnx's StandardScaler is a Scaler,
# other converters write Sub and Div of constants)
_RESCALES = frozenset({"Scaler", "Sub", "Add", "Mul", "Div"})
_COLUMNS_MAX = 1 << 14  # columns a route spells out


def _rescaled(node: ir.Node, route: _Route | None) -> _Route | bool:
    """The route through an affine op of constants whose first input is the value: the
    input's value is then ``out * a + b`` per column, composed with the route so far (False
    when the op is not one: an operand that is not constant, or of another shape)."""
    if node.op_type == "Scaler":
        if node.domain != "ai.onnx.ml":
            return False
        sc, off = node.attributes.get("scale"), node.attributes.get("offset")
        scale = np.asarray(list(sc.value) if sc is not None else [1.0], np.float64)
        offset = np.asarray(list(off.value) if off is not None else [0.0], np.float64)
        if not scale.size or not offset.size or np.any(scale == 0):
            return False
        a, b = 1.0 / scale, offset  # out = (x - offset) * scale
    else:
        if node.domain not in ("", "ai.onnx") or len(node.inputs) != 2 \
                or node.inputs[1] is None:
            return False
        c = const_array(node.inputs[1])
        if c is None or c.dtype.kind not in "fiu" or not c.size or c.size > _COLUMNS_MAX \
                or (c.ndim and c.size != c.shape[-1]):
            return False  # one constant per column (or one for all), nothing else
        c = c.astype(np.float64).reshape(-1)
        if node.op_type in ("Div", "Mul") and np.any(c == 0):
            return False
        one, zero = np.ones_like(c), np.zeros_like(c)
        # (only the op's own pair is computed: 1 / c of an Add's zero offset, a MinMaxScaler
        # column whose minimum is 0, warned "divide by zero" in every make_feeds)
        a, b = (one, c) if node.op_type == "Sub" else (one, -c) if node.op_type == "Add" \
            else (1.0 / c, zero) if node.op_type == "Mul" else (c, zero)
    base = route or _Route(None)
    parts = [a, b, np.asarray(base.scale), np.asarray(base.shift)]
    width = max(p.size for p in parts)
    if any(p.size not in (1, width) for p in parts) or (
            width > 1 and base.cols is not None and len(base.cols) != width):
        return False
    a, b, S, B = (np.broadcast_to(p, (width,)) for p in parts)
    # the input is (out * a + b) * S + B
    return _Route(base.cols, tuple(float(x) for x in a * S), tuple(float(x) for x in b * S + B))


# Standard-normal values (a fixed draw) a scaler's output takes: the scaled values of a
# StandardScaler's training data are about these
_NORMAL = tuple(float(z) for z in np.random.default_rng(0).standard_normal(64))


def _scaled_normal(route: _Route) -> dict[int | None, tuple]:
    """{input column (None: every column): values}: the input values a rescaling route turns
    into standard-normal ones (``shift + scale * z``). A Pipeline's StandardScaler before a
    linear model or an SVM was fed standard-normal inputs in the input's units: on data of
    another scale (breast-cancer areas near 650, diabetes features of spread 0.05) the scaled
    values lay tens of spreads out, the probabilities saturated at 0 and 1 (an RBF kernel at
    0), and a changed scaler mean, coefficient, intercept or post_transform passed compare."""
    if route.cols is None and len(route.scale) == 1 and len(route.shift) == 1:
        back = route.back(0, _NORMAL)
        return {None: back[1]} if back is not None else {}
    width = len(route.cols) if route.cols is not None else max(len(route.scale),
                                                                len(route.shift))
    out: dict[int | None, tuple] = {}
    for k in range(min(width, _COLUMNS_MAX)):
        back = route.back(k, _NORMAL)
        if back is not None:
            out.setdefault(back[0], back[1])
    return out


def _joined(node: ir.Node, value: str, route: _Route | None, model: LabModel
            ) -> _Route | bool:
    """The route through a Concat of columns (its last axis): the value's columns sit after
    those of the inputs before it, whose widths must be known."""
    axis = node.attributes.get_int("axis", 0)
    if axis < -1:
        return False
    mine_shape = _shape_of(model, value)
    out_shape = _shape_of(model, node.outputs[0].name)
    shape = mine_shape or out_shape
    if not shape or axis not in (-1, len(shape) - 1):  # (a KV cache's past: axis -2)
        return False
    offset = 0
    for v in node.inputs:
        if v is not None and v.name == value:
            break
        width = _last_dim(_shape_of(model, v.name) if v is not None else None)
        if width is None:
            return False
        offset += width
    mine = route or _Route(None)
    width = _last_dim(mine_shape)
    if width is None and mine.cols is not None:
        width = len(mine.cols)
    if width is None or offset + width > _COLUMNS_MAX:
        return False
    own = mine.cols if mine.cols is not None else tuple(range(width))
    scale, shift = mine.scale, mine.shift
    if len(own) > width or any(len(t) not in (1, len(own)) for t in (scale, shift)):
        return False
    # the columns before and after are no input's (a route is as wide as what it leads to)
    after = width - len(own) + max(0, (_last_dim(out_shape) or 0) - offset - width)
    if (len(scale) > 1 or len(shift) > 1 or mine.rescaled) and (offset or after):
        scale = (1.0,) * offset + (scale if len(scale) > 1 else scale * len(own)) \
            + (1.0,) * after
        shift = (0.0,) * offset + (shift if len(shift) > 1 else shift * len(own)) \
            + (0.0,) * after
    return _Route((None,) * offset + tuple(own) + (None,) * after, scale, shift)


def _last_dim(shape: tuple | None) -> int | None:
    return shape[-1] if shape and isinstance(shape[-1], int) else None


def _shape_of(model: LabModel, name: str) -> tuple | None:
    """A value's stored shape, else its inferred one (``model.types()``, inferred once per
    model; only where a stored shape is missing); None when unknown."""
    v = model.index.values.get(name)
    if v is None:
        return None
    if v.shape is not None:
        return tuple(v.shape)
    info = value_type(model, v)
    return tuple(info.shape) if info is not None and info.shape is not None else None


def _dtype_of(model: LabModel, name: str) -> int | None:
    """A value's stored element type, else its inferred one: an intermediate of a
    converter's graph has none stored (skl2onnx's MinMaxScaler casts a picked column to float
    first, and the Cast of an unknown type stopped the route: a ColumnTransformer's price
    column took another column's thresholds)."""
    known = _value_dtype(name, model.index)
    v = model.index.values.get(name)
    if known is not None or v is None:
        return known
    info = value_type(model, v)
    if info is None or info.dtype is None:
        return None
    try:
        return int(ir.DataType.from_numpy(np.dtype(info.dtype)))
    except (TypeError, ValueError):
        return None


_FLOAT_TYPES = frozenset({int(t) for t in (ir.DataType.FLOAT, ir.DataType.DOUBLE,
                                           ir.DataType.FLOAT16, ir.DataType.BFLOAT16)})


def _value_dtype(name: str, idx: Any) -> int | None:
    v = idx.values.get(name) if hasattr(idx, "values") else None
    return int(v.dtype) if v is not None and v.dtype is not None else None


def missing_value(model: LabModel, name: str) -> float | int | None:
    """The value an ai.onnx.ml ``Imputer`` replaces (``replaced_value_float`` /
    ``replaced_value_int64``; skl2onnx's SimpleImputer writes NaN) when input ``name`` reaches
    only Imputers, through ops that move, pick or join its values (Identity, Reshape, Gather,
    a Concat of columns, a Cast...); else None. A feed that never holds it never runs the
    Imputer's replacement: a wrong imputed value, or a rewrite that dropped the Imputer,
    passed every comparison and verification."""
    return model.cached(("feeds", "missing_value", name), lambda: _missing_value(model, name))


def _missing_value(model: LabModel, name: str) -> float | int | None:
    idx = model.index
    found: list[float | int] = []
    todo, seen = [name], {name}
    while todo:
        value = todo.pop()
        consumers = idx.consumers.get(value, ())
        if not consumers:
            if value == name:
                return None
            continue
        for nid in consumers:
            node = idx.node(nid)
            if node.domain == "ai.onnx.ml" and node.op_type == "Imputer" \
                    and _reads_first(node, value):
                a = node.attributes.get("replaced_value_float") \
                    or node.attributes.get("replaced_value_int64")
                found.append(a.value if a is not None else 0.0)  # the spec's default
                continue
            if not (_moves(node, value) and node.domain in ("", "ai.onnx", "ai.onnx.ml") and node.outputs
                    and node.outputs[0].name) or len(seen) >= 256:
                return None  # read by something that computes with it: no planted value
            out = node.outputs[0].name
            if out not in seen:
                seen.add(out)
                todo.append(out)
    if not found:
        return None
    first_value = found[0]
    same = all((isinstance(v, float) and isinstance(first_value, float) and
                math.isnan(v) and math.isnan(first_value)) or v == first_value for v in found)
    return first_value if same else None


def vocabulary(model: LabModel, name: str) -> list | None:
    """The values of :func:`vocabularies` that hold for the whole input (else the first
    column's); None when no op names any."""
    found = vocabularies(model, name)
    v = found.get(None) or next(iter(found.values()), None)
    return list(v.values) if v is not None else None


def _element_shape(model: LabModel, name: str, t: Any, dims: Mapping[str, int]) -> tuple:
    declared = shape_tuple(next(v for v in model.graph.inputs if v.name == name).shape)
    if declared is None:
        raise InputError(f"Input {name!r} is a {type_label(t)} whose element shape the model "
                         "does not declare, so make_feeds cannot build it.",
                         fix=f"Pass feeds={{{name!r}: [...]}} with the value you want.")
    out = []
    for d in declared:
        if isinstance(d, int) and d >= 0:
            out.append(d)
        elif isinstance(d, str) and d in dims:
            out.append(int(dims[d]))
        else:
            raise InputError(f"Input {name!r} is a {type_label(t)} whose element dim {d!r} "
                             "has no value.", fix=f"Pass dims={{{d!r}: ...}} or feeds="
                             f"{{{name!r}: [...]}}." if isinstance(d, str) else
                             f"Pass feeds={{{name!r}: [...]}} with the value you want.")
    return tuple(out)


def _scalars(dtype: ir.DataType, n: int, rng: np.random.Generator,
             vocab: Vocab | None) -> np.ndarray:
    if vocab and (dtype == ir.DataType.STRING) != isinstance(vocab.values[0], str):
        vocab = None  # a vocabulary of the other kind (a malformed model): not these values
    if vocab:
        return np.array(vocab.draw(n, rng),
                        dtype=object if dtype == ir.DataType.STRING else None)
    if dtype == ir.DataType.STRING:
        return np.array([_WORDS[i] for i in rng.integers(0, len(_WORDS), size=n)], dtype=object)
    np_dtype = _NP_DTYPES.get(dtype_name(dtype) or "")
    if np_dtype is None:
        raise ValueError(dtype)
    high = _int_high(np_dtype)
    if high is not None:
        return rng.integers(0, high, size=n).astype(np_dtype)
    if np_dtype is np.bool_:
        return rng.random(n) < 0.5
    return rng.standard_normal(n).astype(np_dtype)


def _columns(dtype: ir.DataType, shape: tuple[int, ...], rng: np.random.Generator,
             vocabs: Mapping[int | None, Vocab]) -> np.ndarray:
    """A tensor of ``shape`` whose last axis's column k is drawn from ``vocabs[k]`` (else
    from ``vocabs[None]``, else from a vocabulary found for another column: a column picked
    by an index that is not constant may reach it; else made up)."""
    n = int(np.prod(shape, dtype=np.int64))
    whole = vocabs.get(None) or next(iter(vocabs.values()), None)
    if not shape or not any(k is not None and k < shape[-1] for k in vocabs):
        return _scalars(dtype, n, rng, whole).reshape(shape)
    cols = shape[-1]
    rows = n // cols if cols else 0
    parts = [_scalars(dtype, rows, rng, vocabs.get(k) or whole) for k in range(cols)]
    return np.stack(parts, axis=-1).reshape(shape) if parts else \
        _scalars(dtype, n, rng, whole).reshape(shape)


def _made_value(model: LabModel, name: str, dtype: str | None,
                concrete: Mapping[str, tuple[int, ...]], dims: Mapping[str, int],
                rng: np.random.Generator) -> Any:
    """A generated string tensor, sequence, map or optional for input ``name``."""
    v = next(v for v in model.graph.inputs if v.name == name)
    t = v.type
    vocabs = vocabularies(model, name)
    vocab = vocabulary(model, name)
    try:
        if dtype == "string":
            return _columns(ir.DataType.STRING, tuple(concrete[name]), rng, vocabs)
        if isinstance(t, ir.OptionalType):
            t = t.elem_type
        if isinstance(t, ir.TensorType):
            return _columns(t.dtype, _element_shape(model, name, v.type, dims), rng, vocabs)
        if isinstance(t, ir.SequenceType) and isinstance(t.elem_type, ir.TensorType):
            shape = _element_shape(model, name, v.type, dims)
            return [_columns(t.elem_type.dtype, shape, rng, vocabs) for _ in range(_SEQ_LEN)]
        if isinstance(t, MapType) and isinstance(t.value_type, ir.TensorType):
            keys = list(dict.fromkeys(vocab or ([_WORDS[i] for i in range(4)]
                                                if t.key_type == ir.DataType.STRING
                                                else list(range(4)))))
            values = _scalars(t.value_type.dtype, len(keys), rng, None)
            return dict(zip(keys, values.tolist()))
    except ValueError:
        pass
    raise InputError(f"Input {name!r} has type {dtype}, which make_feeds cannot generate.",
                     fix=f"Pass feeds={{{name!r}: ...}} with the value you built (a list of "
                     "arrays for a sequence, a dict for a map).")


def make_feeds(source: Any, dims: Mapping[str, int] | None = None,
               shapes: Mapping[str, Sequence[int]] | None = None, seed: int = 0, n: int = 1,
               ranges: Mapping[str, tuple[float, float]] | None = None
               ) -> Feeds | list[Feeds]:
    """Seeded random inputs for a model.

    Floats are standard normal (or uniform in ``ranges[name]``); integer inputs that index an
    embedding (Gather) stay below its row count, inputs named ``*mask*`` are ones, ``*type*``
    ids are zeros, other integers lie in [0, 10) (a one-element integer, a count or a length
    such as a Loop's trip count, in [1, 10)); bools are random, except a boolean input that
    decides If branches (optimum's ``use_cache_branch``: the KV-cache branch when the past
    length is at least 1, else the other; :func:`branch_feeds` makes one sample per value);
    scalars are 0-d arrays.
    Strings (and integers an encoder names) are drawn from the vocabulary an ONNX-ML op
    reading the input names (LabelEncoder keys, OneHotEncoder / CategoryMapper categories,
    per column where a Gather or ArrayFeatureExtractor picks one; a TfIdfVectorizer's pool as
    sentences when a Tokenizer splits them: :func:`vocabularies`), else from a few short
    words; a sequence input is a list of two arrays of its declared element shape, a map a
    dict over the vocabulary a DictVectorizer names (else 4 keys), an optional its element.

    Args:
        source: a Lab, LabModel or anything ``onnx_lab.open`` takes (its dims/shapes apply).
        dims, shapes: values for dynamic dims (merged over the Lab's).
        seed: the random seed (same seed, same feeds).
        n: number of samples; ``n == 1`` returns one dict, ``n > 1`` a list of dicts.
        ranges: ``{input: (low, high)}`` uniform ranges.

    Raises:
        DimError: dims left unresolved, listing each and how to pass it.
        InputError: an input that cannot be generated (a sequence without an element shape),
            naming it.
    """
    model, dims, shapes = resolve(source, dims, shapes)
    if not isinstance(n, int) or n < 1:
        raise InputError(f"n must be a positive int, got {n!r}.", fix="Use n=1 or more.")
    concrete = resolve_input_shapes(model, dims, shapes)
    refuse_crashing_shapes(model, concrete)
    # random values are drawn as 8-byte numbers, then cast: refuse before allocating
    # (sequence, map and optional inputs have no shape here: a few small arrays each)
    elements = sum(math.prod(int(d) for d in concrete[name]) for name, _, _ in
                   input_specs(model) if name in concrete)
    check_feed_bytes(n * elements * 16, "the random inputs")
    ranges = dict(ranges or {})
    switch = _switch_values(model, concrete)
    rng = np.random.default_rng(seed)
    samples: list[Feeds] = []
    for _ in range(n):
        feeds: Feeds = {}
        for name, dtype, _shape in input_specs(model):
            if is_container(dtype) or dtype == "string":
                feeds[name] = _made_value(model, name, dtype, concrete,
                                          with_derived(model, dims), rng)
                continue
            shape = concrete[name]
            np_dtype = _NP_DTYPES.get(dtype or "float32")
            if np_dtype is None:
                raise InputError(f"Input {name!r} has dtype {dtype}, which make_feeds cannot "
                                 "generate.", fix="Pass feeds={...} with arrays you built.")
            low_name = name.lower()
            high = _int_high(np_dtype)
            if name in ranges:
                lo, hi = ranges[name]
                if high is not None:
                    arr = rng.integers(int(lo), int(hi), size=shape)
                else:
                    arr = rng.uniform(lo, hi, size=shape)
            elif np_dtype is np.bool_:
                arr = np.ones(shape, bool) if "mask" in low_name else rng.random(shape) < 0.5
                if name in switch:  # an If's condition: the branch the dims make sense for
                    arr = np.full(shape, switch[name], bool)
            elif high is not None:
                if "mask" in low_name:
                    arr = np.ones(shape)
                elif "type" in low_name:
                    arr = np.zeros(shape)
                elif any(not isinstance(v.values[0], str)
                         for v in vocabularies(model, name).values()):
                    # an integer category (cats_int64s, keys_int64s): its own values
                    arr = _columns(ir.DataType.from_numpy(np.dtype(np_dtype)), tuple(shape),
                                   rng, vocabularies(model, name))
                else:
                    rows = _gather_vocab(model, name) or 10
                    top = rows if high == 10 else min(rows, high)
                    # int4/int2 inputs: no value past the type's range. A one-element integer
                    # is a count or a length more often than not (a TF while_loop's trip
                    # count): 0 ran no Loop iteration, and a weight planted in the body
                    # passed every check.
                    low = 1 if math.prod(shape) == 1 and top > 1 else 0
                    arr = rng.integers(low, top, size=shape)
            elif any(v.values and isinstance(v.values[0], float)
                     for v in vocabularies(model, name).values()):
                # values the graph names for a float input: a tree ensemble's intervals,
                # a LabelEncoder's float keys (keys_floats; standard-normal values matched
                # none, every value took the default, and a changed key passed)
                arr = _columns(ir.DataType.from_numpy(np.dtype(np_dtype)), tuple(shape), rng,
                               vocabularies(model, name))
            else:
                arr = rng.standard_normal(shape)
            missing = missing_value(model, name) if name not in ranges else None
            if missing is not None and np.size(arr) > 1 and (
                    high is None or not (isinstance(missing, float) and math.isnan(missing))):
                # an Imputer's missing value in about a quarter of the elements (at least
                # one, never all): its replacement runs and is compared
                arr = np.array(arr, dtype=np.float64 if high is None else np.int64)
                flat = arr.reshape(-1)
                k = max(1, flat.size // 4)
                flat[rng.choice(flat.size, size=k, replace=False)] = missing
            feeds[name] = np.asarray(arr).astype(np_dtype)
        samples.append(feeds)
    return samples[0] if n == 1 else samples


def _cache_slot(model: LabModel) -> Any:
    """The first self-attention cache slot of a decoder (None without one)."""
    try:
        io = decoder_io(model)
    except CacheError:
        return None
    return next((s for s in io.cache if not s.kind.startswith("cross.")
                 and s.past_axis is not None), None) if io is not None else None


def _switch_values(model: LabModel, concrete: Mapping[str, tuple[int, ...]]
                   ) -> dict[str, bool]:
    """The value each branch switch (:func:`onnx_lab.core.branches.branch_switches`) gets in
    generated feeds: a switch that takes the KV-cache branch for one value takes it when the
    cache is not empty (past length >= 1), else the other; any other switch is True."""
    decided = cache_switch_values(model, concrete)
    return {s.input: decided.get(s.input, True) for s in branch_switches(model)}


def cache_switch_values(model: LabModel, concrete: Mapping[str, Sequence[int]]
                        ) -> dict[str, bool]:
    """The switches the input shapes decide: one that takes the KV-cache branch for one value
    takes it when the cache is not empty (past length >= 1), else the other (optimum's
    ``use_cache_branch``). Switches the shapes do not decide are left out."""
    switches = branch_switches(model)
    if not switches:
        return {}
    slot = _cache_slot(model)
    past = concrete.get(slot.past) if slot is not None else None
    if past is None or slot.past_axis >= len(past):
        return {}
    return {s.input: s.cache_value if past[slot.past_axis] >= 1 else not s.cache_value
            for s in switches if s.cache_value is not None}


def branch_feeds(source: Any, dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None, seed: int = 0
                 ) -> list[Feeds]:
    """Seeded samples that run every branch of the model's If nodes whose condition is a
    boolean graph input (:func:`onnx_lab.core.branches.branch_switches`): one sample as
    :func:`make_feeds` makes it, and, for a model with such switches, one more with every
    switch flipped; a model whose inputs reach a tree ensemble's splits gets further samples
    after those (:func:`tree_samples`: its leaves are reached by rows, not by a few). A KV-cache switch (optimum's ``use_cache_branch``) gets consistent dims
    in each: the cache branch a past length of at least 1 (the given one, else 1), the other
    branch an empty past (0, as the first step of a generation has).

    Example:
        >>> [f["use_cache_branch"] for f in branch_feeds(lab, dims)]
        [array([False]), array([ True])]
    """
    model, dims, shapes = resolve(source, dims, shapes)
    more = tree_samples(model, dims, shapes)
    firsts = cast("list[Feeds]", make_feeds(model, dims, shapes, seed=seed, n=more)) \
        if more > 1 else [cast(Feeds, make_feeds(model, dims, shapes, seed=seed))]
    first = firsts[0]
    switches = branch_switches(model)
    if not switches:
        return firsts
    values = switch_values(model, first)
    flipped = {name: not v for name, v in values.items()}
    dims, shapes = dict(dims or {}), {k: list(v) for k, v in (shapes or {}).items()}
    past = past_length(model, first)
    cache = [s for s in switches if s.cache_value is not None and s.input in flipped]
    if past is not None and cache:
        # The past length the flipped sample's cache switch needs.
        takes_cache = flipped[cache[0].input] == cache[0].cache_value
        _with_past(model, dims, shapes, (past or 1) if takes_cache else 0)
    second = cast(Feeds, make_feeds(model, dims, shapes, seed=seed))
    for name, v in flipped.items():
        second[name] = np.full(np.shape(first[name]), v, bool)
    return [first, second, *firsts[1:]]


# Rows a model's tree ensembles are judged on, per value of the longest list a tree feature
# is fed from, and the samples they may take. Each column's value is drawn on its own, so a
# row reaches a leaf only where every split on its path went that way: the 4 rows of
# shapes={'X': [4, n]} reached a few of a forest's leaves, and a leaf weight, a moved
# threshold or two swapped class labels that the real rows see passed compare (63 of 144
# planted in 10 skl2onnx, LightGBM and XGBoost ensembles; 12 of 268 in 19 with these). Trees
# run in microseconds a row; the capture of each sample costs more (an IsolationForest of 250
# nodes compares in 0.9 s, was 0.13 s).
_TREE_ROWS_PER_VALUE = 16
_TREE_ROWS_MIN = 256  # a leaf 6 splits deep of 3 values each: about 1 row in 27
_TREE_SAMPLES_MAX = 64


def tree_samples(model: LabModel, dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None) -> int:
    """How many seeded samples judge ``model`` (1, or more for a model whose inputs reach a
    tree ensemble's splits: :data:`_TREE_ROWS_PER_VALUE` rows per value of the longest list
    one of its columns is fed from, at least :data:`_TREE_ROWS_MIN` rows, at most
    :data:`_TREE_SAMPLES_MAX` samples)."""
    concrete = resolve_input_shapes(model, dims, shapes)
    want = 1
    for name, _, _ in input_specs(model):
        lists = [len(v.values) for v in vocabularies(model, name).values() if v.splits]
        if not lists or name not in concrete:
            continue
        shape = concrete[name]
        rows = math.prod(shape[:-1]) if len(shape) > 1 else math.prod(shape)
        if rows > 0:
            want = max(want, -(-max(_TREE_ROWS_MIN, _TREE_ROWS_PER_VALUE * max(lists))
                                // rows))
    return min(want, _TREE_SAMPLES_MAX)


def _with_past(model: LabModel, dims: dict[str, int], shapes: dict[str, list[int]],
               want: int) -> bool:
    """``dims``/``shapes`` (in place) set to a KV cache of ``want`` past tokens; False when
    the model's past length is no dim of its own to set."""
    try:
        io = decoder_io(model)
    except CacheError:
        return False
    if not (io.past_dim and io.past_dim in dynamic_dims(model)):
        return False
    given_past = dims.get(io.past_dim)
    dims[io.past_dim] = want
    sums = length_sums(model)

    def with_past(name: str) -> bool:  # a total length: the past and the new tokens
        return name in sums or ((e := dim_expression(name)) is not None
                                and io.past_dim in e.names)

    # a total length given beside it would contradict the new past length
    for name in [k for k in dims if with_past(k)]:
        del dims[name]
    old = next((shapes[s.past][s.past_axis] for s in io.cache if s.past in shapes
                and s.past_axis is not None and not s.kind.startswith("cross.")), given_past)
    for s in io.cache:
        if s.past in shapes and s.past_axis is not None and not s.kind.startswith("cross."):
            shapes[s.past][s.past_axis] = want
    if old is not None:
        # whole input shapes given (shapes= / --shape): a total length in them (an attention
        # mask of past + new tokens) moves with the past, or the sample contradicts itself
        declared = {name: shape for name, _dtype, shape in input_specs(model)}
        for name, shape in shapes.items():
            for ax, d in enumerate(declared.get(name) or ()):
                if isinstance(d, str) and d != io.past_dim and with_past(d) \
                        and ax < len(shape):
                    shape[ax] = int(shape[ax]) - int(old) + want
    return True


def past_length(model: LabModel, feeds: Mapping[str, Any]) -> int | None:
    """The past length (KV-cache tokens) ``feeds`` give a decoder, None for other models."""
    slot = _cache_slot(model)
    if slot is None or slot.past not in feeds:
        return None
    return int(np.shape(feeds[slot.past])[slot.past_axis])


def cache_length_feeds(source: Any, dims: Mapping[str, int] | None = None,
                       shapes: Mapping[str, Sequence[int]] | None = None, seed: int = 0,
                       first: Feeds | None = None) -> list[Feeds]:
    """For a KV-cache decoder without a cache switch (a with-past export, a genai build):
    one seeded sample at the given past length and one at the other kind of step, a prefill
    (empty past) when the given length is a decode's, a decode (1 past token) when it is a
    prefill's. A plan judged at one past length may break the other (an int8 decoder judged
    at a past of 4: 31 dB there, 3 dB at the prefill). Other models: the one sample.

    ``first``: the sample at the given dims when the caller has it already (the same
    seeded values: it is not made again).

    Example:
        >>> [f["past_key_values.0.key"].shape[2] for f in cache_length_feeds(lab, dims)]
        [4, 0]
    """
    model, dims, shapes = resolve(source, dims, shapes)
    if first is None:
        first = cast(Feeds, make_feeds(model, dims, shapes, seed=seed))
    past = past_length(model, first)
    if past is None or branch_switches(model) or _empty_batch(model, first):
        return [first]
    dims, shapes = dict(dims or {}), {k: list(v) for k, v in (shapes or {}).items()}
    if not _with_past(model, dims, shapes, 0 if past else 1):
        return [first]
    try:
        second = cast(Feeds, make_feeds(model, dims, shapes, seed=seed))
    except LabError:  # dims that only the given past length resolves
        return [first]
    return [first, second]


def _empty_batch(model: LabModel, feeds: Mapping[str, Any]) -> bool:
    """Whether a sample's token ids are empty (a batch or a length of 0): no step of a
    generation, and onnxruntime 1.32 ends the process (SIGFPE) on a genai decoder's empty
    batch at an empty past; no second step is made of it."""
    slot = _cache_slot(model)
    ids = next((v for k, v in feeds.items() if "input_ids" in k), None)
    return slot is not None and ids is not None and int(np.size(ids)) == 0


def _checked_container(name: str, dtype: str, value: Any) -> Any:
    """A user's feed for a sequence (a list of arrays), map (a dict) or optional input."""
    if dtype.startswith("seq("):
        if not isinstance(value, (list, tuple)):
            raise InputError(f"Feed {name!r} is a {type(value).__name__}; the model expects a "
                             f"{dtype}.", fix="Pass a list of numpy arrays.")
        return [np.asarray(x) if not isinstance(x, Mapping) else dict(x) for x in value]
    if dtype.startswith("map("):
        if not isinstance(value, Mapping):
            raise InputError(f"Feed {name!r} is a {type(value).__name__}; the model expects a "
                             f"{dtype}.", fix="Pass a dict {key: value}.")
        return dict(value)
    return value if value is None or isinstance(value, (list, Mapping)) else np.asarray(value)


def _is_numpy_file(path: Any) -> bool:
    """Whether ``path`` starts as a .npy (``\\x93NUMPY``) or a .npz (a zip) file does."""
    try:
        with open(path, "rb") as f:
            return f.read(6).startswith((b"\x93NUMPY", b"PK"))
    except OSError:
        return False


def npy_load_reason(error: Exception, path: Any) -> str:
    """Why ``numpy.load(path, allow_pickle=False)`` failed, for the problem of a message:
    numpy's words for a .npy/.npz file, else that it is none (numpy says "This file contains
    pickled (object) data. If you trust the file you can load it unsafely..." of a JSON or a
    model's .data file, which is no pickle and no advice to follow)."""
    if _is_numpy_file(path):
        return str(error).rstrip(".")
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return "it could not be read"
    return f"it starts with {head!r}, where a .npy file starts with b'\\x93NUMPY' and a .npz " \
        "file with b'PK'"


def missing_file_problem(path: Any, what: str) -> str:
    """The problem of a file path that names no file: a folder, or nothing."""
    return f"{what} {str(path)!r} is a folder, not a file" if os.path.isdir(path) else \
        f"{what} {str(path)!r} does not exist"


def npy_load_fix(error: Exception, default: str, path: Any = None) -> str:
    """The fix for a failed ``numpy.load(..., allow_pickle=False)``: an object array (strings
    held as Python objects) needs pickle, which onnx_lab does not load from a file. numpy
    says the same of a file that is no .npy/.npz at all (a model's .data file): ``path``'s
    first bytes tell them apart."""
    if path is not None:
        try:
            with open(path, "rb") as f:
                head = f.read(6)
        except OSError:
            head = b""
        if not head.startswith((b"\x93NUMPY", b"PK")):
            return f"It is not a .npy or .npz file (numpy.save and numpy.savez write them). " \
                f"{default}"
    if "allow_pickle" in str(error):
        return ("Save strings as numpy strings, arr.astype(str): an object array needs "
                "pickle, which onnx_lab does not load from a file.")
    return default


def _raw_bytes_as(name: str, arr: np.ndarray, dtype: str | None, want: Any) -> np.ndarray:
    """A feed of raw bytes (dtype ``V1``/``V2``: what ``numpy.load`` gives for an array of
    bfloat16, float8 or int4 that ``numpy.savez`` wrote, its ml_dtypes type lost) read as the
    input's dtype when the item sizes match; else an InputError."""
    if want is not None and np.dtype(want).kind == "V" and np.dtype(want).itemsize == \
            arr.dtype.itemsize and not arr.dtype.fields:
        return arr.view(want)
    raise InputError(
        f"Feed {name!r} holds raw bytes (dtype {arr.dtype}), which the model's input of type "
        f"{dtype} cannot take.", fix="numpy.savez stores bfloat16, float8 and int4 arrays as "
        "raw bytes, read back as the input's type only when their item size matches it; "
        "pass the arrays themselves (a dict of numpy arrays) or save them with the input's "
        "dtype.")


def read_feeds_file(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` feeds file by name (not yet checked against a model).

    Raises:
        InputError: no such file, or not one numpy.savez wrote.
    """
    path = user_path(path)
    if not path.is_file():
        raise InputError(f"{missing_file_problem(path, 'Feeds file')}.",
                         fix="Save inputs with numpy.savez(path, **{input_name: array}).")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise InputError(f"Cannot read feeds file {str(path)!r}: {npy_load_reason(e, path)}.",
                         fix=npy_load_fix(e, "Write it with numpy.savez.", path)) from e


def as_feed_list(feeds: Any, source: Any, dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None, seed: int = 0,
                 branches: bool = False) -> list[Feeds]:
    """Normalize ``feeds`` (None, a dict, a list of dicts, or an ``.npz`` path) to a checked list.

    None generates one seeded sample; with ``branches`` (what judges a model: verification,
    compare, the precision searches) one per branch of the If nodes a boolean input decides
    (:func:`branch_feeds`). Dicts are checked against the model's inputs: a missing
    or unknown input, a wrong dtype kind or a shape that contradicts a fixed dim raises
    InputError naming the input.
    """
    model, dims, shapes = resolve(source, dims, shapes)
    if feeds is None:
        if branches:
            return branch_feeds(model, dims, shapes, seed=seed)
        return [make_feeds(model, dims, shapes, seed=seed)]
    if isinstance(feeds, (str, Path)):
        feeds = read_feeds_file(feeds)
    items = [feeds] if isinstance(feeds, Mapping) else list(feeds)
    if not items:  # [] ran nothing and failed later on its first sample (an IndexError)
        raise InputError("feeds is an empty list: there is no sample to run.",
                         fix="Pass one dict {input_name: numpy array} per sample, or "
                         "feeds=None for seeded random inputs.")
    specs = input_specs(model)
    names = [s[0] for s in specs]
    out = []
    for i, f in enumerate(items):
        if not isinstance(f, Mapping):
            raise InputError(f"Feeds sample {i} is a {type(f).__name__}, not a dict.",
                             fix="Pass {input_name: numpy array}.")
        missing = [n for n in names if n not in f]
        extra = [k for k in f if k not in names]
        if missing or extra:
            raise InputError(
                f"Feeds do not match the model's inputs {names}: "
                + "; ".join(x for x in (f"missing {missing}" if missing else "",
                                        f"unknown {extra}" if extra else "") if x) + ".",
                fix="Give exactly one array per model input.")
        sample = {}
        for name, dtype, shape in specs:
            if is_container(dtype):
                sample[name] = _checked_container(name, dtype, f[name])
                continue
            arr = np.asarray(f[name])
            if dtype == "string" and arr.dtype.kind not in "OUS":
                raise InputError(f"Feed {name!r} has dtype {arr.dtype}, the model expects "
                                 "strings.", fix="Pass an array of str (dtype object).")
            want = _NP_DTYPES.get(dtype or "")
            if arr.dtype.type is np.void:  # numpy.savez of an ml_dtypes array: raw bytes
                arr = _raw_bytes_as(name, arr, dtype, want)
            if want is not None and arr.dtype != want:
                special = np.dtype(want).kind == "V"  # bfloat16, float8, int4 (ml_dtypes)
                if np.dtype(want).kind != arr.dtype.kind and not (
                        np.dtype(want).kind in "iu" and arr.dtype.kind in "iu") and not (
                        special and arr.dtype.kind in "fiu"
                        and (arr.dtype.kind == "f") == (_int_high(want) is None)):
                    raise InputError(f"Feed {name!r} has dtype {arr.dtype}, the model expects "
                                     f"{dtype}.", fix=f"Pass arr.astype('{dtype}').")
                try:
                    arr = arr.astype(want)
                except (TypeError, ValueError) as e:
                    raise InputError(f"Feed {name!r} of dtype {arr.dtype} cannot be converted "
                                     f"to the model's {dtype}: {e}.",
                                     fix=f"Pass an array of dtype {dtype}.") from e
            if shape is not None:
                if arr.ndim != len(shape):
                    raise InputError(f"Feed {name!r} has shape {list(arr.shape)} (rank "
                                     f"{arr.ndim}); the model expects rank {len(shape)} "
                                     f"{list(shape)}.", fix="Reshape the array.")
                # a declared 0 is a fixed size too (a static prefill export's empty past), as
                # resolve_input_shapes and onnxruntime read it
                for ax, (a, d) in enumerate(zip(arr.shape, shape)):
                    if isinstance(d, int) and d >= 0 and a != d:
                        raise InputError(f"Feed {name!r} has shape {list(arr.shape)}; dim {ax} "
                                         f"must be {d}.", fix="Pass an array of the model's "
                                         f"shape {list(shape)}.")
            sample[name] = arr
        refuse_crashing_shapes(model, {k: np.shape(v) for k, v in sample.items()
                                       if isinstance(v, np.ndarray)})
        out.append(sample)
    return out


def refuse_crashing_shapes(model: LabModel, shapes: Mapping[str, Sequence[int]]) -> None:
    """InputError for input shapes on which onnxruntime ends the process instead of raising:
    an empty batch (0 on axis 0) into a decoder with ``GroupQueryAttention`` (onnxruntime
    1.32 divides by it: SIGFPE, at any past length), which would take a notebook's kernel
    with it."""
    if not any(len(s) > 0 and s[0] == 0 for s in shapes.values()):
        return
    ops = model.cached(("attention_ops",), lambda: {
        n.op_type for g in model.ir.graphs() for n in g
        if n.domain == "com.microsoft" and n.op_type == "GroupQueryAttention"})
    if ops:
        empty = sorted(k for k, s in shapes.items() if len(s) > 0 and s[0] == 0)
        raise InputError(
            f"Input(s) {', '.join(map(repr, empty[:4]))}{' ...' if len(empty) > 4 else ''} "
            "have a batch of 0: onnxruntime's "
            "GroupQueryAttention ends the process on an empty batch (a division by zero), so "
            "onnx_lab does not run it.", fix="Give a batch of 1 or more (dims={'batch_size': "
            "1}, or feeds with at least one row).")
