"""Teaching texts: what each pass does, why it keeps the outputs, and its math (markdown).

Each text lives in its pass's own docstring (from its ``### `` heading on), and each pass lists
the pattern names its matches carry (``patterns``): this module only reads the registry, so a
new pass brings its explanation with it. Used by the FusionLab widget and the teaching
notebook.

Example:
    >>> from onnx_lab.transforms import explain
    >>> print(explain("conv_bn"))
"""

from __future__ import annotations

import inspect

from onnx_lab.errors import unknown_name
from onnx_lab.transforms.base import _REGISTRY, pass_names

__all__ = ["explain", "pattern_passes", "builtin_passes", "pass_table", "pass_counts", "PATTERN_PASS"]  # noqa: F822 - PATTERN_PASS: __getattr__

_PROVENANCE = ("\n\n**Provenance.** Every node the pass creates or changes records the "
               "original nodes it stands for (node metadata `onnx_lab.origin`), so "
               "`onnx_lab.transforms.origins(model)` maps it back across any number of steps.")


def _text(name: str) -> str | None:
    """The teaching text in the docstring of pass ``name``: from its first ``### `` heading
    on (the lines before it are the registry's summary and notes for developers)."""
    factory = _REGISTRY[name].factory
    doc = inspect.cleandoc(factory.__doc__ or "") if isinstance(factory, type) else ""
    at = doc.find("### ")
    return doc[at:].rstrip() if at >= 0 else None


def pattern_passes() -> dict[str, str]:
    """{pattern name: pass name}: each registered pass's ``patterns`` (the pattern names its
    matches carry in ``lab.patterns()``).

    Example:
        >>> pattern_passes()["conv_bn_relu"]
        'fuse_conv_bn'
    """
    out: dict[str, str] = {}
    for name in pass_names():
        for pattern in getattr(_REGISTRY[name].factory, "patterns", ()) or ():
            out.setdefault(pattern, name)
    return out


def __getattr__(name: str):
    if name == "PATTERN_PASS":  # the mapping's older name, made from the registry
        return pattern_passes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    pass_names()
    patterns = pattern_passes()
    key = str(pass_or_pattern)
    if key not in _REGISTRY and key not in patterns and ":" in key:
        key = key.split(":", 1)[0]  # a match id: explain its pass
    name = patterns.get(key, key)
    if name in _REGISTRY:
        text = _text(name)
        if text is None:  # a tool wrapper or a pass without a teaching text
            return f"### `{name}`\n\n{_REGISTRY[name].summary}"
        if key != name:
            text = f"*Pattern `{key}` of pass `{name}`.*\n\n" + text
        return text + _PROVENANCE
    raise unknown_name("pass or pattern", key, [*_REGISTRY, *patterns],
                       fix="See onnx_lab.transforms.available() and lab.patterns().")


def builtin_passes(kind: str | None = "graph") -> list[str]:
    """The passes onnx_lab itself registers (of ``kind``; None: all), in registry order:
    what docs tables and test parametrisation list (passes a user or a test registers are
    left out).

    Example:
        >>> builtin_passes()[:2]
        ['constants_to_initializers', 'dedupe_initializers']
    """
    out = []
    for name in pass_names():
        e = _REGISTRY[name]
        module = getattr(e.factory, "__module__", "") or ""
        if (kind is None or e.kind == kind) and module.startswith("onnx_lab."):
            out.append(name)
    return out


def _param_text(p) -> str:
    kind = p.type.__name__ if isinstance(p.type, type) else "/".join(t.__name__ for t in p.type)
    return f"`{p.name}: {kind} = {p.default!r}`"


def pass_table() -> str:
    """The markdown table of the built-in graph passes (docs/passes.md): name, the pattern
    names its matches carry, its parameters and its summary, all read from the registry.
    ``scripts/sync_pass_docs.py`` writes it into the docs; a test keeps them equal.

    Example:
        >>> print(pass_table().splitlines()[0])
        | pass | patterns | params | what it does |
    """
    rows = ["| pass | patterns | params | what it does |", "|---|---|---|---|"]
    for name in sorted(builtin_passes("graph")):  # not the import order: that varies
        e = _REGISTRY[name]
        pats = ", ".join(f"`{p}`" for p in getattr(e.factory, "patterns", ()) or ()) or "—"
        params = ", ".join(_param_text(p) for p in e.params) or "—"
        rows.append(f"| `{name}` | {pats} | {params} | {e.summary} |")
    return "\n".join(rows)


def pass_counts() -> dict[str, int]:
    """Registered passes per kind (``graph``, ``edit``, ``tool``): the README's count.

    Example:
        >>> pass_counts()["graph"]
    """
    out: dict[str, int] = {}
    for name in pass_names():
        kind = _REGISTRY[name].kind
        out[kind] = out.get(kind, 0) + 1
    return out
