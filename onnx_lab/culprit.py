"""Which rewrite broke my model? Bisect a whole-model tool's own switches.

onnxslim, onnxsim, onnxoptimizer and onnxruntime apply dozens of rewrites at once; when their
step fails verification, the report says where the values differ, not which rewrite made them
differ. Each tool can be told to leave rewrites out (its *switches*, listed by
``WholeModelPass.switches``: onnxslim's patterns, onnxoptimizer's passes, onnxsim's default
optimizers, onnxruntime's ``disabled_optimizers``). :func:`find_culprit` runs the tool with
halves of them turned off, verifies each result against the model before the step, and
names the switch whose removal makes the step verify, in at most ⌈log₂P⌉+2 verification
runs for P switches:

1. every switch on (the step as asked; reused when :func:`apply` has just verified it);
2. ⌈log₂P⌉ halvings: the candidates' first half turned off; the step verifies → the culprit
   is in that half, else in the other;
3. the one left turned off alone, to confirm the fix (skipped when the last halving already
   ran exactly that).

This assumes one culprit. When the confirmation fails (two rewrites at fault, or a fault in
what the tool always does), the result says so instead of naming a switch. Runs whose tool
output equals the input need no verification and are not counted.

This module sits in layer 4: it runs transforms (``run_pass``) and verifies with numerics
(``report_of``), and never touches the Lab's history (``apply`` pushes the step once).

Example:
    >>> c = lab.find_culprit("onnxslim")
    >>> c.culprit, c.fix            # 'FusionConvBN', 'lab.apply("onnxslim", skip_...)'
    >>> c.table()                   # one row per run: disabled switches, verdict
    >>> r = lab.apply("ort:extended", find_culprit=True); r.culprit.message
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnx_lab._pandas import pd
from onnx_lab.core.history import History
from onnx_lab.core.model import LabModel
from onnx_lab.core.source import resolve
from onnx_lab.errors import InputError, PassError, UnknownNameError, unknown_name
from onnx_lab.numerics.verify import report_of
from onnx_lab.steps import apply as apply_step
from onnx_lab.steps import verify_options
from onnx_lab.transforms._whole import Switch, WholeModelPass
from onnx_lab.transforms.apply import run_pass
from onnx_lab.transforms.base import PassResult, get_pass, pass_names

__all__ = ["find_culprit", "apply", "Culprit", "CulpritRun", "switchable_tools", "run_bound",
           "skip_params"]

NO_CULPRIT = "no culprit: the step verifies"


def run_bound(p: int) -> int:
    """The most verification runs :func:`find_culprit` makes for ``p`` switches."""
    return math.ceil(math.log2(p)) + 2 if p > 0 else 1


@dataclass
class CulpritRun:
    """One run of the tool with some switches off, and its verdict.

    Attributes:
        disabled: the switches turned off (beyond those the caller's parameters turn off).
        enabled: the switches left on.
        params: the tool's parameters of this run.
        modified: whether the tool changed the model.
        verified: whether this run was verified (False: unchanged model, tool error, reused).
        passed: the verdict (True for an unchanged model; False for a tool error).
        first_failure, max_abs_err: from the verification report.
        outputs_agree: the model outputs are within tolerance (None: not verified). A run
            whose outputs agree is never a failure to blame, even when an intermediate fails.
        seconds: the tool run and its verification.
        note: the tool error, or "the step's own verification" for a reused run.
    """

    disabled: list[str]
    enabled: list[str]
    params: dict[str, Any]
    modified: bool
    verified: bool
    passed: bool
    first_failure: str | None = None
    max_abs_err: float | None = None
    seconds: float = 0.0
    note: str = ""
    outputs_agree: bool | None = None

    @property
    def good(self) -> bool:
        """Not a failure to blame: verified, or its outputs agree."""
        return self.passed or self.outputs_agree is True

    @property
    def verdict(self) -> str:
        if self.note.startswith("tool error"):
            return self.note
        if not self.modified:
            return "unchanged"
        if self.passed:
            return "verifies"
        if self.outputs_agree:
            return f"outputs agree, FAILS at intermediate {self.first_failure}"
        return f"FAILS at {self.first_failure}"


@dataclass
class Culprit:
    """What :func:`find_culprit` found.

    Attributes:
        tool: the tool step (``onnxslim``, ``ort:extended``...); params: the caller's
            parameters of it.
        switches: the P switch names bisected, in the tool's order; switch_source: where they
            come from.
        culprit: the switch whose removal makes the step verify (None: none found).
        confirmed: a run with only the culprit off verified.
        fix_params: the tool's parameters with the culprit off; fix: the one-line fix
            (``lab.apply("onnxslim", skip_fusion_patterns=["FusionConvBN"])``); cli_fix: the same
            as ``onnx-lab optimize`` options.
        runs: every run, in order; bound: ⌈log₂P⌉+2.
        message: one line: the culprit and the fix, or why there is none.
    """

    tool: str
    params: dict[str, Any]
    switches: list[str]
    switch_source: str
    culprit: str | None
    confirmed: bool
    fix_params: dict[str, Any] | None
    fix: str | None
    cli_fix: str | None
    runs: list[CulpritRun]
    bound: int
    message: str
    switch: Switch | None = field(default=None, repr=False)

    @property
    def verification_runs(self) -> int:
        """Runs that were verified (the step's own verification, when reused, included)."""
        return sum(r.verified or r.note == _REUSED for r in self.runs)

    def table(self) -> pd.DataFrame:
        """One row per run: run, disabled (list), enabled_count, modified, verified,
        passed, verdict, first_failure, max_abs_err, seconds, note."""
        return pd.DataFrame(
            [{"run": i, "disabled": list(r.disabled), "enabled_count": len(r.enabled),
              "modified": r.modified, "verified": r.verified or r.note == _REUSED,
              "passed": r.passed, "verdict": r.verdict, "first_failure": r.first_failure,
              "max_abs_err": r.max_abs_err, "seconds": round(r.seconds, 4), "note": r.note}
             for i, r in enumerate(self.runs, 1)],
            columns=["run", "disabled", "enabled_count", "modified", "verified", "passed",
                     "verdict", "first_failure", "max_abs_err", "seconds", "note"])

    def summary(self) -> dict[str, Any]:
        """The plain fields (for JSON)."""
        return {"tool": self.tool, "params": _plain(self.params), "culprit": self.culprit,
                "confirmed": self.confirmed, "fix": self.fix, "cli_fix": self.cli_fix,
                "fix_params": _plain(self.fix_params), "message": self.message,
                "switches": list(self.switches), "switch_source": self.switch_source,
                "verification_runs": self.verification_runs, "bound": self.bound,
                "runs": [{"disabled": list(r.disabled), "enabled": list(r.enabled),
                          "modified": r.modified, "verified": r.verified or r.note == _REUSED,
                          "passed": r.passed, "verdict": r.verdict,
                          "first_failure": r.first_failure, "max_abs_err": r.max_abs_err,
                          "seconds": round(r.seconds, 4), "note": r.note} for r in self.runs]}

    def __repr__(self) -> str:
        lines = [f"Culprit({self.tool}: {self.message}; {self.verification_runs} verification "
                 f"run(s), bound {self.bound} for {len(self.switches)} switches)"]
        for i, r in enumerate(self.runs, 1):
            off = ", ".join(r.disabled) if len(r.disabled) <= 6 else \
                f"{', '.join(r.disabled[:5])} ... ({len(r.disabled)})"
            lines.append(f"  run {i}: off [{off}] -> {r.verdict}")
        return "\n".join(lines)


_REUSED = "the step's own verification"


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------------------- arguments
def switchable_tools() -> list[str]:
    """The registered tool steps that have switches to bisect."""
    out = []
    for name in pass_names():
        try:
            p = get_pass(name)
        except PassError:
            continue
        if isinstance(p, WholeModelPass) and p.switch_params:
            out.append(name)
    return out


def _tool(name: str, params: Mapping[str, Any]) -> WholeModelPass:
    """The tool pass ``name`` with ``params``; a LabError with the fix for anything else."""
    if not isinstance(name, str):
        raise InputError(f"The tool must be a pass name, got {name!r}.",
                         fix=f"Use one of {', '.join(switchable_tools())}.")
    try:
        p = get_pass(name, **params)
    except UnknownNameError:
        raise unknown_name("tool", name, switchable_tools(),
                           fix=f"Tools with switches to bisect: {', '.join(switchable_tools())}."
                           ) from None
    if not isinstance(p, WholeModelPass) or not p.switch_params:
        what = ("is one onnxoptimizer pass: when its step fails verification, it is the "
                "culprit itself" if name.startswith("onnxoptimizer:") else
                "has no switches of its own to bisect: its verification report "
                "(r.first_failure, r.verification) already names where it goes wrong")
        alt = "lab.find_culprit('onnxoptimizer', passes=[...]) bisects a pass list; " \
            if name.startswith("onnxoptimizer:") else ""
        raise PassError(f"{name!r} {what}.",
                        fix=f"{alt}Tools with switches: {', '.join(switchable_tools())}.")
    return p


def _value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def _fix_line(tool: str, p: WholeModelPass, params: Mapping[str, Any]) -> str:
    defaults = {q.name: q.default for q in p.params}
    args = "".join(f", {k}={_value(v)}" for k, v in params.items()
                   if k in defaults and v != defaults[k] and v not in (None, [], ()))
    return f"lab.apply({json.dumps(tool)}{args})"


def skip_params(tool: str, names: Sequence[str], **params: Any) -> dict[str, Any]:
    """The parameters of ``tool`` (with ``params``) that turn the switches ``names`` off.

    What ``onnx-lab optimize --tool T --skip a,b`` runs. No model is needed: each name is
    placed by the tool's own registry (:meth:`WholeModelPass.switch_named`).

    Raises:
        UnknownNameError / PassError: unknown tool, a tool without switches, an unknown name.
    """
    p = _tool(tool, params)
    return p.params_without([p.switch_named(n) for n in names])


def _cli_fix(tool: str, p: WholeModelPass, user: Mapping[str, Any],
             off: Sequence[Switch]) -> str | None:
    # The command has no option for the caller's own parameters: only a plain run has a
    # command-line fix.
    defaults = {q.name: q.default for q in p.params}
    if any(v != defaults.get(k) and v not in (None, [], ()) for k, v in user.items()):
        return None
    return f"onnx-lab optimize IN OUT --tool {tool} --skip {','.join(s.name for s in off)}"


# ---------------------------------------------------------------------------- the search
class _Runner:
    """Runs the tool with switches off and verifies the result against ``before``."""

    def __init__(self, before: LabModel, dims: dict, shapes: dict, tool: str,
                 p: WholeModelPass, opts: dict[str, Any], switches: list[Switch]) -> None:
        self.before, self.dims, self.shapes = before, dims, shapes
        self.tool, self.p, self.opts, self.switches = tool, p, opts, switches
        self.cache: dict = {}
        self.runs: list[CulpritRun] = []

    def __call__(self, off: Sequence[Switch]) -> CulpritRun:
        t0 = time.perf_counter()
        params = self.p.params_without(off)
        names = {s.name for s in off}
        run = CulpritRun([s.name for s in off],
                         [s.name for s in self.switches if s.name not in names], params,
                         modified=False, verified=False, passed=True)
        try:
            result = run_pass(self.before, self.tool, model_dims=self.dims,
                              model_shapes=self.shapes, **params)
        except PassError as e:  # a combination the tool cannot run: not a fix
            run.passed, run.modified = False, True
            run.note = f"tool error: {e.problem}"
        else:
            run.modified = result.modified
            if result.modified:
                report = report_of(self.before, result.model, result, dims=self.dims,
                                   shapes=self.shapes, cache=self.cache,
                                   reference_shapes=True, **self.opts)  # as the step's
                run.verified = True
                run.passed = bool(report.attrs.get("passed", True))
                run.first_failure = report.attrs.get("first_failure")
                run.max_abs_err = report.attrs.get("max_abs_err")
                run.outputs_agree = _outputs_agree(report)
                # Keep only the reference's captures: every run compares with it.
                for k in [k for k, v in self.cache.items() if v[0] is not self.before]:
                    del self.cache[k]
        run.seconds = time.perf_counter() - t0
        self.runs.append(run)
        return run


def _outputs_agree(report: Any) -> bool | None:
    """Whether a verification report's model outputs are all within tolerance."""
    if report is None:
        return None
    rows = report.rows if hasattr(report, "rows") else report.to_dict(orient="records")
    outs = [bool(r["passed"]) for r in rows if r["match"] == "output"]
    return all(outs) if outs else None


def _first_run(first: PassResult, switches: list[Switch]) -> CulpritRun:
    passed = first.verify_passed is not False
    return CulpritRun([], [s.name for s in switches], dict(first.params), first.modified,
                      verified=False, passed=passed, first_failure=first.first_failure,
                      max_abs_err=first.max_abs_err,
                      seconds=first.seconds + (first.verify_seconds or 0.0),
                      note=_REUSED if first.modified else "",
                      outputs_agree=_outputs_agree(getattr(first, "verification", None)))


def _search(before: LabModel, dims: dict, shapes: dict, tool: str, p: WholeModelPass,
            opts: dict[str, Any], params: dict[str, Any],
            first: PassResult | None) -> Culprit:
    switches = p.switches(before)
    names = [s.name for s in switches]
    bound = run_bound(len(switches))
    run = _Runner(before, dims, shapes, tool, p, opts, switches)

    def done(culprit: Switch | None, confirmed: bool, message: str) -> Culprit:
        fix_params = p.params_without([culprit]) if culprit is not None else None
        return Culprit(tool, dict(params), names, p.switch_source,
                       culprit.name if culprit else None, confirmed, fix_params,
                       _fix_line(tool, p, fix_params) if fix_params else None,
                       _cli_fix(tool, p, params, [culprit]) if culprit else None,
                       run.runs, bound, message, culprit)

    if first is not None:
        run.runs.append(_first_run(first, switches))
        full = run.runs[-1]
    else:
        full = run([])
    if not full.modified:
        return done(None, False, f"no culprit: {tool} left the model unchanged")
    if full.passed:
        return done(None, False, NO_CULPRIT)
    if full.outputs_agree:
        # A rewrite whose outputs agree is not to blame: the failing intermediate is one the
        # verification could not pair honestly, or a difference the outputs do not carry.
        return done(None, False, f"no culprit: the outputs agree (max_abs_err "
                    f"{full.max_abs_err or 0.0:.3g}); verification fails only at the intermediate "
                    f"tensor {full.first_failure!r}, which no switch is blamed for")
    if not switches:
        return done(None, False, f"no culprit: {tool} has no switch left to turn off on this "
                    "model (the parameters already turn them off, or it reports none)")
    cand = list(switches)
    last: CulpritRun | None = None
    while len(cand) > 1:
        half = cand[: (len(cand) + 1) // 2]
        last = run(half)
        cand = half if last.good else cand[len(half):]
    c = cand[0]
    if not (last is not None and last.disabled == [c.name] and last.good):
        last = run([c])
    if last.good:
        fix = _fix_line(tool, p, p.params_without([c]))
        return done(c, True, f"culprit: {c.name} ({c.param}); the step verifies without it: "
                    f"{fix}")
    passing = [r for r in run.runs if r.good and r.modified]
    hint = (f"; the step verified with {', '.join(passing[0].disabled)} off"
            if passing else "")
    return done(None, False, f"no single switch: turning {c.name} off alone does not make "
                f"the step verify (several rewrites at fault, or one {tool} always runs)"
                f"{hint}")


# ---------------------------------------------------------------------------- public
def find_culprit(source: Any, tool: str, *, verify: bool | Mapping[str, Any] = True,
                 dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None,
                 _first: PassResult | None = None, **params: Any) -> Culprit:
    """Name the switch of ``tool`` that makes its step fail verification on ``source``.

    Nothing is pushed on any history: the runs are compared with ``source``'s current model.

    Args:
        source: a Lab, a History, a LabModel, a path... (see ``core.source.resolve``).
        tool: a tool step with switches (:func:`switchable_tools`: ``onnxslim``,
            ``onnxsim``, ``onnxoptimizer``, ``ort:basic``, ``ort:extended``, ``ort:all``).
        verify: True or a dict of verification options (feeds, atol, rtol, seed, max_bytes,
            intermediates, providers), as for ``lab.apply``.
        dims, shapes: values for symbolic dims / input shapes (merged over the source's).
        **params: the tool's parameters; its switches they already turn off are not bisected.

    Returns:
        A :class:`Culprit`: ``culprit`` (a switch name or None), ``fix`` (one line),
        ``runs`` (each run's disabled switches and verdict), ``verification_runs`` (at most
        ``bound`` = ⌈log₂P⌉+2) and ``message`` ("no culprit: the step verifies" when it does).

    Raises:
        UnknownNameError: unknown tool. PassError: a pass without switches, bad parameters.
        InputError: ``verify=False`` (nothing to bisect on). DimError: symbolic dims.

    Example:
        >>> c = find_culprit(lab, "onnxslim")
        >>> c.culprit, c.fix
    """
    p = _tool(tool, params)
    opts = verify_options(verify)
    if opts is None:
        raise InputError("find_culprit needs verification: it bisects on its verdicts.",
                         fix="Pass verify=True or a dict of options (e.g. {'atol': 1e-3}).")
    model, d, s = resolve(source, dims, shapes)
    return _search(model, dict(d), dict(s), tool, p, opts, dict(params), _first)


def apply(history: History, pass_name: str, matches: Sequence[str] | str | None = None,
          verify: bool | Mapping[str, Any] = True, **params: Any) -> PassResult:
    """``steps.apply``, then, for a tool step, :func:`find_culprit` on its verdict.

    The step is pushed as usual (a failed verification does not undo it); the finder reuses
    the step's own verification as its first run, so a step that verifies costs nothing more.
    The result gets ``culprit`` (a :class:`Culprit`) and, when one is found, a note with the
    fix.

    Example:
        >>> r = lab.apply("onnxslim", find_culprit=True)
        >>> r.culprit.fix
    """
    p = _tool(pass_name, params)
    if matches is not None:
        raise InputError(f"{pass_name} is a whole-model tool: it has no matches to choose.",
                         fix="Call lab.apply(tool, find_culprit=True) without matches.")
    opts = verify_options(verify)
    if opts is None:
        raise InputError("find_culprit needs verification: it bisects on its verdicts.",
                         fix="Drop verify=False (or --no-verify), or drop find_culprit.")
    before, dims, shapes = history.model, dict(history.dims), dict(history.shapes)
    result = apply_step(history, pass_name, None, verify, **params)
    c = _search(before, dims, shapes, pass_name, p, opts, dict(params), result)
    result.culprit = c  # type: ignore[attr-defined]
    if c.culprit is not None:
        result.notes.append(c.message)
    return result
