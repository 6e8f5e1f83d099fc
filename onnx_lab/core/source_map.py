"""Source map: which PyTorch module and which line of code made each node.

torch.onnx's exporter (``dynamo=True``, the default) writes on every node ``metadata_props``:

- ``pkg.torch.onnx.name_scopes``: the qualified module names from the root down, the op last
  (``['', 'model', 'model.layers.0', 'model.layers.0.self_attn', 'linear_3']``);
- ``pkg.torch.onnx.class_hierarchy``: the classes of the same levels
  (``['...LlamaForCausalLM', ..., 'torch.nn.modules.linear.Linear', 'aten.linear.default']``);
- ``pkg.torch.onnx.stack_trace``: the Python stack that made the op;
- ``namespace``: both at once (``': cls/model: cls/.../linear_3: aten.linear.default'``),
  the key Model Explorer groups by.

This module is the one place that reads them. Each node gets a list of :class:`Source` parts:
one for an exported node, several for a node a fusion made out of many (their merged source,
see :func:`carry_sources`). Without metadata (TorchScript exports, other exporters) the module
path is inferred from the ``/``-scopes of the node names it comes from
(``/model/layers.0/attn/MatMul`` -> ``model.layers.0.attn``), marked ``kind='inferred'``.

Fusions keep them: every step runs :func:`carry_sources`, which gives each new node the merged
source of the original nodes it stands for (through :mod:`onnx_lab.core.provenance`), written
under the standard keys (so other tools read them) plus ``onnx_lab.sources``, a JSON list of
all the parts (a fused Attention came from q_proj, k_proj, v_proj and the softmax).

Example:
    >>> from onnx_lab.core.source_map import source_table
    >>> source_table(lab.model).loc[0, ["module", "module_class", "source_line"]]
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import onnx_ir as ir

from onnx_lab._pandas import pd
from onnx_lab.core._meta import MAX_META_BYTES, load_json, load_str_list
from onnx_lab.core.provenance import ORIGIN_KEY, node_origin
from onnx_lab.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from onnx_lab.core.model import LabModel

__all__ = ["Source", "NodeSource", "SOURCE_COLUMNS", "SCOPES_KEY", "CLASSES_KEY", "STACK_KEY",
           "NAMESPACE_KEY", "SOURCES_KEY", "RULE_KEY", "node_sources", "source_map", "source_table",
           "module_at", "module_scopes", "scope_key", "group_by_module", "carry_sources", "source_share",
           "parse_stack_trace", "user_frame"]

SCOPES_KEY = "pkg.torch.onnx.name_scopes"
CLASSES_KEY = "pkg.torch.onnx.class_hierarchy"
STACK_KEY = "pkg.torch.onnx.stack_trace"
NAMESPACE_KEY = "namespace"
#: onnx_lab's own key: every part of a merged (fused) node's source, as JSON.
SOURCES_KEY = "onnx_lab.sources"
_KEYS = (SCOPES_KEY, CLASSES_KEY, STACK_KEY, NAMESPACE_KEY, SOURCES_KEY)

#: The source columns of ``lab.nodes`` (and :func:`source_table`).
SOURCE_COLUMNS = ["module", "module_class", "source_file", "source_line", "source_function",
                  "source_code", "source_kind", "source_modules"]

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d{1,9}), in (?P<function>[^\n]+)'
                    r'(?:\n[ \t]+(?P<code>[^\n]*))?')
# Frames inside torch itself (nn.Module.__call__, F.linear...) are not the code that made the
# node: the user's frame is the innermost one outside the torch package.
_TORCH_FRAME = re.compile(r"[/\\](?:site|dist)-packages[/\\]torch[/\\]|[/\\]torch[/\\](?:nn|_\w+|"
                          r"fx|onnx|utils|autograd|functional\.py)[/\\.]")


@dataclass(frozen=True)
class Source:
    """Where one part of a node comes from.

    Attributes:
        path: qualified module names from the root down (``('model', 'model.layers.0',
            'model.layers.0.self_attn')``; empty for the root module itself).
        classes: the class of each level of ``path`` (None where unknown: inferred sources).
        levels: each level's own name (``('model', 'layers.0', 'self_attn')``), the name
            scopes the graph views collapse by.
        root_class: the class of the root module (None where unknown).
        file, line, function, code: the innermost frame of the stack trace outside torch
            (the user's model code), None without a stack trace.
        kind: ``'metadata'`` (exporter metadata) or ``'inferred'`` (node-name scopes).
    """

    path: tuple[str, ...] = ()
    classes: tuple[str | None, ...] = ()
    levels: tuple[str, ...] = ()
    root_class: str | None = None
    file: str | None = None
    line: int | None = None
    function: str | None = None
    code: str | None = None
    kind: str = "metadata"

    @property
    def module(self) -> str:
        """The qualified module path (``'model.layers.0.self_attn.q_proj'``; '' = root)."""
        return self.path[-1] if self.path else ""

    @property
    def module_class(self) -> str | None:
        """The module's class (``'torch.nn.modules.linear.Linear'``), None when unknown."""
        return self.classes[-1] if self.classes else self.root_class

    @property
    def where(self) -> str | None:
        """``file:line`` of the user frame (None without a stack trace)."""
        return f"{self.file}:{self.line}" if self.file else None

    def to_json(self) -> dict[str, Any]:
        d = {"module": self.module, **asdict(self)}  # 'module' for readers of the file
        d["path"], d["classes"], d["levels"] = list(self.path), list(self.classes), \
            list(self.levels)
        return d


@dataclass(frozen=True)
class NodeSource:
    """The source of one node: its parts, and what they share.

    Attributes:
        parts: one :class:`Source` per original node it stands for (one for an exported node,
            several, deduplicated, for a fused one).
    """

    parts: tuple[Source, ...]

    @property
    def path(self) -> tuple[str, ...]:
        """The deepest module path all parts share."""
        return _common([p.path for p in self.parts])

    @property
    def module(self) -> str:
        p = self.path
        return p[-1] if p else ""

    @property
    def levels(self) -> tuple[str, ...]:
        """Each shared level's own name (the name scope the graph views collapse by)."""
        n = len(self.path)
        for p in self.parts:
            if len(p.levels) >= n:
                return p.levels[:n]
        return self.path

    @property
    def module_class(self) -> str | None:
        first = self.parts[0]
        n = len(self.path)
        return first.classes[n - 1] if n and len(first.classes) >= n else \
            (first.root_class if not n else None)

    @property
    def kind(self) -> str:
        return self.parts[0].kind

    @property
    def modules(self) -> list[str]:
        """Each part's module, in order, once each."""
        return list(dict.fromkeys(p.module for p in self.parts))


def _common(paths: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    if not paths:
        return ()
    out = paths[0]
    for p in paths[1:]:
        k = 0
        while k < len(out) and k < len(p) and out[k] == p[k]:
            k += 1
        out = out[:k]
    return out


def _list(raw: str | None) -> list[str] | None:
    return load_str_list(raw)  # bounded: a hostile value is None, never MemoryError


def _text(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _texts(v: object, none_ok: bool = False) -> tuple | None:
    """A list of strings (and None where ``none_ok``) as a tuple; None for any other shape."""
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(x, str) or (none_ok and x is None)
                                          for x in v):
        return None
    return tuple(v)


def _part(p: object) -> Source | None:
    """One part of an ``onnx_lab.sources`` list, or None when its shape is not the one
    onnx_lab writes (hostile or damaged metadata is ignored, never an exception)."""
    if not isinstance(p, dict):
        return None
    path, classes, levels = _texts(p.get("path")), _texts(p.get("classes"), True), \
        _texts(p.get("levels"))
    if path is None or classes is None or levels is None:
        return None
    line = p.get("line")
    if not (line is None or (type(line) is int and 0 <= line < 1 << 31)):
        line = None
    kind = p.get("kind")
    return Source(path=path, classes=classes, levels=levels, root_class=_text(p.get("root_class")),
                  file=_text(p.get("file")), line=line, function=_text(p.get("function")),
                  code=_text(p.get("code")),
                  kind=kind if kind in ("metadata", "inferred") else "metadata")


def parse_stack_trace(trace: str | None) -> list[dict[str, Any]]:
    """The frames of a Python stack trace string, outermost first: {file, line, function,
    code}.

    Example:
        >>> parse_stack_trace('File "m.py", line 3, in forward\\n    return x + 1')
        [{'file': 'm.py', 'line': 3, 'function': 'forward', 'code': 'return x + 1'}]
    """
    if not trace or not isinstance(trace, str):
        return []
    trace = trace[-MAX_META_BYTES:]  # the innermost frames: a hostile trace may be huge
    return [{"file": m["file"], "line": int(m["line"]), "function": m["function"].strip(),
             "code": (m["code"] or "").strip() or None} for m in _FRAME.finditer(trace)]


def user_frame(trace: str | None) -> dict[str, Any] | None:
    """The innermost frame of ``trace`` outside the torch package (the model's own code;
    the innermost frame when every frame is torch's), None without frames."""
    frames = parse_stack_trace(trace)
    for f in reversed(frames):
        if not _TORCH_FRAME.search(f["file"]) and not _passing_through(f):
            return f
    for f in reversed(frames):  # only generated code or wrappers outside torch
        if not _TORCH_FRAME.search(f["file"]):
            return f
    return frames[-1] if frames else None


#: A wrapper's own line: it hands every argument on (``return func(*args, **kwargs)``).
_WRAPPER_LINE = re.compile(r"^(?:return\s+)?[\w.]+\(\*args,\s*\*\*kwargs\)$")


def _passing_through(frame: Mapping[str, Any]) -> bool:
    """Whether ``frame`` is no place in the model's code: code torch.fx generated (the
    branches of a ``torch.cond``: ``<eval_with_key>.3``) or a wrapper that hands every
    argument on (a kernels library's ``return func(*args, **kwargs)``)."""
    file = str(frame.get("file") or "")
    code = str(frame.get("code") or "").strip()
    return file.startswith("<") or bool(_WRAPPER_LINE.match(code))


def _from_metadata(props: Mapping[str, str]) -> list[Source]:
    if not any(k in props for k in _KEYS):
        return []
    return list(_parse(props.get(SOURCES_KEY), props.get(SCOPES_KEY), props.get(CLASSES_KEY),
                       props.get(STACK_KEY), props.get(NAMESPACE_KEY)))


def _from_namespace(ns: str | None) -> tuple[list[str] | None, list[str] | None]:
    """(scopes, classes) of a ``namespace`` value ``': cls/q: cls/.../op: aten'`` (what a
    tool that kept only that key left), (None, None) when it is not one."""
    if not ns or ": " not in ns:
        return None, None
    pairs = [p.split(": ", 1) for p in ns.split("/")]
    if any(len(p) != 2 for p in pairs) or pairs[0][0] != "":
        return None, None
    return [p[0] for p in pairs], [p[1] for p in pairs]


@functools.lru_cache(maxsize=4096)
def _parse(raw: str | None, scopes_raw: str | None, classes_raw: str | None,
           trace: str | None, namespace: str | None = None) -> tuple[Source, ...]:
    """The parts of a node's metadata (cached: the nodes of one module share most strings)."""
    parts = load_json(raw) if raw else None
    if isinstance(parts, list):
        out = [s for s in map(_part, parts) if s is not None]
        if out:
            return tuple(out)
    scopes = _list(scopes_raw)
    classes = _list(classes_raw) or []
    if not scopes:
        scopes, ns_classes = _from_namespace(namespace)
        classes = classes or ns_classes or []
    frame = user_frame(trace) or {}
    if not scopes and not frame:
        return ()  # nothing readable: unknown rather than a guess at the root module
    if scopes and scopes[0] != "":
        # Both lists name the root module first ('' / its class) and the op last; the
        # nodes of a torch.cond branch have only the op's ('linear', aten.linear.default):
        # their module is unknown, not the root with the op's class
        return ()
    # Both lists name the root module first ('' / its class) and the op last.
    levels = [s for s in (scopes or [])[1:-1]]
    cls = classes[1:-1] if len(classes) == len(scopes or []) else [None] * len(levels)
    return (Source(path=tuple(levels), classes=tuple(cls), levels=_local(levels),
                   root_class=classes[0] if classes else None, file=frame.get("file"),
                   line=frame.get("line"), function=frame.get("function"),
                   code=frame.get("code"), kind="metadata"),)


def _line(x: Any) -> int | None:
    """A line number from metadata: an int, else None (a string there is hostile or broken)."""
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _local(path: Sequence[str]) -> tuple[str, ...]:
    """Each level's own name: ``('model', 'model.layers.0')`` -> ``('model', 'layers.0')``."""
    out, parent = [], ""
    for q in path:
        out.append(q[len(parent) + 1:] if parent and q.startswith(parent + ".") else q)
        parent = q
    return tuple(out)


def _scope_path(name: str) -> tuple[str, ...]:
    """``/model/layers.0/attn/MatMul`` -> ``('model', 'model.layers.0', 'model.layers.0.attn')``
    (a level repeating its parent's name, as Sequential children do, replaces it)."""
    if "/" not in name.strip("/"):
        return ()
    path: list[str] = []
    for part in name.strip("/").split("/")[:-1]:
        if not part:
            continue
        if path and part.startswith(path[-1] + "."):
            # TorchScript names a nested child by its full path from the root:
            # '/features/features.0/features.0.0' -> 'features', 'features.0', 'features.0.0'
            path.append(part)
        elif path and part.startswith(path[-1].rsplit(".", 1)[-1] + ".") and \
                part.split(".", 1)[0] == path[-1].rsplit(".", 1)[-1]:
            parent = path[-2] + "." if len(path) > 1 else ""
            path.append(parent + part)  # '/blocks/blocks.0' -> 'blocks', 'blocks.0'
        else:
            path.append((path[-1] + "." if path else "") + part)
    return tuple(path)


def _inferred(node: ir.Node, node_id: str) -> list[Source]:
    """Module paths from the name scopes of the original nodes ``node`` stands for."""
    names = node_origin(node, node.name or node_id) if ORIGIN_KEY in node.metadata_props \
        else [_own_name(node) or node_id]
    out = []
    for n in names:
        if "/" not in n.strip("/"):
            if n.startswith("/") and len(n) > 1 and _ROOT not in out:
                out.append(_ROOT)  # TorchScript's '/Mul': an op of the root module
            continue
        src = _scope_source(n.strip("/").rsplit("/", 1)[0])
        if src is not None and src not in out:
            out.append(src)
    return out


def _own_name(node: ir.Node) -> str:
    """The name whose scope a node's module is inferred from: its name, or the name of the
    output it is named after (a float16 conversion's ``Q__fp16/Cast`` writes ``Q__fp16``: its
    scope is the tensor's, none for a plain tensor name; the name's own first level made up a
    module ``Q__fp16``)."""
    name = node.name or ""
    for v in node.outputs:
        if v.name and name.startswith(v.name + "/") and "/" not in name[len(v.name) + 1:]:
            return v.name
    return name


#: The root module, inferred from a name scope of one level ('/Mul').
_ROOT = Source(kind="inferred")


@functools.lru_cache(maxsize=4096)
def _scope_source(scope: str) -> Source | None:
    """The inferred source of a name scope ``model/layers.0/attn`` (cached per scope)."""
    p = _scope_path(scope + "/_")
    if not p:
        return None
    levels = tuple(x for x in scope.split("/") if x)
    return Source(path=p, classes=(None,) * len(p), levels=levels, kind="inferred")


def node_sources(node: ir.Node, node_id: str = "") -> NodeSource | None:
    """The source of one node: from its metadata, else inferred from name scopes, else None."""
    parts = _from_metadata(node.metadata_props)
    if parts:
        parts = _fused_by_exporter(node, parts)
    parts = parts or _inferred(node, node_id)
    return NodeSource(tuple(parts)) if parts else None


#: The key onnxscript's rewriter, which torch.onnx runs at export (``optimize=True``), writes
#: on a node one of its rules made (``FuseBatchNormIntoConv``).
RULE_KEY = "pkg.onnxscript.rewriter.rule_name"
_PARAM = re.compile(r"(?P<module>\w+(?:\.\w+)*)\.(?:weight|bias)")  # '0.conv.weight' too


def _fused_by_exporter(node: ir.Node, parts: list[Source]) -> list[Source]:
    """``parts`` with the modules the exporter's own fusion took in. torch.onnx (dynamo=True)
    folds a BatchNormalization into the Conv before it (``FuseBatchNormIntoConv``) and keeps
    the BatchNormalization's metadata only: the fused Conv said ``b1.bn`` and nothing of
    ``b1.conv``. Its weights keep the Conv's parameter names (``b1.conv.weight``), which give
    the module; a module beside the node's own (the same parent) is added first, as the data
    flows, with the levels it shares with it (a tied weight from elsewhere is not)."""
    if RULE_KEY not in node.metadata_props or SOURCES_KEY in node.metadata_props \
            or len(parts) != 1 or parts[0].kind != "metadata" or not parts[0].path:
        return parts
    base = parts[0]
    parent = base.path[-1].rsplit(".", 1)[0] if "." in base.path[-1] else ""
    extra: list[Source] = []
    for v in node.inputs:
        m = _PARAM.fullmatch(v.name or "") if v is not None and v.const_value is not None \
            else None
        mod = m.group("module") if m else None
        if mod is None or mod == base.path[-1] or any(e.module == mod for e in extra) or \
                (mod.rsplit(".", 1)[0] if "." in mod else "") != parent:
            continue
        shared = [q for q in base.path[:-1] if mod.startswith(q + ".")]
        path = (*shared, mod)
        extra.append(Source(path=path, classes=(*base.classes[:len(shared)], None),
                            levels=_local(path), root_class=base.root_class, kind="metadata"))
    return [*extra, base] if extra else parts


def source_map(model: LabModel) -> dict[str, NodeSource | None]:
    """node_id -> :class:`NodeSource` (None when nothing is known), cached on the model."""
    def build() -> dict[str, NodeSource | None]:
        out = {nid: node_sources(e.node, nid) for nid, e in model.index.entries.items()}
        # A body node without a source of its own (a torch.cond branch's, whose metadata
        # names only its op) comes from where its If/Loop does: the owner's source
        # (index entries list owners before their bodies' nodes)
        for nid, e in model.index.entries.items():
            if out[nid] is None and e.graph:
                owner = e.graph.rsplit("/", 1)[0]
                out[nid] = out.get(owner)
        return out

    return model.cached(("source_map",), build)


def source_table(model: LabModel) -> pd.DataFrame:
    """One row per node: where it comes from in the PyTorch code.

    Columns:
        node_id (str).
        module (str|None): qualified module path shared by all its parts
            (``'model.layers.0.self_attn.q_proj'``; '' for the root module; None: unknown).
        module_class (str|None): that module's class (``'torch.nn.modules.linear.Linear'``;
            None when inferred).
        source_file, source_line, source_function, source_code (str|int|None): the innermost
            stack frame outside torch of its first part (the model's own line of code).
        source_kind (str|None): 'metadata' (exporter metadata, carried through fusions),
            'inferred' (from node-name scopes) or None (unknown).
        source_modules (list[str]): each part's module (several for a fused node).
    """
    def build() -> pd.DataFrame:
        rows = []
        for nid, s in source_map(model).items():
            if s is None:
                rows.append((nid, None, None, None, None, None, None, None, []))
                continue
            first = next((p for p in s.parts if p.file), s.parts[0])
            rows.append((nid, s.module, s.module_class, first.file, first.line,
                         first.function, first.code, s.kind, s.modules))
        df = pd.DataFrame(rows, columns=["node_id", *SOURCE_COLUMNS])
        df["source_line"] = df["source_line"].astype("Int64")
        return df

    return model.cached(("table", "source_table"), build).copy()


def module_scopes(model: LabModel) -> dict[str, tuple[str, ...]]:
    """node_id -> the name scope of its module, level by level (``('model', 'layers.0',
    'self_attn')``; empty when unknown): what the graph views collapse by."""
    return model.cached(("module_scopes",), lambda: {
        nid: (s.levels if s is not None else ()) for nid, s in source_map(model).items()})


def scope_key(levels: Sequence[str]) -> str:
    """``('model', 'layers.0')`` -> ``'/model/layers.0'`` (the key of a collapsed box)."""
    return "/" + "/".join(levels)


def module_at(model: LabModel, depth: int | None = None) -> dict[str, str | None]:
    """node_id -> its module path cut to ``depth`` levels (None: the full path; '' = root,
    None = unknown).

    Example:
        >>> module_at(lab.model, 2)["node_linear_3"]
        'model.layers.0'
    """
    if depth is not None and (not isinstance(depth, int) or isinstance(depth, bool)
                              or depth < 0):
        raise InputError(f"depth must be an int >= 0 or None, got {depth!r}.",
                         fix="Pass depth=2 for 'model.layers.0', None for the full path.")
    out: dict[str, str | None] = {}
    for nid, s in source_map(model).items():
        if s is None:
            out[nid] = None
            continue
        p = s.path if depth is None else s.path[:depth]
        out[nid] = p[-1] if p else ""
    return out


def group_by_module(frame: pd.DataFrame, model: LabModel, agg: Mapping[str, Any], *,
                    depth: int | None = None, key: str = "node_id",
                    sort: str | None = None) -> pd.DataFrame:
    """Aggregate a node-keyed table per module.

    Args:
        frame: one row per node (a ``key`` column of node ids of ``model``).
        agg: output column -> pandas aggregation of the column of that name, or (column,
            aggregation) (``{"total_ms": "sum", "min_cosine": ("cosine", "min")}``).
        depth: module levels to keep (None: the deepest module of each node).
        sort: column to sort by, descending (None: by first appearance in the model).

    Returns:
        Columns ``module`` ('' = the root module, '?' = nodes of unknown source),
        ``module_class``, ``n_nodes``, ``first_topo`` (the module's first node in model
        order), then the aggregated columns.
    """
    mods = module_at(model, depth)
    smap = source_map(model)
    topo = {nid: e.topo for nid, e in model.index.entries.items()}
    classes: dict[str, str | None] = {}
    for nid, s in smap.items():
        m = mods[nid]
        if s is None or m is None or m in classes:
            continue
        i = s.path.index(m) if m in s.path else -1
        part = s.parts[0]
        classes[m] = (part.classes[i] if 0 <= i < len(part.classes) else None) if m \
            else part.root_class
    df = frame.copy()
    module = df[key].map(lambda n: mods.get(n))
    df["module"] = module.where(module.notna(), "?").astype(str)
    df["_topo"] = df[key].map(lambda n: topo.get(n, len(topo)))
    g = df.groupby("module", sort=False)
    spec = {name: f if isinstance(f, tuple) else (name, f) for name, f in agg.items()}
    out = g.agg(**spec) if spec else pd.DataFrame(index=g.size().index)
    out.insert(0, "first_topo", g["_topo"].min())
    out.insert(0, "n_nodes", g.size())
    out = out.reset_index()
    out.insert(1, "module_class", out["module"].map(lambda m: classes.get(m)))
    if sort is not None:
        out = out.sort_values(sort, ascending=False, na_position="last", kind="stable")
    else:
        out = out.sort_values("first_topo", kind="stable")
    return out.reset_index(drop=True)


def source_share(model: LabModel) -> float | None:
    """The share of nodes with a known source (None for a model without nodes)."""
    smap = source_map(model)
    return sum(1 for s in smap.values() if s is not None) / len(smap) if smap else None


# ------------------------------------------------------------------- carrying through steps
def _write(node: ir.Node, parts: Sequence[Source], traces: Sequence[str], name: str) -> None:
    """Write merged ``parts`` on ``node`` under the standard keys and ``onnx_lab.sources``."""
    md = node.metadata_props
    common = _common([p.path for p in parts])
    first = parts[0]
    classes = list(first.classes[:len(common)])
    op = f"{node.domain + '.' if node.domain else ''}{node.op_type}"
    md[SCOPES_KEY] = repr(["", *common, name])
    md[CLASSES_KEY] = repr([first.root_class or "", *[c or "" for c in classes], op])
    levels = [f"{q}: {c or ''}" for q, c in zip(common, classes)]
    md[NAMESPACE_KEY] = "/".join([f": {first.root_class or ''}", *levels, f"{name}: {op}"])
    if traces:
        md[STACK_KEY] = "\n".join(traces)
    elif STACK_KEY in md:
        del md[STACK_KEY]
    if len(parts) > 1:
        md[SOURCES_KEY] = json.dumps([p.to_json() for p in parts])
    else:
        md.pop(SOURCES_KEY, None)


def _name_stem(name: str | None, names: Mapping[str, str]) -> str | None:
    """The node of ``names`` that ``name`` extends with ``_suffix`` (``X_new_reshape`` ->
    ``X``), None when there is none; a numbered ``X_1`` is a name of its own."""
    k = (name or "").rfind("_")
    while k > 0:
        hit = names.get(name[:k])  # type: ignore[index]
        if hit is not None and not name[k + 1:].isdigit():  # type: ignore[index]
            return hit
        k = name.rfind("_", 0, k)  # type: ignore[union-attr]
    return None


def _constant_origin(model: LabModel, node_id: str) -> bool:
    """Whether the original node ``node_id`` of ``model`` is a Constant."""
    e = model.index.entries.get(node_id)
    return e is not None and e.node.op_type == "Constant" and e.node.domain in ("", "ai.onnx")


def carry_sources(before: LabModel, after: LabModel) -> int:
    """Give each node of ``after`` the merged source of the original nodes it stands for.

    The nodes of a step's result carry ``onnx_lab.origin`` (the original node ids they come
    from); ``before`` (the step's input) says which source each original node had. A node
    whose sources differ from those (a fused node with none, a Conv that kept its own when it
    absorbed a BatchNormalization) gets the merged ones written under the standard keys.
    Only metadata sources are carried: inferred ones are read from the origins anyway.

    Returns:
        How many nodes were (re)written.
    """
    by_origin: dict[str, list[Source]] = {}
    traces_of: dict[str, list[str]] = {}
    for nid, s in source_map(before).items():
        if s is None or s.kind != "metadata":
            continue
        node = before.index.entries[nid].node
        trace = node.metadata_props.get(STACK_KEY)
        for o in node_origin(node, nid):
            have = by_origin.setdefault(o, [])
            have.extend(p for p in s.parts if p not in have)
            if trace and trace not in traces_of.setdefault(o, []):
                traces_of[o].append(trace)
    if not by_origin:
        return 0
    idx = after.index
    helpers: set[str] = set()  # nodes the step made that no origin explains
    before_names = {e.node.name: nid for nid, e in before.index.entries.items() if e.node.name}
    merged: dict[str, tuple[list[Source], list[str]]] = {}
    # Original nodes that several nodes of the result stand for: a shape computation both
    # layers read, computed once (the dynamo exporter's common-subexpression elimination
    # stamps it with the first layer), taken in by the fused Attention of each layer.
    seen: set[str] = set()
    shared: set[str] = set()
    for nid, e in idx.entries.items():
        for o in set(node_origin(e.node, nid)):
            (shared if o in seen else seen).add(o)
    # Consumers first: a node no origin explains (a tool's helper, such as the nodes
    # onnxoptimizer adds to compute a fused Conv's weights) takes the sources of the nodes
    # that read it, when all of them have one.
    for nid in reversed(list(idx.entries)):
        e = idx.entries[nid]
        parts: list[Source] = []
        traces: list[str] = []
        origin = node_origin(e.node, nid)
        unknown = origin == [] or origin == [nid] and nid not in before.index.entries
        if unknown:
            # Unknown to provenance: a helper named after the node it serves (onnxruntime's
            # "<name>_new_reshape"). Only its source is taken, never its provenance.
            stem = _name_stem(e.node.name, before_names)
            origin = node_origin(before.index.entries[stem].node, stem) if stem else origin
        # A Constant a fusion took in (a '/4.0' both layers read, stamped with the first
        # layer) says nothing of where the computation comes from: with other origins it is
        # left out (layer 1's FusedMatMul was widened to the root, 'layers.0' and 'layers.1').
        # An original node shared with other nodes of the result says as little (layer 1's
        # Attention was widened to 'encoder', naming layer 0): with others, left out too.
        computing = [o for o in origin if not _constant_origin(before, o)]
        own = [o for o in computing if o not in shared]
        for o in own or computing or origin:
            parts.extend(p for p in by_origin.get(o, ()) if p not in parts)
            traces.extend(t for t in traces_of.get(o, ()) if t not in traces)
        if unknown and not parts and not _from_metadata(e.node.metadata_props):
            # Only nodes the step made: a node that had no source before keeps none.
            helpers.add(nid)
            readers = [c for v in e.node.outputs for c in idx.consumers.get(v.name, ())]
            if readers and all(c in merged for c in readers) and \
                    not any(v.is_graph_output() for v in e.node.outputs):
                for c in readers:
                    parts.extend(p for p in merged[c][0] if p not in parts)
                    traces.extend(t for t in merged[c][1] if t not in traces)
        if parts:
            merged[nid] = (parts, traces)
    # Then producers first: a helper that writes a graph output (the Cast of an fp16
    # conversion) takes the sources of the nodes feeding it.
    for nid, e in idx.entries.items():
        if nid in merged or nid not in helpers:
            continue
        feeders = [idx.producer[v.name] for v in e.node.inputs
                   if v is not None and v.name in idx.producer]
        if feeders and all(f in merged for f in feeders):
            parts, traces = [], []
            for f in feeders:
                parts.extend(p for p in merged[f][0] if p not in parts)
                traces.extend(t for t in merged[f][1] if t not in traces)
            merged[nid] = (parts, traces)
    written = 0
    for nid, (parts, traces) in merged.items():
        node = idx.entries[nid].node
        if _from_metadata(node.metadata_props) == parts:
            continue
        _write(node, parts, traces, node.name or nid)
        written += 1
    if written:
        for key in (("source_map",), ("module_scopes",), ("table", "source_table"),
                    ("table", "nodes_table", (), ())):  # analysis.tables' key of lab.nodes
            after.forget(key)
    return written
