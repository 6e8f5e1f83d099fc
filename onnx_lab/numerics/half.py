"""float16 / bfloat16 conversion, correct by construction: what the ONNX op schemas say must
share a type is converted together or kept together.

Two steps:

1. :class:`HalfRules` (once per model): for every node, its schema's type constraints
   (``onnx.defs.get_schema``) group its inputs and outputs. A group whose tensors are float32
   and whose constraint allows the narrow type is *convertible*: a converted node converts each
   such group as a whole (``Range`` start/limit/delta, ``Where`` branches, every ``Concat`` /
   ``Max`` / ``Sum`` input, both sides of ``Equal``/``Less``, ``Pad``'s constant value,
   ``Clip``'s bounds, ``Expand``'s data...), and every other group keeps its types (``Resize``
   scales, shape and index inputs). A group that binds a single input and no output (the
   input of ``Shape``, ``Cast``, ``ArgMax``) reads whichever precision its producer gives.
   *Index computations* stay in their types: the small float tensors that feed ``Range``,
   ``Resize`` roi/scales and Casts to integers, and the nodes that compute them (YOLOv8's
   anchor grid, ``Resize`` scales from ``Shape``). Nodes without an ONNX schema (custom
   domains, functions), control flow (If/Loop/Scan: their bodies are converted, their
   inputs and outputs keep their types) and a short block list (:data:`BLOCKED_OPS`) run in
   float32. The nodes left with a convertible group are the *candidates*.
2. :func:`convert_half` (per kept set): converted candidates get the narrow type, Casts go
   where a tensor's type differs from what its reader needs (one Cast per tensor and type,
   shared by every reader), placed in the graph that *defines* the tensor, right after it is
   available: a body of If/Loop/Scan that reads an outer-scope weight reads a Cast that
   lives in the outer graph, which every branch sees (Silero VAD's STFT basis). Float
   weights read in the narrow type get a narrow copy (the float32 original goes when no
   reader needs it). Body inputs and outputs keep their declared types; the main graph's
   too unless ``keep_io_types=False``. Converted tensors keep their names (so
   :func:`onnx_lab.compare` aligns them with the original); a graph output computed in the
   narrow type is produced as ``{name}__fp16`` and cast back to ``name``.

:func:`check_converted` runs onnx's checker (full type inference) on the result and raises
:class:`ConversionBug` naming the node: a converted model that does not type-check is a bug
of this module, never the user's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_lab.core._proto import graph_protos
from onnx_lab.core.handoff import proto_with_weights
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import guard_label_encoders, has_long_dims
from onnx_lab.errors import ConversionBug

__all__ = ["HalfRules", "convert_half", "half_proto", "check_converted", "passes_checker",
           "ConversionBug", "BLOCKED_OPS", "to_fp16_array", "to_bf16_bits", "bf16_round",
           "emulate_bf16"]

FLOAT, FLOAT16, BFLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16

#: Ops that always run in float32: their float inputs size their output (``Range``), their
#: result is an index set or accumulates (``TopK``, ``CumSum``, ``NonMaxSuppression``,
#: ``RoiAlign``'s box coordinates), or they draw random numbers.
BLOCKED_OPS = frozenset({"Range", "CumSum", "TopK", "NonMaxSuppression", "RoiAlign",
                         "RandomUniformLike", "RandomNormalLike", "RandomUniform",
                         "RandomNormal", "Multinomial", "Bernoulli"})

#: Inputs whose float values size or index the result: (op type, input positions).
_INDEX_INPUTS = {"Range": (0, 1, 2), "Resize": (1, 2), "Upsample": (1,), "RoiAlign": (1,)}
#: A float tensor of at most this many elements that feeds an index input is an index
#: computation (shape arithmetic works on scalars and short vectors).
_SMALL = 64
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
_NAMES = {FLOAT16: "fp16", BFLOAT16: "bf16", FLOAT: "fp32"}
_TYPE_STR = {FLOAT16: "tensor(float16)", BFLOAT16: "tensor(bfloat16)"}


def to_fp16_array(a: np.ndarray, lo: float = 5.96e-08, hi: float = 65504.0) -> np.ndarray:
    """float32 to float16 exactly as onnxruntime's ``float16.convert_np_to_float16`` does
    (non-zero finite magnitudes clamped into [lo, hi]; 0, inf and NaN unchanged) in fewer
    passes (the test suite checks the two agree bit for bit)."""
    shape = np.shape(a)
    a = np.ascontiguousarray(a, dtype=np.float32)  # at least 1-d
    with np.errstate(over="ignore"):  # beyond 65504: inf here, clamped below
        out = a.astype(np.float16)
    mag = np.abs(a)
    odd = np.flatnonzero((mag < lo) | (mag > hi))  # zeros and infinities too: sorted below
    if odd.size:
        v, m = a.reshape(-1)[odd], mag.reshape(-1)[odd]
        flat = out.reshape(-1)
        for mask, bound in (((m < lo) & (m > 0), lo), ((m > hi) & (m < np.inf), hi)):
            flat[odd[mask]] = np.copysign(np.float32(bound), v[mask]).astype(np.float16)
    return out.reshape(shape)


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even): the uint16 bit patterns
    (NaN and inf keep theirs)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    r = np.where(np.isfinite(a), r, u >> 16)
    return r.astype(np.uint16).reshape(np.shape(a))


def narrow_tensor(t: TensorProto, to: int, name: str) -> TensorProto:
    """A float32 TensorProto (with its data) as ``to`` (FLOAT16 or BFLOAT16)."""
    a = numpy_helper.to_array(t).astype(np.float32)
    if to == FLOAT16:
        return numpy_helper.from_array(to_fp16_array(a), name)
    out = TensorProto(name=name, data_type=BFLOAT16, dims=list(a.shape))
    out.raw_data = to_bf16_bits(a).tobytes()
    return out


# ---------------------------------------------------------------------------- the rules
@dataclass
class NodeRule:
    """How one node converts.

    ``groups``: the convertible groups, each a pair (input positions, output positions).
    ``fixed_in``: float32 input positions that always read float32 (a group that is not
    convertible). ``special``: ``Cast``, ``Constant`` or ``ConstantOfShape`` (their output type
    is an attribute).
    """

    groups: list[tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    fixed_in: tuple[int, ...] = ()
    #: float32 inputs of a type parameter of their own (``Pow``'s exponent, ``Shape``'s
    #: input): a converted node reads them narrow too (onnxruntime's fusions expect one type
    #: across a decomposed LayerNorm), a float32 node reads whichever type there is.
    flex: tuple[int, ...] = ()
    special: str | None = None
    why: str = ""  # why a node is not a candidate ("" for candidates)


class HalfRules:
    """The conversion rules of one model for one narrow type (``FLOAT16`` or ``BFLOAT16``):
    :attr:`rules` (node id -> :class:`NodeRule`), :attr:`candidates` (node ids a plan can keep
    or convert) and :attr:`index_values` (float tensors of index computations)."""

    def __init__(self, model: LabModel, to: int = FLOAT16) -> None:
        self.model = model
        self.to = to
        idx = model.index
        #: The model's types; a name that sibling If branches both define (optimum's merged
        #: decoders) is read per graph (``TypeTable.at``).
        self._table = model.types()
        opsets = dict(model.ir.opset_imports)
        self.index_values = self._index_values()
        self.rules: dict[str, NodeRule] = {}
        for nid, e in idx.entries.items():
            self.rules[nid] = self._rule(e.node, opsets, e.graph)
        self.candidates = [nid for nid, r in self.rules.items() if r.groups]

    # -- helpers ----------------------------------------------------------------------------
    def _info(self, name: str, path: str) -> tuple[str | None, tuple | None]:
        """dtype and shape of ``name`` as read in the graph at ``path``."""
        info = self._table.at(name, path)
        return (info.dtype, info.shape) if info is not None else (None, None)

    def dtype(self, name: str, path: str = "") -> str | None:
        """The dtype name of ``name`` as read in the graph at ``path`` (``""``: main)."""
        return self._info(name, path)[0]

    def is_float(self, name: str | None, path: str = "") -> bool:
        return bool(name) and self.dtype(name, path) == "float32"

    def _producer(self, name: str, path: str) -> str | None:
        """The node id defining ``name`` as read in the graph at ``path``."""
        return self.model.index.producer_in(name, path)

    def _small(self, name: str, path: str = "") -> bool:
        shape = self._info(name, path)[1]
        if shape is None or any(not isinstance(d, int) for d in shape):
            return False
        return int(np.prod(shape, dtype=np.int64)) <= _SMALL

    def _index_values(self) -> set[str]:
        """Float tensors of index computations: small float tensors read by index inputs
        (:data:`_INDEX_INPUTS`) or cast to an integer type, and the small float inputs of the
        nodes that compute them, transitively."""
        idx = self.model.index
        seeds: list[str] = []
        for e in idx.entries.values():
            n = e.node
            if n.domain not in ("", "ai.onnx"):
                continue
            names = [v.name if v is not None else "" for v in n.inputs]
            pos: Iterable[int] = _INDEX_INPUTS.get(n.op_type, ())
            if n.op_type == "Cast":
                to = n.attributes.get("to")
                if to is not None and to.value not in (FLOAT, FLOAT16, BFLOAT16,
                                                      TensorProto.DOUBLE):
                    pos = (0,)
            seeds.extend((names[i], e.graph) for i in pos
                         if i < len(names) and self.is_float(names[i], e.graph))
        out: set[str] = set()
        seen: set[tuple[str, str]] = set()
        stack = [s for s in seeds if self._small(*s)]
        while stack:
            t, path = stack.pop()
            if (t, path) in seen:
                continue
            seen.add((t, path))
            out.add(t)
            p = self._producer(t, path)
            if p is None:
                continue
            pe = idx.entries[p]
            for v in pe.node.inputs:
                if v is not None and self.is_float(v.name, pe.graph) \
                        and self._small(v.name, pe.graph):
                    stack.append((v.name, pe.graph))
        return out

    def _rule(self, node, opsets: Mapping[str, int], path: str = "") -> NodeRule:
        ins = [v.name if v is not None else "" for v in node.inputs]
        outs = [v.name if v is not None else "" for v in node.outputs]

        def is_float(name: str) -> bool:
            return self.is_float(name, path)

        float_in = tuple(i for i, n in enumerate(ins) if is_float(n))

        def keep(why: str) -> NodeRule:
            return NodeRule(fixed_in=float_in, why=why)

        if node.domain not in ("", "ai.onnx"):
            return keep(f"domain {node.domain!r} has no ONNX schema")
        if node.op_type in _CONTROL_FLOW or any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                for a in node.attributes.values()):
            return keep("control flow (its bodies are converted)")
        if node.op_type in BLOCKED_OPS:
            return keep("blocked op (index or accumulating computation)")
        if any(n in self.index_values for n in outs if n):
            return keep("index computation")
        try:
            schema = onnx.defs.get_schema(node.op_type, opsets.get("", opsets.get("ai.onnx", 1)),
                                          "")
        except onnx.defs.SchemaError:
            return keep("no ONNX schema")
        if node.op_type in ("Cast", "Constant", "ConstantOfShape"):
            # The output type is an attribute: retyped when the opset allows the narrow type.
            out_param = schema.outputs[0].type_str
            allowed = next((c.allowed_type_strs for c in schema.type_constraints
                            if c.type_param_str == out_param), ())
            if len(outs) == 1 and is_float(outs[0]) and _TYPE_STR[self.to] in allowed \
                    and outs[0] not in self.index_values:
                return NodeRule(groups=[((), (0,))], special=node.op_type)
            return NodeRule(why=f"no float32 output it could retype at opset {schema.since_version}")
        if schema.has_function and not schema.type_constraints:
            return keep("no type constraints")
        constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
        if any(not t.startswith("tensor(") for allowed in constraints.values() for t in allowed):
            return keep("sequence or optional types")
        bound_in = _bind(schema.inputs, len(ins))
        bound_out = _bind(schema.outputs, len(outs))
        if bound_in is None or bound_out is None:
            return keep("inputs do not fit its schema")
        params: dict[str, tuple[list[int], list[int]]] = {}
        for i, f in enumerate(bound_in):
            if ins[i]:
                params.setdefault(f, ([], []))[0].append(i)
        for i, f in enumerate(bound_out):
            if outs[i]:
                params.setdefault(f, ([], []))[1].append(i)
        groups: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        fixed: list[int] = []
        flex: list[int] = []
        for f, (gi, go) in params.items():
            names = [ins[i] for i in gi] + [outs[i] for i in go]
            if not any(is_float(n) for n in names):
                continue
            flexible = not go and len(gi) == 1
            allowed = _TYPE_STR[self.to] in constraints.get(f, ())
            if flexible and allowed:
                if is_float(ins[gi[0]]) and ins[gi[0]] not in self.index_values:
                    flex.append(gi[0])
                continue  # reads either precision
            ok = (f in constraints and allowed and bool(gi) and all(is_float(n)
                  for n in names) and not any(n in self.index_values for n in names))
            if ok:
                groups.append((tuple(gi), tuple(go)))
            else:
                fixed.extend(i for i in gi if is_float(ins[i]))
        why = "" if groups else "no float32 computation it could convert"
        return NodeRule(groups=groups, fixed_in=tuple(sorted(fixed)), flex=tuple(flex), why=why)


def _bind(formals, n: int) -> list[str] | None:
    """The type string of each of ``n`` actual inputs (or outputs) by the schema's formal
    parameters; None when they do not fit (a heterogeneous variadic, too many actuals)."""
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    out = []
    for i in range(n):
        if i < len(formals):
            f = formals[i]
        elif formals and formals[-1].option == variadic:
            f = formals[-1]
        else:
            return None
        if f.option == variadic and not f.is_homogeneous:
            return None
        out.append(f.type_str)
    return out


# ---------------------------------------------------------------------------- conversion
@dataclass
class _Entry:
    """A value visible in a scope: its versions by element type (the name of each)."""

    scope: _Scope
    primary: int | None
    versions: dict[int, str]
    init: TensorProto | None = None


@dataclass
class _Scope:
    graph: onnx.GraphProto
    parent: _Scope | None
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    entries: dict[str, _Entry] = field(default_factory=dict)
    number: int = 0  # the graph's position in graph_protos order

    def find(self, name: str) -> _Entry | None:
        s: _Scope | None = self
        while s is not None:
            if name in s.entries:
                return s.entries[name]
            s = s.parent
        return None


class _Writer:
    """One conversion: walks the graphs in order (bodies inside their owner's turn), keeps each
    visible value's versions by type, and writes the Casts and narrow weight copies where the
    value is defined."""

    def __init__(self, proto: onnx.ModelProto, rules: HalfRules, convert: Callable[[str], bool],
                 keep_io_types: bool, external: Callable[[TensorProto], bool]) -> None:
        self.proto = proto
        self.rules = rules
        self.to = rules.to
        self.convert = convert
        self.keep_io_types = keep_io_types
        self.external = external
        self.taken = all_names(proto.graph)
        #: (graph number, name) of the values retyped in that graph (a name may be defined
        #: in sibling branches with different types); graphs are numbered in
        #: :func:`graph_protos` order, the order :meth:`graph` visits them.
        self.retyped: set[tuple[int, str]] = set()
        self._graphs_seen = 0
        #: new initializer name -> (source initializer name, type): arrays to fill in.
        self.fill: dict[str, tuple[str, int]] = {}
        #: narrow copy of a weight -> the weight's name
        self.copies: dict[str, str] = {}
        self._like_name: str | None = None
        self.opset = next((o.version for o in proto.opset_import
                           if o.domain in ("", "ai.onnx")), 1)

    def unique(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name

    def version(self, e: _Entry, to: int) -> str:
        """The name of ``e`` as element type ``to`` (a Cast or a converted weight made once,
        where ``e`` is defined)."""
        if to in e.versions:
            return e.versions[to]
        src = e.versions[e.primary]
        name = self.unique(f"{src}__{_NAMES[to]}")
        if e.init is not None and e.primary == FLOAT:
            t = e.init
            self.copies[name] = t.name
            if self.external(t):
                stub = TensorProto(name=name, data_type=to, dims=list(t.dims))
                stub.data_location = t.data_location
                stub.external_data.extend(t.external_data)
                self.fill[name] = (self._source(t.name), to)
                e.scope.graph.initializer.append(stub)
            else:
                e.scope.graph.initializer.append(narrow_tensor(t, to, name))
        elif to == self.to and self._fusion_safe_cast(src):
            # onnxruntime's LayerNormFusion takes a Cast before a decomposed LayerNorm's
            # ReduceMean for a float16->float32 one and fuses it away whatever its direction,
            # leaving float32 data beside float16 scale and bias (a load failure with the
            # default optimizations, onnxruntime's own converter included): a CastLike
            # computes the same and is not matched.
            e.scope.nodes.append(helper.make_node("CastLike", [src, self._like()], [name],
                                                  name=self.unique(f"{name}/CastLike")))
        else:
            e.scope.nodes.append(helper.make_node("Cast", [src], [name], to=to,
                                                  name=self.unique(f"{name}/Cast")))
        e.versions[to] = name
        return name

    def _fusion_safe_cast(self, src: str) -> bool:
        idx = self.rules.model.index
        if self.opset < 15:
            return False
        return any(idx.entries[c].node.op_type == "ReduceMean"
                   for c in idx.consumers.get(src, ()))

    def _like(self) -> str:
        if self._like_name is None:
            self._like_name = self.unique(f"__onnx_lab_like_{_NAMES[self.to]}")
            t = narrow_tensor(numpy_helper.from_array(np.zeros((), np.float32)), self.to,
                              self._like_name)
            self.proto.graph.initializer.append(t)
        return self._like_name

    def _source(self, name: str) -> str:
        return self.fill[name][0] if name in self.fill else name

    def graph(self, g: onnx.GraphProto, parent: _Scope | None, top: bool) -> None:
        s = _Scope(g, parent)
        s.number, self._graphs_seen = self._graphs_seen, self._graphs_seen + 1
        narrow_io = top and not self.keep_io_types
        inputs = {i.name for i in g.input}
        # IR < 4 lists every initializer as an input too: its declared type is its data's
        inits = {t.name for t in g.initializer}
        for vi in g.input:
            tt = vi.type.tensor_type
            t = tt.elem_type if vi.type.HasField("tensor_type") else None
            if narrow_io and t == FLOAT and vi.name not in inits:
                tt.elem_type = self.to
                t = self.to
            s.entries[vi.name] = _Entry(s, t, {t: vi.name} if t is not None else {})
        for init in g.initializer:
            if init.name in inputs:
                continue
            s.entries[init.name] = _Entry(s, init.data_type, {init.data_type: init.name}, init)
        outputs = {o.name: o for o in g.output}
        for n in g.node:
            self.node(n, s, outputs, narrow_io)
        # Body outputs that are not computed here (outer values, body inputs) keep their
        # declared type through an Identity of the right version.
        for o in [] if top else g.output:
            want = o.type.tensor_type.elem_type if o.type.HasField("tensor_type") else None
            e = s.find(o.name)
            if e is None or want not in (FLOAT, self.to) or e.primary not in (FLOAT, self.to) \
                    or e.versions.get(want) == o.name:
                continue
            src = self.version(e, want)
            new = self.unique(f"{o.name}__out")
            s.nodes.append(helper.make_node("Identity", [src], [new], name=f"{new}/Identity"))
            o.name = new
        del g.node[:]
        g.node.extend(s.nodes)

    def node(self, n: onnx.NodeProto, s: _Scope, outputs: Mapping[str, onnx.ValueInfoProto],
             narrow_io: bool) -> None:
        rule = self.rules.rules.get(n.name)
        conv = rule is not None and bool(rule.groups) and self.convert(n.name)
        want: dict[int, int] = {}
        out_type: dict[int, int] = {}
        if rule is not None:
            for i in rule.fixed_in:
                want[i] = FLOAT
            for gi, go in rule.groups:
                for i in gi:
                    want[i] = self.to if conv else FLOAT
                for i in go:
                    out_type[i] = self.to if conv else FLOAT
            if conv:
                for i in rule.flex:
                    want[i] = self.to
        for i, name in enumerate(n.input):
            if not name:
                continue
            e = s.find(name)
            if e is None:
                continue
            if i in want and e.primary in (FLOAT, self.to) and e.primary != want[i]:
                n.input[i] = self.version(e, want[i])
        if conv and rule.special:
            self._retype_special(n, rule.special)
        # Bodies see this scope (and the Casts placed in it before this node).
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                self.graph(a.g, s, False)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for b in a.graphs:
                    self.graph(b, s, False)
        s.nodes.append(n)
        for i, name in enumerate(n.output):
            if not name:
                continue
            t = out_type.get(i)
            if t is None:
                t = self._declared(name, n.name)
            if t == self.to and name in outputs and not narrow_io \
                    and outputs[name].type.tensor_type.elem_type != self.to:
                # A graph output keeps its float32 type: computed as name__fp16, cast back
                # (one already declared in that type, a torch .half() export's, stays).
                raw = self.unique(f"{name}__{_NAMES[self.to]}")
                n.output[i] = raw
                s.nodes.append(helper.make_node("Cast", [raw], [name], to=FLOAT,
                                                name=self.unique(f"{name}/Cast")))
                s.entries[name] = _Entry(s, FLOAT, {FLOAT: name, self.to: raw})
                continue
            if t == self.to:
                self.retyped.add((s.number, name))
                if name in outputs:
                    outputs[name].type.tensor_type.elem_type = self.to
            s.entries[name] = _Entry(s, t, {t: name} if t is not None else {})

    def _declared(self, name: str, node: str = "") -> int | None:
        """The element type of ``name``, an output of the node with id ``node``."""
        e = self.rules.model.index.entries.get(node)
        dt = self.rules.dtype(name, e.graph if e is not None else "")
        return _ELEM.get(dt) if dt is not None else None

    def _retype_special(self, n: onnx.NodeProto, op: str) -> None:
        if op == "Cast":
            for a in n.attribute:
                if a.name == "to":
                    a.i = self.to
            return
        attrs = {a.name: a for a in n.attribute}
        if op == "ConstantOfShape":
            if "value" in attrs:
                attrs["value"].t.CopyFrom(narrow_tensor(attrs["value"].t, self.to,
                                                        attrs["value"].t.name))
            else:
                n.attribute.append(helper.make_attribute(
                    "value", narrow_tensor(numpy_helper.from_array(np.zeros(1, np.float32)),
                                           self.to, "")))
            return
        if "value" in attrs:  # Constant
            attrs["value"].t.CopyFrom(narrow_tensor(attrs["value"].t, self.to,
                                                    attrs["value"].t.name))
            return
        for key in ("value_float", "value_floats"):
            if key in attrs:
                a = attrs[key]
                arr = np.array(a.f if key == "value_float" else list(a.floats), np.float32)
                n.attribute.remove(a)
                n.attribute.append(helper.make_attribute(
                    "value", narrow_tensor(numpy_helper.from_array(arr), self.to, "")))

    def finish(self) -> None:
        """A float32 weight no reader needs any more gives its name to its narrow copy."""
        used: set[str] = set()
        graphs = list(graph_protos(self.proto.graph))
        for g in graphs:
            for n in g.node:
                used.update(n.input)
            used.update(o.name for o in g.output)
        for k, g in enumerate(graphs):
            inputs = {i.name for i in g.input}
            names = {t.name: t for t in g.initializer}
            copy_of = {src: c for c, src in self.copies.items() if c in names}
            renames: dict[str, str] = {}
            drop = []
            for t in g.initializer:
                if t.name in used or t.name in inputs or t.name not in copy_of:
                    continue
                drop.append(t)
                renames[copy_of[t.name]] = t.name
            for t in drop:
                g.initializer.remove(t)
            for old, new in renames.items():
                names[old].name = new
                if old in self.fill:
                    self.fill[new] = self.fill.pop(old)
                self.retyped.add((k, new))
            if renames:
                for sub in graph_protos(g):
                    for n in sub.node:
                        for i, name in enumerate(n.input):
                            if name in renames:
                                n.input[i] = renames[name]
        # Each graph's parent (by number) and the names it defines.
        parent: dict[int, int] = {}
        defined: list[set[str]] = []

        def visit(g: onnx.GraphProto, up: int | None) -> None:
            k = len(defined)
            if up is not None:
                parent[k] = up
            defined.append({o for n in g.node for o in n.output} | {i.name for i in g.input}
                           | {t.name for t in g.initializer})
            for n in g.node:
                for a in n.attribute:
                    if a.type == onnx.AttributeProto.GRAPH:
                        visit(a.g, k)
                    elif a.type == onnx.AttributeProto.GRAPHS:
                        for b in a.graphs:
                            visit(b, k)

        visit(self.proto.graph, None)

        def retyped(k: int | None, name: str) -> bool:
            # The value read in graph k: k's own definition, else the nearest outer one.
            while k is not None:
                if (k, name) in self.retyped:
                    return True
                if name in defined[k]:
                    return False
                k = parent.get(k)
            return False

        for k, g in enumerate(graphs):
            for vi in g.value_info:
                if vi.type.HasField("tensor_type") and retyped(k, vi.name):
                    vi.type.tensor_type.elem_type = self.to


_ELEM = {"float32": FLOAT, "float16": FLOAT16, "bfloat16": BFLOAT16, "float64": TensorProto.DOUBLE}


def all_names(g: onnx.GraphProto) -> set[str]:
    """Every value and node name of ``g`` and its bodies (new names must avoid them all)."""
    out: set[str] = set()
    for sub in graph_protos(g):
        out.update(i.name for i in sub.input)
        out.update(t.name for t in sub.initializer)
        for n in sub.node:
            out.update(n.output)
            out.update(n.input)
            out.add(n.name)
    return out


def _in_file(t: TensorProto) -> bool:
    """The default ``external``: an initializer whose data lives in an external file."""
    return t.data_location == TensorProto.EXTERNAL


def convert_half(proto: onnx.ModelProto, rules: HalfRules, kept: Iterable[str] = (), *,
                 keep_io_types: bool = True,
                 external: Callable[[TensorProto], bool] | None = None
                 ) -> tuple[onnx.ModelProto, dict[str, tuple[str, int]]]:
    """``proto`` (the model of ``rules``, node names = node ids; changed in place) with every
    candidate not in ``kept`` converted to the narrow type.

    ``external(t)``: whether an initializer's data is not in the proto (a placeholder for an
    in-memory array): its narrow copy is a placeholder too, listed in the returned dict (new
    name -> (source initializer, element type)) for the caller to fill.

    Returns:
        (the converted proto, the placeholders to fill).
    """
    kept = set(kept)
    cands = set(rules.candidates)
    w = _Writer(proto, rules, lambda nid: nid in cands and nid not in kept, keep_io_types,
                external or _in_file)
    w.graph(proto.graph, None, True)
    w.finish()
    return proto, w.fill


_NODE_IN_MSG = re.compile(r"node name: ([^)]*)\)|[Nn]ode \(([^)]*)\)")


def _checkable(proto: onnx.ModelProto, external: Callable[[TensorProto], bool] | None
               ) -> onnx.ModelProto:
    """``proto`` with its placeholder initializers (``external``) as typed inputs of the same
    shape, for the checker (which would look for their files)."""
    if external is None or not any(external(t) for t in proto.graph.initializer):
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    g = copy.graph
    for t in [t for t in g.initializer if external(t)]:
        g.initializer.remove(t)
        g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return copy


def passes_checker(proto: onnx.ModelProto,
                   external: Callable[[TensorProto], bool] | None = None) -> bool:
    """Whether onnx's checker (full type inference) accepts ``proto``: a model it already
    rejects before conversion (a missing output shape field...) is checked by onnxruntime's
    load alone."""
    try:
        checkable = _checkable(proto, external)
        guard_label_encoders(checkable)  # onnx's inference would end the process on some
        onnx.checker.check_model(checkable, full_check=True)
    except Exception:  # noqa: BLE001 - the checker raises several types
        return False
    return True


def check_converted(proto: onnx.ModelProto, what: str = "float16 conversion",
                    external: Callable[[TensorProto], bool] | None = None) -> None:
    """onnx's checker with full type inference on a converted model; :class:`ConversionBug`
    naming the node when it fails. ``external(t)``: initializers whose data is not in the
    proto (in-memory placeholders): checked as typed inputs of the same shape. Call it on
    models whose original :func:`passes_checker`."""
    try:
        checkable = _checkable(proto, external)
        guard_label_encoders(checkable)  # onnx's inference would end the process on some
        onnx.checker.check_model(checkable, full_check=True)
    except Exception as e:  # noqa: BLE001 - the checker raises several types
        raise conversion_bug(what, e) from e


def conversion_bug(what: str, e: Exception) -> ConversionBug:
    msg = str(e).strip().splitlines()
    text = " ".join(msg)[:500] if msg else type(e).__name__
    m = _NODE_IN_MSG.search(text)
    node = next((g for g in m.groups() if g), None) if m else None
    where = f" at node {node!r}" if node else ""
    return ConversionBug(
        f"internal error: the {what} wrote an invalid model{where}: {text}",
        fix="This is a bug in onnx_lab, not in your model: please report it with the model "
        "(or its structure). Meanwhile keep that node in float32 (keep=[...] / block_list).")


def full_proto(model: LabModel) -> onnx.ModelProto:
    """A ModelProto with every weight in memory (onnxruntime's tools and the whole-model
    conversion cannot read lazy references)."""
    return proto_with_weights(model, "the conversion", limit=False)


def rename_to_ids(graph: onnx.GraphProto, body, ids: Mapping[int, str]) -> None:
    """Set each proto node's name to its node id (``graph`` is the onnx_ir graph ``body``
    serialized: the same nodes in the same order, bodies included; ``ids``: ``id(ir node)`` ->
    node id)."""
    for node, p in zip(body, graph.node):
        nid = ids.get(id(node))
        if nid is not None and p.name != nid:
            p.name = nid
        for attr in p.attribute:
            a = node.attributes.get(attr.name)
            if a is None:
                continue
            if attr.type == onnx.AttributeProto.GRAPH:
                rename_to_ids(attr.g, a.value, ids)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g, b in zip(attr.graphs, a.value):
                    rename_to_ids(g, b, ids)


def node_ids(model: LabModel) -> dict[int, str]:
    """``id(ir node)`` -> node id, for :func:`rename_to_ids`."""
    return {id(e.node): nid for nid, e in model.index.entries.items()}


def half_proto(model: LabModel, kept: Iterable[str] = (), *, to: int = FLOAT16,
               keep_io_types: bool = True, rules: HalfRules | None = None,
               check: bool = True) -> onnx.ModelProto:
    """The whole model (weights in memory) converted to ``to`` with ``kept`` (node ids) in
    float32; node names are the node ids. Checked by :func:`check_converted` unless
    ``check=False``."""
    rules = rules or HalfRules(model, to)
    proto = full_proto(model)
    rename_to_ids(proto.graph, model.graph, node_ids(model))
    check = check and passes_checker(proto)
    out, _ = convert_half(proto, rules, kept, keep_io_types=keep_io_types,
                          external=lambda t: False)
    if check:
        check_converted(out, f"{_NAMES[to]} conversion")
    if has_long_dims(out):
        # a 200 KB dim name copied into every value_info took 1.6 GB: the Lab's own
        # inference (which aliases long dims) types the intermediates instead
        return out
    try:  # typed intermediates (a converted tensor's type reads float16 in every table)
        guard_label_encoders(out)  # onnx's inference would end the process on some
        out = onnx.shape_inference.infer_shapes(out)
    except Exception:  # noqa: BLE001 - inference is a courtesy here
        pass
    return out


# ---------------------------------------------------------------------------- bfloat16 emulation
def bf16_round(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    bits = to_bf16_bits(a).astype(np.uint32) << 16
    return bits.view(np.float32).reshape(np.shape(a))


def emulate_bf16(proto: onnx.ModelProto, rules: HalfRules, kept: Iterable[str] = (), *,
                 external: Callable[[TensorProto], bool] | None = None) -> onnx.ModelProto:
    """bf16 emulation: each converted node's convertible groups (the op schema's, see
    :class:`~onnx_lab.numerics.half.HalfRules`) take bfloat16 values: float weights rounded,
    inputs from float32 producers rounded, float outputs rounded (the tensor keeps its name).
    Index computations and fixed-type inputs (``Resize`` scales) are never rounded.

    Rounding is a ``Cast(bfloat16)→Cast(float)`` pair from opset 13 (where Cast takes
    bfloat16); before, Veltkamp's split in float32 arithmetic: ``c = x·(2^16+1)``,
    ``x' = c − (c − x)`` keeps x's 8 leading significant bits, bfloat16's (rounded to
    nearest; |x| beyond ~5e33 overflows there).

    ``proto``: the model of ``rules`` (node names = node ids; changed in place).
    ``external(t)``: whether an initializer's data is not in the proto (a placeholder for an
    in-memory array): such weights are rounded by their reader's input rounding instead.
    """
    kept = set(kept)
    external = external or _in_file
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
    split = "__onnx_lab_bf16_split"
    if opset < 13:
        proto.graph.initializer.append(numpy_helper.from_array(
            np.array(65537.0, np.float32), split))

    def rounding(src: str, dst: str, name: str) -> list[onnx.NodeProto]:
        if opset >= 13:
            b = unique(f"{dst}__bf16")
            return [helper.make_node("Cast", [src], [b], name=f"{name}/to_bf16", to=BFLOAT16),
                    helper.make_node("Cast", [b], [dst], name=f"{name}/to_fp32", to=FLOAT)]
        c, d = unique(f"{dst}__c"), unique(f"{dst}__d")
        return [helper.make_node("Mul", [src, split], [c], name=f"{name}/split_mul"),
                helper.make_node("Sub", [c, src], [d], name=f"{name}/split_sub"),
                helper.make_node("Sub", [c, d], [dst], name=f"{name}/split_hi")]

    taken = all_names(proto.graph)

    def unique(base: str) -> str:  # unique across every graph (bodies of If included)
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        return name

    cands = set(rules.candidates)
    converted_out: set[str] = set()
    for g in graph_protos(proto.graph):
        inits = {t.name: t for t in g.initializer}
        rounded: dict[str, str] = {}
        new_nodes = []
        for n in g.node:
            rule = rules.rules.get(n.name)
            convert = n.name in cands and n.name not in kept and rule is not None
            if convert:
                for gi, _ in rule.groups:
                    for i in gi:
                        name = n.input[i]
                        if name in rounded:
                            n.input[i] = rounded[name]
                            continue
                        t = inits.get(name)
                        if t is not None and t.data_type == FLOAT and not external(t):
                            rname = unique(f"{name}__bf16")
                            arr = bf16_round(numpy_helper.to_array(t))
                            g.initializer.append(numpy_helper.from_array(arr, rname))
                        elif name not in converted_out:
                            rname = unique(f"{name}__bf16r")
                            new_nodes.extend(rounding(name, rname, rname))
                        else:
                            continue
                        rounded[name] = rname
                        n.input[i] = rname
            new_nodes.append(n)
            if not convert:
                continue
            for _, go in rule.groups:
                for i in go:
                    name = n.output[i]
                    raw = unique(f"{name}__fp32")
                    n.output[i] = raw
                    new_nodes.extend(rounding(raw, name, f"{n.name}/bf16_{i}"))
                    converted_out.add(name)
        del g.node[:]
        g.node.extend(new_nodes)
    return proto
