"""Passes wrapping other tools: onnxsim, onnxslim, onnxoptimizer (its default pass list as one
step, and one step per optimizer pass) and onnxruntime's offline graph optimization
(``ort:basic``, ``ort:extended``, ``ort:all``).

They return the same :class:`~onnx_lab.transforms.base.PassResult` as onnx_lab's own passes;
provenance is recovered by node tags and names (see ``_whole.py``), else marked unknown.
Every tool gets the model through :mod:`onnx_lab.core.handoff`: onnxsim/onnxslim/onnxoptimizer
a whole protobuf with the weights read into memory (over 2 GB they refuse with a PassError);
onnxruntime reads the weights where they lie and writes its optimized model with its own data
file into a temporary folder, read back into memory. A tool's own exception becomes a
PassError naming the step.

Each multi-rewrite tool names its switches (``WholeModelPass.switches``), the rewrites it can
be told to leave out, for ``onnx_lab.culprit``:

- ``onnxslim``: its registered fusion/elimination patterns (``skip_fusion_patterns``; read from
  onnxslim's registry, so patterns added with ``onnxslim.register_fusion_pattern`` count) and
  its optimizations other than ``graph_fusion`` (``skip_optimizations``);
- ``onnxoptimizer``: the passes of the run (``skip_passes``);
- ``onnxsim``: the optimizer passes onnxsim runs by default (``skipped_optimizers``; the list
  ``onnxsim --list-default-optimizers`` prints) and constant folding
  (``skip_constant_folding``);
- ``ort:*``: the graph transformers onnxruntime's log says modified this model, the rule-based
  ones replaced by the rules that act on it (``disabled_optimizers``, see
  :mod:`onnx_lab.runtime.optimizers`).

Example:
    >>> lab.apply("onnxsim")
    >>> lab.apply("onnxslim", skip_fusion_patterns=["FusionConvBN"])
    >>> lab.apply("onnxoptimizer:fuse_bn_into_conv")
    >>> r = lab.apply("ort:extended", disabled_optimizers=["ConvBNFusion"]); r.notes
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import onnx_ir as ir

from onnx_lab.core.handoff import read_output, tool_errors, work_folder
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import shape_tuple
from onnx_lab.errors import PassError, RuntimeLoadError, close_matches
from onnx_lab.runtime.optimizers import effective_rules, optimize, reload_problem
from onnx_lab.transforms import transformers
from onnx_lab.transforms._whole import PROTO_LIMIT, Switch, WholeModelPass
from onnx_lab.transforms.base import Param, _register_factory, register_pass

logger = logging.getLogger(__name__)

__all__ = ["OnnxsimPass", "OnnxslimPass", "OnnxoptimizerPass", "OnnxoptimizerListPass",
           "OrtPass", "optimizer_passes"]


def _check_names(tool: str, what: str, given: Any, known: list[str]) -> None:
    """PassError naming a switch name the tool does not know (the tools ignore them)."""
    bad = [n for n in (given or []) if n not in known]
    if bad:
        near = close_matches(str(bad[0]), known)
        raise PassError(f"{tool} has no {what} {bad[0]!r}"
                        + (f" (close: {', '.join(near)})" if near else "") + ".",
                        fix=f"Known: {', '.join(known)}.")

_STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")


class OnnxsimPass(WholeModelPass):
    """onnxsim.simplify: constant folding, shape inference and onnxoptimizer fusions at once."""

    params = (
        Param("skip_fuse_bn", bool, False, "do not fuse BatchNormalization into Conv"),
        Param("skip_constant_folding", bool, False, "do not fold constants"),
        Param("skip_shape_inference", bool, False, "do not run shape inference"),
        Param("skipped_optimizers", (list, tuple), None, "onnxoptimizer passes to skip"),
    )
    no_match_reason = "onnxsim found nothing to simplify"
    switch_params = ("skipped_optimizers", "skip_constant_folding")
    switch_source = ("the optimizer passes onnxsim runs by default (onnxsim "
                     "--list-default-optimizers) and its constant folding")

    def switches(self, model: LabModel) -> list[Switch]:
        off = self._off("skipped_optimizers") | (
            {"fuse_bn_into_conv"} if self.options["skip_fuse_bn"] else set())
        out = [Switch(n, "skipped_optimizers") for n in onnxsim_optimizers() if n not in off]
        if not self.options["skip_constant_folding"]:
            out.append(Switch("constant_folding", "skip_constant_folding", True))
        return out

    def switch_named(self, name: str) -> Switch:
        if name == "constant_folding":
            return Switch(name, "skip_constant_folding", True)
        _check_names("onnxsim", "default optimizer", [name], onnxsim_optimizers())
        return Switch(name, "skipped_optimizers")

    def rebuild(self, model: LabModel) -> ir.Model | None:
        import onnxsim

        proto = self.proto_with_weights(model)
        shapes = self.lab_input_shapes(model)
        o = self.options
        dynamic = [v.name for v in model.graph.inputs if v.name not in model.graph.initializers
                   and v.name not in shapes and _dynamic(v)]
        switched_off = o["skip_constant_folding"] and (o["skip_shape_inference"] or set(
            o["skipped_optimizers"] or []) >= set(onnxsim_optimizers()))
        fix = (f"Give the input shapes of {', '.join(map(repr, dynamic[:3]))} (dims=/shapes= "
               "at open) or use onnx_lab's own passes." if dynamic else
               "onnxsim fails with its folding and shape inference off too: use onnx_lab's "
               "own passes (lab.apply_preset('safe'))." if switched_off else
               "onnxsim ran with every input shape given: leave the failing optimizer out "
               f"(skipped_optimizers=[...], "
               f"{'skip_shape_inference' if o['skip_constant_folding'] else 'skip_constant_folding'}"
               "=True) or use onnx_lab's own passes.")
        with tool_errors("onnxsim", fix):
            out, ok = onnxsim.simplify(
                proto, check_n=0, skip_fuse_bn=o["skip_fuse_bn"],
                skip_constant_folding=o["skip_constant_folding"],
                skip_shape_inference=o["skip_shape_inference"],
                skipped_optimizers=list(o["skipped_optimizers"] or []) or None,
                overwrite_input_shapes=shapes or None)
        if shapes:
            self.notes.append(f"onnxsim ran with input shapes {shapes}")
        return self.from_proto(out, model)


def _dynamic(v: ir.Value) -> bool:
    """Whether a graph input's shape is unknown or has a dim without a size."""
    shp = shape_tuple(v.shape)
    return shp is None or any(not isinstance(d, int) or d <= 0 for d in shp)


class OnnxoptimizerPass(WholeModelPass):
    """One onnxoptimizer pass."""

    params = (Param("fixed_point", bool, False, "repeat until nothing changes"),)
    optimizer_pass = ""

    def rebuild(self, model: LabModel) -> ir.Model | None:
        import onnxoptimizer

        proto = self.proto_with_weights(model)
        if self.optimizer_pass == "eliminate_shape_op":
            bad = _empty_shape_slices(proto)
            if bad:
                raise PassError(
                    f"onnxoptimizer pass 'eliminate_shape_op' crashes the process (a "
                    f"segmentation fault in onnxoptimizer) on a Shape node whose start is past "
                    f"its end: {', '.join(map(repr, bad[:3]))}; it was not run. Use onnx_lab's "
                    f"own passes (lab.apply('fold_shapes')).")
        with tool_errors(f"onnxoptimizer pass {self.optimizer_pass!r}",
                         "Try onnx_lab's own pass for the same rewrite."):
            out = onnxoptimizer.optimize(proto, [self.optimizer_pass],
                                         fixed_point=self.options["fixed_point"])
        return self.from_proto(out, model)


class OnnxoptimizerListPass(WholeModelPass):
    """onnxoptimizer.optimize with a list of passes (default: its fuse-and-elimination set)."""

    params = (
        Param("passes", (list, tuple), None, "onnxoptimizer passes to run (default: "
              "onnxoptimizer.get_fuse_and_elimination_passes())"),
        Param("skip_passes", (list, tuple), None, "passes of that list to leave out"),
        Param("fixed_point", bool, False, "repeat until nothing changes"),
    )
    no_match_reason = "onnxoptimizer found nothing to optimize"
    switch_params = ("skip_passes",)
    switch_source = "the onnxoptimizer passes of the run (passes=, default its " \
                    "fuse-and-elimination set)"

    def pass_list(self) -> list[str]:
        """The passes this run applies, in order (PassError on unknown names)."""
        import onnxoptimizer

        known = list(onnxoptimizer.get_available_passes())
        passes = list(self.options["passes"] or onnxoptimizer.get_fuse_and_elimination_passes())
        _check_names("onnxoptimizer", "pass", passes, known)
        _check_names("onnxoptimizer", "pass in this run", self.options["skip_passes"], passes)
        off = self._off("skip_passes")
        return [p for p in passes if p not in off]

    def switches(self, model: LabModel) -> list[Switch]:
        return [Switch(n, "skip_passes") for n in self.pass_list()]

    def switch_named(self, name: str) -> Switch:
        _check_names("onnxoptimizer", "pass in this run", [name], self.pass_list())
        return Switch(name, "skip_passes")

    def rebuild(self, model: LabModel) -> ir.Model | None:
        import onnxoptimizer

        passes = self.pass_list()
        if not passes:
            self._reason = "every onnxoptimizer pass of the list is skipped"
            return None
        proto = self.proto_with_weights(model)
        if "eliminate_shape_op" in passes:
            bad = _empty_shape_slices(proto)
            if bad:
                passes = [p for p in passes if p != "eliminate_shape_op"]
                self.notes.append(
                    f"onnxoptimizer's eliminate_shape_op left out: it crashes the process (a "
                    f"segmentation fault) on a Shape node whose start is past its end "
                    f"({', '.join(map(repr, bad[:3]))})")
                if not passes:
                    self._reason = "every onnxoptimizer pass of the list is skipped"
                    return None
        with tool_errors("onnxoptimizer", "Leave the failing pass out (skip_passes=[...]) or "
                         "use onnx_lab's own passes."):
            out = onnxoptimizer.optimize(proto, passes, fixed_point=self.options["fixed_point"])
        return self.from_proto(out, model)


def _bodies(attr: Any) -> list[Any]:
    """The graphs a proto attribute holds (an If's branch, a Loop's body, GRAPHS lists)."""
    return ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)


def _empty_shape_slices(proto: Any) -> list[str]:
    """Shape nodes (any graph) whose ``start``, normalized by the input's known rank, is past
    their ``end``: onnxoptimizer's eliminate_shape_op dereferences past the end of the dims
    there and kills the process (onnx's ``test_shape_start_greater_than_end``)."""
    import onnx

    def has_slice(g: Any) -> bool:
        for n in g.node:
            if n.op_type == "Shape" and any(a.name in ("start", "end") for a in n.attribute):
                return True
            for a in n.attribute:
                if any(has_slice(sg) for sg in _bodies(a)):
                    return True
        return False

    if not has_slice(proto.graph):
        return []
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001 - the declared types are what is left
        inferred = proto
    out: list[str] = []

    def walk(g: Any, outer: dict[str, int]) -> None:
        ranks = dict(outer)
        for vi in (*g.input, *g.value_info, *g.output):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                ranks[vi.name] = len(vi.type.tensor_type.shape.dim)
        for t in g.initializer:
            ranks[t.name] = len(t.dims)
        for n in g.node:
            if n.op_type == "Shape" and n.domain in ("", "ai.onnx") and n.input \
                    and n.input[0] in ranks:
                r = ranks[n.input[0]]
                att = {a.name: a.i for a in n.attribute if a.name in ("start", "end")}
                lo, hi = att.get("start", 0), att.get("end", r)
                lo, hi = lo + r if lo < 0 else lo, hi + r if hi < 0 else hi
                # onnxoptimizer compares them before clamping (end -5 of a rank 3 is -2)
                if lo > hi or min(max(lo, 0), r) > min(max(hi, 0), r):
                    out.append(n.name or (n.output[0] if n.output else "Shape"))
            for a in n.attribute:
                for sg in _bodies(a):
                    walk(sg, ranks)

    walk(inferred.graph, {})
    return out


def _slim_registry() -> tuple[dict[str, list], list[str]]:
    """onnxslim's fusion patterns {name: matchers} and its optimization names.

    Raises:
        PassError: onnxslim is not installed (it is optional: the ``slim`` extra).
    """
    try:
        from onnxslim.core.optimization import OptimizationSettings
        from onnxslim.core.pattern.registry import DEFAULT_FUSION_PATTERNS
    except ImportError as e:
        raise PassError("The onnxslim step needs onnxslim, which is not installed.",
                        fix="pip install onnxslim (the slim extra), or use another tool "
                        "step (onnxsim, onnxoptimizer, ort:basic).") from e

    return dict(DEFAULT_FUSION_PATTERNS), list(OptimizationSettings.keys())


class OnnxslimPass(WholeModelPass):
    """onnxslim.slim: constant folding, fusion and elimination patterns, dead-node removal."""

    params = (
        Param("skip_fusion_patterns", (list, tuple), None, "onnxslim patterns to leave out "
              "(e.g. FusionConvBN)"),
        Param("skip_optimizations", (list, tuple), None, "onnxslim optimizations to leave out "
              "(constant_folding, graph_fusion, dead_node_elimination, "
              "subexpression_elimination, weight_tying)"),
        Param("no_shape_infer", bool, False, "do not run shape inference"),
    )
    no_match_reason = "onnxslim found nothing to slim"
    switch_params = ("skip_fusion_patterns", "skip_optimizations")
    switch_source = ("onnxslim's registered patterns that apply to the model's opset "
                     "(skip_fusion_patterns) and its optimizations but graph_fusion "
                     "(skip_optimizations)")

    def _checked(self) -> tuple[dict[str, list], list[str]]:
        patterns, optimizations = _slim_registry()
        _check_names("onnxslim", "fusion pattern", self.options["skip_fusion_patterns"],
                     list(patterns))
        _check_names("onnxslim", "optimization", self.options["skip_optimizations"],
                     optimizations)
        return patterns, optimizations

    def switches(self, model: LabModel) -> list[Switch]:
        patterns, optimizations = self._checked()
        off_p, off_o = self._off("skip_fusion_patterns"), self._off("skip_optimizations")
        opset = model.ir.opset_imports.get("", model.ir.opset_imports.get("ai.onnx", 1))
        out = []
        if "graph_fusion" not in off_o:
            out += [Switch(n, "skip_fusion_patterns") for n, matchers in patterns.items()
                    if n not in off_p and any(m.applies_to(opset) for m in matchers)]
        out += [Switch(n, "skip_optimizations") for n in optimizations
                if n != "graph_fusion" and n not in off_o]
        return out

    def switch_named(self, name: str) -> Switch:
        patterns, optimizations = self._checked()
        if name in optimizations:
            return Switch(name, "skip_optimizations")
        _check_names("onnxslim", "pattern or optimization", [name],
                     list(patterns) + optimizations)
        return Switch(name, "skip_fusion_patterns")

    def rebuild(self, model: LabModel) -> ir.Model | None:
        self._checked()  # (a PassError when onnxslim is not installed)
        import onnxslim

        if not any(d in ("", "ai.onnx") for d in model.ir.opset_imports):
            # onnxslim reads the default opset first and fails on None ("'NoneType' object
            # has no attribute 'opset_import'"); its patterns match standard ops only.
            domains = sorted({e.node.domain or "ai.onnx" for e in model.index.entries.values()})
            raise PassError(
                "onnxslim cannot run on this model: it imports no standard ai.onnx opset "
                f"(its ops are in {', '.join(domains) or 'no domain'}), which onnxslim needs.",
                fix="onnxslim's fusions and simplifications apply to standard ops only, so "
                "there is nothing for it here: keep the model as it is.")
        proto = self.proto_with_weights(model)
        shapes = self.lab_input_shapes(model)
        o = self.options
        others = [v.name for v in model.graph.inputs if v.name not in model.graph.initializers
                  and v.type is not None and not isinstance(v.type, ir.TensorType)]
        fix = (f"onnxslim handles tensor inputs, and {_quoted(others)} "
               f"{'is a map or sequence' if len(others) == 1 else 'are maps or sequences'}: "
               "use onnx_lab's own passes on this model." if others else
               "Leave the failing pattern out (skip_fusion_patterns=[...]), give input shapes "
               "(dims= at open), or use onnx_lab's own passes.")
        with tool_errors("onnxslim", fix):
            out = onnxslim.slim(
                proto, skip_fusion_patterns=list(o["skip_fusion_patterns"] or []) or None,
                skip_optimizations=list(o["skip_optimizations"] or []) or None,
                no_shape_infer=o["no_shape_infer"],
                input_shapes=[f"{k}:{','.join(str(d) for d in v)}" for k, v in shapes.items()]
                or None)
        if out is None:
            raise PassError("onnxslim returned no model.", fix="Run onnxslim on the file to "
                            "see its message, or use onnx_lab's own passes.")
        if shapes:
            self.notes.append(f"onnxslim ran with input shapes {shapes}")
        return self.from_proto(out, model)


class OrtPass(WholeModelPass):
    """onnxruntime offline graph optimization (the model onnxruntime would run)."""

    params = (Param("disabled_optimizers", (list, tuple), None, "onnxruntime optimizers or "
                    "rewrite rules to turn off (e.g. ConvBNFusion)"),)
    level = "basic"
    needs_weights = False
    switch_params = ("disabled_optimizers",)
    switch_source = ("the graph transformers onnxruntime's log reports as having modified "
                     "this model, each rule-based one replaced by those of its rewrite rules "
                     "whose removal alone changes the optimized graph")

    def switches(self, model: LabModel) -> list[Switch]:
        off = self._off("disabled_optimizers")
        self._check_size(model)
        with work_folder(self.name) as tmp, self._named():
            fired = optimize(model, self.level, str(tmp / "optimized.onnx"),
                             disabled=sorted(off), trace=True)
        names: list[str] = []
        rules: list[str] | None = None
        for n in fired:
            if n.endswith("_RuleBasedTransformer"):
                if rules is None:
                    rules = effective_rules(model, self.level, disabled=sorted(off))
                    names += rules
                if not rules:  # none of the known rules: the transformer as a whole
                    names.append(n)
            else:
                names.append(n)
        return [Switch(n, "disabled_optimizers") for n in dict.fromkeys(names) if n not in off]

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        """onnxruntime's refusal to load the model as a PassError naming this step."""
        try:
            yield
        except RuntimeLoadError as e:
            raise PassError(f"{self.name}: {e.problem}", fix=e.fix) from e

    def _check_size(self, model: LabModel) -> None:
        if model.weights_nbytes() >= PROTO_LIMIT:
            raise PassError(f"ort:{self.level} writes the optimized model as one protobuf, "
                            "which cannot hold over 2 GB of weights.",
                            fix="Use onnx_lab's own passes, or onnxruntime's "
                            "session.optimized_model_external_initializers_file_name option.")

    def rebuild(self, model: LabModel) -> ir.Model | None:
        self._check_size(model)
        with work_folder(self.name) as tmp:
            # onnxruntime writes the weights to its own data file beside the optimized model
            # (runtime.optimizers), read back into memory before the folder goes
            target = tmp / "optimized.onnx"
            with self._named():
                optimize(model, self.level, str(target),
                         disabled=list(self.options["disabled_optimizers"] or []))
            out = read_output(target, self.name)
            problem = reload_problem(str(target))
        if problem is not None:
            self.notes.append(
                "onnxruntime at its default options (every optimization on) does not load "
                f"this result: {problem}. Load the saved model with "
                "SessionOptions.graph_optimization_level at ORT_ENABLE_"
                f"{'BASIC' if self.level == 'basic' else 'EXTENDED'} or lower, as onnxruntime "
                "advises for a model it optimized offline")
        new = self.from_ir(out, model)
        domains = sorted({n.domain for g in new.graphs() for n in g
                          if n.domain not in _STANDARD_DOMAINS})
        if domains:
            self.notes.append(f"the result holds ops of domain(s) {', '.join(domains)} that only "
                              "onnxruntime runs")
        if self.level == "all":
            self.notes.append("ort:all applies layout optimizations specific to this machine's "
                              "CPU; save ort:extended for portable models")
        fused = _count_qdq(model.ir) - _count_qdq(new)
        self.requantized = fused > 0
        if fused > 0:
            # The QDQ graph, run as written (verification's reference), computes in float
            # between its QuantizeLinear/DequantizeLinear; the kernels round in integers.
            self.notes.append(
                f"onnxruntime fused {fused} QuantizeLinear/DequantizeLinear nodes into int8 "
                "kernels (QLinearConv, QLinearMatMul...), which round differently from the QDQ "
                "graph they replace: a DequantizeLinear's output may differ by one "
                "quantization step (verification allows that); more, grown through the "
                "layers, is judged as quantization error by "
                "onnx_lab.compare(lab.original, lab, preset='int8')")
        return new


def _count_qdq(model: ir.Model) -> int:
    return sum(n.op_type in ("QuantizeLinear", "DequantizeLinear")
               and n.domain in _STANDARD_DOMAINS for g in model.graphs() for n in g)


def onnxsim_optimizers() -> list[str]:
    """The optimizer passes onnxsim runs by default (``onnxsim --list-default-optimizers``).

    Read from onnxsim's extension when it exposes the list (``_list_optimizers``), else
    onnxoptimizer's fuse-and-elimination set, which is what onnxsim's C++ core runs.
    """
    try:
        from onnxsim import onnx_simplifier

        return list(onnx_simplifier.C._list_optimizers())
    except (ImportError, AttributeError):
        import onnxoptimizer

        return list(onnxoptimizer.get_fuse_and_elimination_passes())


def optimizer_passes() -> list[str]:
    """Names of onnxoptimizer's passes (empty when onnxoptimizer is not installed)."""
    try:
        import onnxoptimizer
    except ImportError:
        return []
    return list(onnxoptimizer.get_available_passes())


def _register() -> None:
    register_pass("onnxsim", kind="tool")(OnnxsimPass)
    register_pass("onnxslim", kind="tool")(OnnxslimPass)
    register_pass("onnxoptimizer", kind="tool")(OnnxoptimizerListPass)
    for level in ("basic", "extended", "all"):
        cls = type(f"Ort{level.title()}Pass", (OrtPass,),
                   {"level": level, "__doc__": f"onnxruntime offline optimization at level "
                    f"{level!r} (graph as ORT would run it)."})
        register_pass(f"ort:{level}", kind="tool")(cls)
    for name in optimizer_passes():
        cls = type(f"Onnxoptimizer_{name}", (OnnxoptimizerPass,),
                   {"optimizer_pass": name, "__doc__": f"onnxoptimizer pass {name}."})
        cls.name = f"onnxoptimizer:{name}"
        _register_factory(f"onnxoptimizer:{name}", cls, f"onnxoptimizer pass {name}",
                          OnnxoptimizerPass.params, kind="tool")
    # Transformer fusions (ort_transformers, onnxscript_rewrite) live in their own module.

    transformers._register()


_register()


def _quoted(names: list[str]) -> str:
    """``'a'``, ``'a' and 'b'``, ``'a', 'b' and 'c'``."""
    q = [repr(n) for n in names]
    return q[0] if len(q) == 1 else f"{', '.join(q[:-1])} and {q[-1]}"
