"""Whole-model passes: a function turns the model into a new one, provenance is recovered.

Tools such as onnxsim, onnxoptimizer, onnxruntime's offline optimizer and the opset converter
rebuild the graph and do not say which new node replaced which old ones. Before calling the
tool every node is tagged with its id (node metadata, kept by tools that copy NodeProtos);
after it, each node is mapped back by that tag, else by its name, then extended with the old
nodes that produced its output tensors and the removed nodes feeding them (a fused
Conv+BatchNormalization+Relu keeps the Conv's name and the Relu's output name, so all three
are found). Nodes that cannot be traced get an empty origin (unknown) and a note.

A tool may also name its own **switches**: the rewrites it can be told to leave out
(onnxslim's fusion patterns, onnxoptimizer's passes, onnxruntime's optimizers). A
:class:`Switch` says which parameter turns it off; :meth:`WholeModelPass.switches` lists them
for a model and :meth:`WholeModelPass.params_without` gives the parameters of a run without
some of them. ``onnx_lab.culprit`` bisects over them when a tool's step fails verification.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab.core._meta import load_json
from onnx_lab.core.derived import with_derived
from onnx_lab.core.handoff import PROTO_LIMIT, proto_with_weights
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import resolve_dim, shape_tuple
from onnx_lab.core.source_map import carry_sources
from onnx_lab.errors import PassError
from onnx_lab.runtime.feeds import mask_over_past
from onnx_lab.transforms.base import (
    ORIGIN_KEY,
    LabPass,
    PassContext,
    PassResult,
    node_origin,
    stamp_origins,
)

__all__ = ["WholeModelPass", "Switch", "trace_provenance", "STEP_KEY", "PROTO_LIMIT"]

STEP_KEY = "onnx_lab.step_id"


@dataclass(frozen=True)
class Switch:
    """One rewrite a whole-model tool can be told to leave out.

    Attributes:
        name: the tool's own name for it (``FusionGelu``, ``fuse_bn_into_conv``,
            ``ConvBNFusion``).
        param: the pass parameter that turns it off (``skip_fusion_patterns``).
        value: None when ``param`` is a list the name is added to; else the value that turns
            it off (``skip_constant_folding=True``).
    """

    name: str
    param: str
    value: Any = None


def _signature(model: ir.Model) -> tuple:
    g = model.graph
    nodes = tuple((n.op_type, n.domain, tuple(v.name if v is not None else "" for v in n.inputs),
                   tuple(v.name for v in n.outputs),
                   tuple(sorted((k, str(a.value)[:200]) for k, a in n.attributes.items())))
                  for n in g)
    inits = tuple(sorted((k, tuple(v.shape or ()) if v.shape is not None else None)
                         for k, v in g.initializers.items()))
    io = (tuple((v.name, str(v.shape)) for v in g.inputs),
          tuple((v.name, str(v.shape)) for v in g.outputs))
    return nodes, inits, io, tuple(sorted(model.opset_imports.items()))


def _same_weights(a: ir.Model, b: ir.Model) -> bool:
    """Whether the main-graph initializers of ``a`` and ``b`` hold the same values.

    Only asked when the structures match: a tool that changed nothing but a weight (a wrong
    constant fold) has still changed the model, and its result must be verified.
    """
    ib = b.graph.initializers
    for name, v in a.graph.initializers.items():
        w = ib.get(name)
        if w is None or (v.const_value is None) != (w.const_value is None):
            return False
        if v.const_value is not None and not np.array_equal(v.const_value.numpy(),
                                                            w.const_value.numpy()):
            return False
    return True


def _pads_changed(old: ir.Node, new: ir.Node) -> bool:
    """Whether a kept node's ``pads`` differ from its earlier version's."""
    a, b = old.attributes.get("pads"), new.attributes.get("pads")
    va = list(a.value) if a is not None and a.type == ir.AttributeType.INTS else None
    vb = list(b.value) if b is not None and b.type == ir.AttributeType.INTS else None
    return (va is not None or vb is not None) and va != vb


def trace_provenance(before: LabModel, new: LabModel, *, fused_ops: bool = False
                     ) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """Map the nodes of ``new`` to ids of ``before`` and stamp their origins.

    ``fused_ops=True`` (transformer fusion steps) also traces fused nodes that write new
    output names through the weights they took over, and gives helper nodes a fusion created
    (Casts of its inputs) the origin of the fused node they feed.

    Returns:
        (provenance {new id: before ids} for new or merged nodes, removed before ids, notes).
    """
    b_idx = before.index
    by_name = {e.node.name: nid for nid, e in b_idx.entries.items()
               if e.node.name and e.node.name == nid}
    a_idx = new.index
    direct: dict[str, list[str]] = {}
    for nid, e in a_idx.entries.items():
        tag = e.node.metadata_props.get(STEP_KEY)
        if tag in b_idx.entries:
            direct[nid] = [tag]
        elif e.node.name and e.node.name in by_name:
            direct[nid] = [by_name[e.node.name]]
        else:
            direct[nid] = []
    kept = {ids[0] for ids in direct.values() if ids}
    removed = [nid for nid in b_idx.entries if nid not in kept]
    removed_set = set(removed)
    provenance: dict[str, list[str]] = {}
    notes: list[str] = []
    unknown = 0
    # Rewiring: where a kept node (or a model output) now reads tensor T instead of the old
    # tensor S, T's producer absorbed S's removed producer (Conv+BN fused into the Conv keeps
    # the Conv's output name, and the Relu after it now reads that name).
    absorbed: dict[str, list[str]] = {}

    def _absorb(old_name: str | None, new_name: str | None, reader: str | None = None) -> None:
        if not old_name or not new_name or old_name == new_name:
            return
        src = b_idx.producer.get(old_name)
        # ``reader``: the kept node that reads the new tensor, when its ``pads`` changed: a
        # removed Pad went into it (onnxruntime's PadFusion into the Conv or pool after it),
        # not into the producer of what the Pad read
        dst = reader if reader is not None and src is not None \
            and b_idx.entries[src].node.op_type == "Pad" \
            else a_idx.producer.get(new_name)
        if src in removed_set and dst is not None:
            absorbed.setdefault(dst, []).append(src)

    for nid, e in a_idx.entries.items():
        if len(direct[nid]) != 1:
            continue
        old = b_idx.entries[direct[nid][0]].node
        if fused_ops and old.op_type != e.node.op_type:
            continue  # a fused node carrying one old node's tag: its inputs are not that node's
        reader = nid if _pads_changed(old, e.node) else None
        for bv, av in zip(old.inputs, e.node.inputs):
            _absorb(bv.name if bv is not None else None, av.name if av is not None else None,
                    reader)
    for bv, av in zip(before.graph.outputs, new.graph.outputs):
        _absorb(bv.name, av.name)
    seeds: dict[str, list[str]] = {}
    for nid, e in a_idx.entries.items():
        seeds[nid] = [b_idx.producer[v.name] for v in e.node.outputs
                      if v.name in b_idx.producer and b_idx.producer[v.name] in removed_set]
        seeds[nid] += absorbed.get(nid, [])
        if fused_ops and direct[nid] and \
                b_idx.entries[direct[nid][0]].node.op_type != e.node.op_type:
            # A fused node that kept the name or tags of one node it replaced (onnxscript's
            # rewriter): what fed that node and went away is part of the fusion too.
            seeds[nid] += [p for p in b_idx.predecessors(direct[nid][0]) if p in removed_set]
        part = _name_part(e.node.name, by_name) if not direct[nid] else None
        if part is not None and part in removed_set and part not in seeds[nid]:
            seeds[nid].append(part)  # ORT's "/ln/Mul/LayerNormFusion/" names its first part
    # A fused node that writes new output names (EmbedLayerNormalization) has no seed from
    # its outputs: seed it with the removed nodes that read the weights it took over (an
    # initializer or Constant output read by it now and by a removed node before).
    for nid, e in a_idx.entries.items():
        if not fused_ops or direct[nid] or seeds[nid]:
            continue
        for v in e.node.inputs:
            if v is None or not v.name or v.name not in b_idx.values:
                continue
            old_v = b_idx.values[v.name]
            p = b_idx.producer.get(v.name)
            if not (old_v.is_initializer() or (p is not None
                                               and b_idx.entries[p].node.op_type == "Constant")):
                continue
            seeds[nid] += [c for c in b_idx.consumers.get(v.name, [])
                           if c in removed_set and c not in seeds[nid]]
    claimed: dict[str, str] = {}
    for nid, ss in seeds.items():
        for x in ss:
            claimed.setdefault(x, nid)
    for nid, e in a_idx.entries.items():
        ids = list(direct[nid])
        # Extend with the old producers of this node's outputs (or of the tensors it now
        # stands for) and the removed nodes feeding them that no other new node claims:
        # that is what a fusion folded into this node.
        stack = list(seeds[nid])
        seen = set(ids)
        while stack:
            cur = stack.pop()
            if cur in seen:
                continue
            seen.add(cur)
            ids.append(cur)
            stack.extend(p for p in b_idx.predecessors(cur) if p in removed_set
                         and p not in seen and claimed.get(p, nid) == nid)
        origin: list[str] = []
        for s in ids:
            for o in node_origin(b_idx.entries[s].node, s):
                if o not in origin:
                    origin.append(o)
        e.node.metadata_props[ORIGIN_KEY] = json.dumps(origin)
        e.node.metadata_props.pop(STEP_KEY, None)
        if not ids:
            unknown += 1
            provenance[nid] = []
        elif ids != [nid]:
            provenance[nid] = ids
    helpers = 0
    while fused_ops:  # a Cast feeding a ReduceSum feeding the Attention: repeat
        more = _helper_origins(a_idx, provenance)
        helpers += more
        if not more:
            break
    unknown -= helpers
    if helpers:
        notes.append(f"{helpers} helper node(s) the tool created for a fusion (a Cast of an "
                     "input it feeds) take the origin of the fused node they feed")
    if unknown:
        notes.append(f"provenance unknown for {unknown} node(s) the tool created (origin [])")
    return provenance, removed, notes


def _import_used_domains(m: ir.Model) -> None:
    """Import (version 1) every operator domain a node uses but the model does not import.

    onnxruntime's transformer optimizer adds its ``com.microsoft`` import only when it saves
    to a file (``OnnxModel.save``); the in-memory model it hands back lacks it. Without the
    import the model is invalid ONNX and shape inference stops at the first fused node,
    leaving every tensor of the graph untyped.
    """
    have = set(m.opset_imports)
    if have & {"", "ai.onnx"}:
        have |= {"", "ai.onnx"}  # two spellings of the standard domain
    for g in m.graphs():
        for node in g:
            if node.domain not in have:
                m.opset_imports[node.domain] = 1
                have.add(node.domain)


def _helper_origins(a_idx: Any, provenance: dict[str, list[str]]) -> int:
    """Give untraced single-output nodes whose output only traced nodes of one kind read the
    origin of those readers (onnxruntime's fusions add Casts of the int64 inputs for
    EmbedLayerNormalization). Returns how many were given one."""
    done = 0
    for nid in list(provenance):
        if provenance[nid]:
            continue
        node = a_idx.entries[nid].node
        if len(node.outputs) != 1 or node.outputs[0].is_graph_output():
            continue
        readers = a_idx.consumers.get(node.outputs[0].name, [])
        origin: list[str] = []
        for r in readers:
            rn = a_idx.entries[r].node
            got = load_json(rn.metadata_props.get(ORIGIN_KEY), max_depth=1)
            got = got if isinstance(got, list) and all(isinstance(o, str) for o in got) \
                else []
            if not got or r not in provenance:
                origin = []
                break
            origin += [o for o in got if o not in origin]
        if not readers or not origin:
            continue
        node.metadata_props[ORIGIN_KEY] = json.dumps(origin)
        provenance[nid] = [x for r in readers for x in provenance[r] if x]
        done += 1
    return done


def _name_part(name: str | None, by_name: dict[str, str]) -> str | None:
    """The old node a fused node's name is built on (longest '/'-prefix that is a name)."""
    if not name or "/" not in name.strip("/"):
        return None
    parts = name.rstrip("/").split("/")
    for k in range(len(parts) - 1, 0, -1):
        hit = by_name.get("/".join(parts[:k]))
        if hit is not None:
            return hit
    return None


def _fixed_inputs(before: ir.Model, after: ir.Model) -> str:
    """The graph inputs whose symbolic dims a tool fixed, as ``name [was] -> [now]``."""
    now = {v.name: v.shape for v in after.graph.inputs}
    out = []
    for v in before.graph.inputs:
        old, new = v.shape, now.get(v.name)
        if old is None or new is None or len(old) != len(new):
            continue
        if any(isinstance(a, ir.SymbolicDim) and not isinstance(b, ir.SymbolicDim)
               for a, b in zip(old, new)):
            out.append(f"{v.name} {[d.value if isinstance(d, ir.SymbolicDim) else d for d in old]}"
                       f" -> {[d.value if isinstance(d, ir.SymbolicDim) else d for d in new]}")
    return "; ".join(out)


class WholeModelPass(LabPass):
    """Base of passes that rebuild the whole model (tools, opset conversion).

    Subclasses implement :meth:`rebuild` (return a new ``ir.Model`` or None when the tool
    declines) and may set ``self.notes`` entries.
    """

    #: True when the tool needs weights in memory (onnxsim, onnxoptimizer).
    needs_weights: bool = True
    #: The parameters that turn the tool's switches off (empty: the tool has none).
    switch_params: ClassVar[tuple[str, ...]] = ()
    #: Where the names of :meth:`switches` come from (one line, for users and docs).
    switch_source: ClassVar[str] = ""
    #: Trace fused ops that write new output names (see :func:`trace_provenance`).
    fused_ops: ClassVar[bool] = False

    def rebuild(self, model: LabModel) -> ir.Model | None:
        raise NotImplementedError

    def switches(self, model: LabModel) -> list[Switch]:
        """The rewrites this run would apply that can be turned off, in the tool's order.

        Those the pass's parameters already turn off are left out. Empty for tools without
        switches.
        """
        return []

    def switch_named(self, name: str) -> Switch:
        """The switch called ``name``, placed by the tool's own registry (no model needed).

        Raises:
            PassError: the tool has no switches, or none of that name.
        """
        if len(self.switch_params) != 1:
            raise PassError(f"{self.name} has no switches to turn off by name.",
                            fix="Pass its parameters instead (see onnx_lab.transforms."
                            "available()).")
        return Switch(name, self.switch_params[0])

    def params_without(self, switches: Sequence[Switch]) -> dict[str, Any]:
        """This pass's parameters with ``switches`` turned off as well.

        Example:
            >>> p.params_without([Switch("FusionGelu", "skip_fusion_patterns")])
            {'skip_fusion_patterns': ['FusionGelu'], ...}
        """
        out = dict(self.options)
        for sw in switches:
            if sw.value is not None:
                out[sw.param] = sw.value
            else:
                have = list(out.get(sw.param) or [])
                out[sw.param] = have + ([sw.name] if sw.name not in have else [])
        return out

    def _off(self, param: str) -> set[str]:
        """Names the list parameter ``param`` already turns off."""
        return set(self.options.get(param) or [])

    def run(self, model: LabModel, context: PassContext | None = None) -> PassResult:
        self.context = context or PassContext()
        t0 = time.perf_counter()
        self.notes: list[str] = []
        self.requantized = False  # set by a tool that fuses Q/DQ into integer kernels
        work = model.clone()
        stamp_origins(work)
        for nid, e in work.index.entries.items():
            e.node.metadata_props[STEP_KEY] = nid
        new_ir = self.rebuild(work)
        n0 = len(model.index)
        if new_ir is None or (_signature(new_ir) == _signature(model.ir)
                              and _same_weights(new_ir, model.ir)):
            reason = self._reason or f"{self.name} left the model unchanged"
            return PassResult(self.name, dict(self.options), False, n0, n0, {}, [], reason,
                              time.perf_counter() - t0, list(self.notes), model, [])
        new = LabModel(new_ir, path=model.path)
        fixed = _fixed_inputs(model.ir, new_ir)
        if fixed:
            self.notes.append(f"the result's inputs take only the sizes it ran with: {fixed} "
                              "(other sizes of those dims no longer run)")
        provenance, removed, notes = trace_provenance(work, new, fused_ops=self.fused_ops)
        new.invalidate()
        carry_sources(work, new)
        return PassResult(self.name, dict(self.options), True, n0, len(new.index), provenance,
                          removed, None, time.perf_counter() - t0, self.notes + notes, new, [],
                          requantized=self.requantized)

    # -- helpers for subclasses ---------------------------------------------------------
    def proto_with_weights(self, model: LabModel) -> onnx.ModelProto:
        """The model as a ModelProto with every weight inside (tools read no external files;
        :func:`onnx_lab.core.handoff.proto_with_weights`)."""
        return proto_with_weights(model, self.name)

    @classmethod
    def from_proto(cls, proto: onnx.ModelProto, like: LabModel) -> ir.Model:
        """A tool's ModelProto as the step's new model (see :meth:`from_ir`)."""
        return cls.from_ir(ir.serde.deserialize_model(proto), like)

    @staticmethod
    def from_ir(m: ir.Model, like: LabModel) -> ir.Model:
        """A tool's model as the step's new model: operator domains imported, IR < 4
        initializer inputs fixed, external references resolved against ``like``'s folder."""
        _import_used_domains(m)
        if (like.ir.ir_version or 0) < 4:
            # IR < 4 lists every initializer as a graph input too. Tools that fold or fuse
            # weights away leave those entries behind as inputs that nothing reads, which would
            # then look like inputs to feed: they never were, drop them.
            weights = set(like.graph.initializers)
            for v in list(m.graph.inputs):
                if v.name in weights and v.name not in m.graph.initializers and not v.uses() \
                        and not v.is_graph_output():
                    m.graph.inputs.remove(v)
        if (m.ir_version or 0) < 4:
            # IR < 4 requires initializers to be listed as graph inputs; onnxruntime keeps the
            # IR version but not that rule for the weights it creates (Conv+BN fusions).
            listed = {v.name for v in m.graph.inputs}
            m.graph.inputs.extend(v for v in m.graph.initializers.values()
                                  if v.name not in listed)
        if like.base_dir is not None:
            ir.external_data.set_base_dir(m.graph, str(like.base_dir))
        return m

    def lab_input_shapes(self, model: LabModel) -> dict[str, list[int]]:
        """Input shapes resolvable from the Lab's dims/shapes (inputs left dynamic omitted)."""
        # The dims the model determines (a decoder's total length, a head size) too.
        dims, shapes = with_derived(model, self.context.dims), self.context.shapes
        out: dict[str, list[int]] = {}
        g = model.graph
        for v in g.inputs:
            if v.name in g.initializers:
                continue
            if v.type is not None and not isinstance(v.type, ir.TensorType):
                # A sequence/optional input: its shape is its element's, and the tools'
                # input-shape overrides (onnxsim's overwrite_input_shapes, onnxslim's
                # input_shapes) write a tensor type over it (onnxsim then fails with
                # "Field 'elem_type' of 'type' is required but missing").
                continue
            if v.name in shapes:
                out[v.name] = list(shapes[v.name])
                continue
            shp = shape_tuple(v.shape)
            if shp is None:
                continue
            # Names and dim expressions (past + new lengths) from the Lab's dims.
            res = [d if isinstance(d, int) and d > 0 else resolve_dim(d, dims)
                   if isinstance(d, str) else None for d in shp]
            if all(isinstance(d, int) for d in res) and any(
                    not isinstance(d, int) for d in shp):
                out[v.name] = res  # type: ignore[assignment]
        # a merged decoder's mask declared [batch, new tokens] covers the past too, as the
        # verification's samples size it
        sized = {k: tuple(v) for k, v in out.items()}
        mask_over_past(model, dims, shapes, sized)
        return {k: list(v) for k, v in sized.items()}
