"""FusionLab: see every optimization opportunity, preview it, apply it verified, undo it.

A view over ``lab.patterns()``, ``lab.apply(...)``, ``lab.apply_preset("safe")``,
``lab.history``, ``lab.undo()/redo()/checkout()``, ``lab.save(...)``,
``onnx_lab.transforms.get_pass(...).run(...)`` (preview without touching the history),
``onnx_lab.transforms.explain(pattern)`` (the teaching text with the math) and
``onnx_lab.transforms.near_miss.near_misses(lab.model, step=...)`` (the "Not fused, because"
panel: onnx_lab's own patterns and the transformer fusions that almost applied).
"""

from __future__ import annotations

import time
from typing import Any

import ipywidgets as w

from onnx_lab._display import notebook_html
from onnx_lab._pandas import pd
from onnx_lab.lab import as_lab
from onnx_lab.render import render_model
from onnx_lab.render._html import esc_text
from onnx_lab.render.tables import changes_frame, format_bytes
from onnx_lab.transforms import get_pass
from onnx_lab.transforms.explain import explain
from onnx_lab.transforms.near_miss import near_misses
from onnx_lab.widgets._common import (
    PagedTable,
    SelectableTable,
    View,
    code_html,
    history_html,
    info_html,
)
from onnx_lab.widgets._context import RunContext
from onnx_lab.widgets._links import selection

__all__ = ["FusionLab"]

ALL = "*"
TRANSFORMERS = "ort_transformers"
NOT_FUSED = "Not fused, because"
NEAR_MISSES = 4  # that panel's place in the accordion
PREVIEW_NONE = "<i>Nothing previewed yet: tick matches above and click Preview.</i>"
PREVIEW_STALE = ("<i>The preview was of an earlier version and was cleared: tick matches and "
                 "click Preview again.</i>")
# What the verification and changes panels say before a step has filled them (they opened on
# an empty table, not a word).
VERIFICATION_NONE = ("No step applied yet: Apply, the safe preset, onnxsim or an ORT level "
                     "with verify ticked shows its report here.")
CHANGES_NONE = "No step applied yet: the nodes a step fuses, rewrites or removes show here."
#: The model types the ORT dropdown offers (each tested on a model of its family).
TRANSFORMER_TYPES = ("bert", "gpt2", "vit", "clip", "t5")


def sort_matches(patterns: pd.DataFrame) -> pd.DataFrame:
    """Matches in the order FusionLab lists them: real fusions first, then by saving.

    A fusion is a ``fuse_*`` pass; among the rest, rows that save no bytes (``constant_node``,
    identities, dropouts: bookkeeping a preset does anyway) are *housekeeping* and go last.
    Within each group: most nodes saved, then most bytes saved. Adds a bool column
    ``housekeeping``.
    """
    if not len(patterns):
        return patterns.assign(housekeeping=pd.Series(dtype=bool))
    fusion = patterns["pass"].astype(str).str.startswith("fuse_")
    saves = pd.to_numeric(patterns["saving_bytes"], errors="coerce").fillna(0)
    house = ~fusion & (saves <= 0)
    df = patterns.assign(housekeeping=house, _group=(~fusion).astype(int) + house.astype(int),
                         _nodes=-pd.to_numeric(patterns["saving_nodes"],
                                               errors="coerce").fillna(0),
                         _bytes=-saves)
    df = df.sort_values(["_group", "_nodes", "_bytes"], kind="stable")
    return df.drop(columns=["_group", "_nodes", "_bytes"]).reset_index(drop=True)


def _bytes(value: Any) -> str:
    try:
        return esc_text(format_bytes(value))
    except (TypeError, ValueError):
        return ""


def _explain(pattern: str) -> str | None:
    """Markdown explanation from the transforms package (None when it has none)."""
    return explain(pattern)


class FusionLab(View):
    """Pick optimization opportunities, preview them, apply them verified, undo and save.

    Args:
        lab: a :class:`~onnx_lab.lab.Lab` (changed in place by Apply/Undo/Redo, as
            ``lab.apply`` does).
        page_size: rows per page of the matches table.

    Attributes:
        result: the object behind the last action: the patterns DataFrame, a PassResult
            (Apply, onnxsim, ORT), a list of PassResults (safe preset), the preview dict
            ``{"result", "before", "after"}``, or the saved path.

    Example:
        >>> import onnx_lab
        >>> from onnx_lab.widgets import FusionLab
        >>> lab = onnx_lab.open("sample:convnet")
        >>> FusionLab(lab)
    """

    def __init__(self, lab: Any, *, page_size: int = 20) -> None:
        self.lab = as_lab(lab)
        self.result: Any = None
        self.patterns = pd.DataFrame()
        self.pattern_filter = w.Dropdown(description="pattern", options=[("all", ALL)],
                                         value=ALL)
        self.matches = SelectableTable(
            # what a match saves before the long description: at 1280 px the table is wider
            # than the widget, and −nodes/−bytes sat behind a horizontal scroll
            "match_id", [("pattern", 120), ("pass", 150), ("saving_nodes", 60, "−nodes"),
                         ("saving_bytes", 70, "−bytes"), ("anchor", 190),
                         ("description", 320)],
            formatters={"saving_bytes": _bytes},
            page_size=page_size, on_change=self._guard(self._on_select))
        self.matches.add_class("onnx-lab-matches")
        self.select_all = w.Button(description="select all shown", layout=w.Layout(width="150px"))
        self.preview_button = w.Button(description="Preview", icon="eye",
                                       tooltip="before/after render of the selected matches")
        self.apply_button = w.Button(description="Apply", icon="check", button_style="primary",
                                     tooltip="apply the selected matches, then verify")
        self.apply_button.add_class("onnx-lab-apply")
        # Heavy steps (the safe preset, Apply over several passes) report one step per pass.
        self.progress = w.IntProgress(value=0, min=0, max=1, layout=w.Layout(
            width="240px", visibility="hidden"))
        self.progress_label = w.HTML()
        #: Seconds of the last step: ``call_s`` in the library call, ``view_s`` redrawing.
        self.timing: dict[str, float] = {}
        # on use: anywidget loads with the first graph view
        from onnx_lab.widgets.canvas import GraphCanvas

        # The run-context bar: dims/shapes for verification, its feeds, and verify on/off.
        self.context = RunContext(self.lab, verify=True)
        self.verify = self.context.verify
        self.show_housekeeping = w.Checkbox(value=False, indent=False,
                                            description="show housekeeping rows",
                                            layout=w.Layout(width="260px"))
        self.undo_button = w.Button(description="Undo", icon="undo")
        self.redo_button = w.Button(description="Redo", icon="redo")
        self.safe_button = w.Button(description="safe preset", icon="magic",
                                    tooltip='lab.apply_preset("safe")')
        self.onnxsim_button = w.Button(description="onnxsim", tooltip='lab.apply("onnxsim")')
        self.ort_level = w.Dropdown(
            options=[("ORT basic", "ort:basic"), ("ORT extended", "ort:extended"),
                     ("ORT all", "ort:all")]
            + [(f"ORT transformer fusions ({mt})", f"{TRANSFORMERS}:{mt}")
               for mt in TRANSFORMER_TYPES], value="ort:basic", layout=w.Layout(width="140px"))
        self.ort_button = w.Button(description="apply ORT level",
                                   tooltip="onnxruntime offline optimization at that level")
        self.step = w.BoundedIntText(value=0, min=0, max=0, description="step",
                                     layout=w.Layout(width="140px"))
        self.checkout_button = w.Button(description="Checkout", layout=w.Layout(width="100px"))
        self.save_path = w.Text(placeholder="optimized.onnx", description="save as",
                                layout=w.Layout(width="360px"))
        self.overwrite = w.Checkbox(value=False, description="overwrite", indent=False,
                                    layout=w.Layout(width="100px"))
        self.save_button = w.Button(description="Save as…", icon="save")
        self.summary_html = w.HTML()
        self.history_html = w.HTML()
        self.history_html.add_class("onnx-lab-history-box")
        self.explanation = w.Output(layout=w.Layout(border="1px solid #ddd", padding="4px"))
        self.explanation.add_class("onnx-lab-explanation")  # the only math typeset
        self.before_canvas = GraphCanvas(self.lab, height=380)
        self.after_canvas = GraphCanvas(None, height=380)
        # What the panel holds when no preview is drawn (none yet, or one of an older version
        # cleared by a step): not two bare "before" / "after" headings over nothing.
        self.preview_note = w.HTML(PREVIEW_NONE, layout=w.Layout(width="100%"))
        self.preview_box = w.HBox(
            [self.preview_note, w.VBox([w.HTML("<b>before</b>"), self.before_canvas],
                    layout=w.Layout(width="50%", min_width="300px")),
             w.VBox([w.HTML("<b>after</b>"), self.after_canvas],
                    layout=w.Layout(width="50%", min_width="300px"))],
            layout=w.Layout(flex_flow="row wrap", width="100%"))
        self.verification = PagedTable(page_size=15, caption=VERIFICATION_NONE)
        self.changes = PagedTable(page_size=15, caption=CHANGES_NONE)
        # The fusions that did not happen and the condition that failed: onnx_lab's own
        # patterns and the transformer subgraphs, with the last fusion step's own rows
        # (onnxruntime's log) where it ran on the current version. Found when the panel is
        # first opened after a refresh (or near_miss_rows is read): on a large model the
        # transformer subgraph search takes seconds the other panels need not wait for.
        self.near_misses = PagedTable(page_size=10)
        self._near_miss_rows = pd.DataFrame()
        self._near_stale = True
        self._fusion_step: Any = None
        self._current_step: int | None = None  # the history's current step, once drawn
        self._n_house = 0  # housekeeping rows the pattern filter keeps
        self._preview_model: Any = None
        self._clear_preview()  # the note, not two empty canvases

        for button, fn in [(self.select_all, self._select_all), (self.preview_button, self.preview),
                           (self.apply_button, self.apply), (self.undo_button, self.undo),
                           (self.redo_button, self.redo), (self.safe_button, self.apply_safe),
                           (self.onnxsim_button, self.apply_onnxsim),
                           (self.ort_button, self.apply_ort),
                           (self.checkout_button, self.checkout), (self.save_button, self.save)]:
            button.on_click(self._clicked(fn))
        self.pattern_filter.observe(self._guard(self._filter), names="value")
        self.show_housekeeping.observe(self._guard(self._filter), names="value")
        self.step.observe(self._guard(self._step_picked), names="value")
        self._drawing_history = False

        acc = w.Accordion(children=[self.explanation, self.preview_box, self.verification,
                                    self.changes, self.near_misses])
        acc.set_title(NEAR_MISSES, NOT_FUSED)
        acc.set_title(0, "Explanation of the selected pattern")
        acc.set_title(1, "Preview (before | after)")
        acc.set_title(2, "Verification of the last step (failures first)")
        acc.set_title(3, "Nodes the last step fused, rewrote or removed")
        acc.selected_index = 0
        acc.observe(self._guard(self._panel_opened), names="selected_index")
        self.details = acc
        wrap = w.Layout(flex_flow="row wrap")
        super().__init__([
            self.summary_html,
            w.HBox([self.pattern_filter, self.show_housekeeping, self.select_all], layout=wrap),
            self.matches,
            self.context,
            w.HBox([self.preview_button, self.apply_button, self.undo_button,
                    self.redo_button], layout=wrap),
            w.HBox([self.safe_button, self.onnxsim_button, self.ort_level, self.ort_button,
                    self.step, self.checkout_button], layout=wrap),
            w.HBox([self.progress, self.progress_label], layout=wrap),
            w.HBox([self.save_path, self.overwrite, self.save_button], layout=wrap),
            w.HTML("<b>History</b>"), self.history_html,
            acc,
        ])
        self.add_class("onnx-lab-fusion-lab")
        self._result_panels = (self.before_canvas, self.after_canvas, self.verification,
                               self.changes)

        self.link = selection(self.lab)
        self.link.subscribe(self, self._guard(self.reveal))
        self._defer(self.refresh, "Finding patterns…")  # after the frame shows

    # ------------------------------------------------------------------ helpers
    def _clicked(self, fn):
        guarded = self._guard(fn)
        return lambda _button: guarded()

    @property
    def selected(self) -> list[str]:
        """The ticked match ids."""
        return list(self.matches.selected)

    def select(self, match_ids: list[str]) -> None:
        """Tick these match ids (as clicking their checkboxes does)."""
        self.matches.select(match_ids)

    def reveal(self, node_id: str) -> str | None:
        """Centre ``node_id`` in the preview canvases where it is drawn (linked selection)."""
        key = self.before_canvas.focus(node_id)
        after = self.after_canvas.focus(node_id)
        return key or after

    def _clear_preview(self) -> None:
        self.before_canvas.show(None)
        self.after_canvas.show(None)
        if self._preview_model is not None:
            self.preview_note.value = PREVIEW_STALE
        self._preview_model = None
        for box in self.preview_box.children[1:]:
            box.layout.display = "none"
        self.preview_note.layout.display = None

    def refresh(self) -> None:
        """Re-read patterns and history from the Lab (after changes made in code)."""
        if self._preview_model is not None and self._preview_model is not self.lab.model:
            self._clear_preview()  # a preview of another model version would mislead
        pats = self._call(self.lab.patterns, busy="Finding patterns…")
        if pats is None:
            return
        self.patterns = sort_matches(pats)
        counts = pats["pattern"].value_counts()
        current = self.pattern_filter.value
        opts = [("all", ALL)] + [(f"{p} ({n})", p) for p, n in sorted(counts.items())]
        self.pattern_filter.options = opts
        self.pattern_filter.value = current if current in {v for _, v in opts} else ALL
        known = set(pats["match_id"])
        self.matches.selected = [m for m in self.matches.selected if m in known]
        self._filter()
        self._draw_history()
        self._near_stale = True
        if self.details.selected_index == NEAR_MISSES:
            self._show_near_misses()
        if self.result is None:
            self.result = pats
            self.code.value = code_html("lab.patterns()")

    def _filter(self, _change: Any = None) -> None:
        df = self.patterns
        if len(df) and self.pattern_filter.value != ALL:
            df = df[df["pattern"] == self.pattern_filter.value]
        n_house = int(df["housekeeping"].sum()) if len(df) else 0
        self.show_housekeeping.description = f"show housekeeping rows ({n_house})"
        self._n_house = n_house
        if len(df) and not self.show_housekeeping.value:
            df = df[~df["housekeeping"]]
        self.matches.set(df)
        self._on_select(self.matches.selected)
        if self._current_step is not None:  # (the history is drawn after the first filter)
            self._summary()

    def _select_all(self) -> None:
        self.matches.select(list(self.matches.selected) + list(self.matches.df["match_id"]))

    def _draw_history(self) -> None:
        hist = self.lab.history
        self.history_html.value = history_html(hist)
        current = int(hist.loc[hist["current"], "step"].iloc[0]) if "current" in hist else \
            int(hist["step"].iloc[-1])
        self._drawing_history = True
        try:
            self.step.max = int(hist["step"].max())
            self.step.value = current
        finally:
            self._drawing_history = False
        self.undo_button.disabled = current == 0
        self.redo_button.disabled = current >= int(hist["step"].max())
        self._current_step = current
        self._summary()

    def _summary(self) -> None:
        """The line above the table; where every row the filter keeps is housekeeping, it
        says so (the table read "no rows" under "13 opportunities found")."""
        n = len(self.lab.index)
        text = (f"<b>{n}</b> nodes now; <b>{len(self.patterns)}</b> opportunities found "
                f"(step {int(self._current_step):d} of the history)")
        if not len(self.matches.df) and not self.show_housekeeping.value and self._n_house:
            text += (f"; <i>no fusion to show, {self._n_house:d} housekeeping row(s) hidden: "
                     "tick <b>show housekeeping rows</b> to list them</i>")
        self.summary_html.value = text

    def _step_picked(self, change: dict) -> None:
        """A step typed in the step box: select the nodes it made in the other widgets."""
        if self._drawing_history:
            return
        results = self.lab.results
        step = int(change["new"])
        r = results[step] if 0 <= step < len(results) else None
        if r is None:
            return
        entries = self.lab.index.entries
        made = [n for n in (getattr(r, "provenance", None) or {}) if n in entries]
        if made:
            self.link.select(made[0], source=self)

    def _on_select(self, keys: list[str]) -> None:
        self.apply_button.disabled = not keys
        self.preview_button.disabled = not keys
        if keys:
            # Linked selection: the last ticked match's anchor node in the other widgets.
            row = self.patterns[self.patterns["match_id"] == keys[-1]]
            if len(row):
                nodes = [row["anchor"].iloc[0], *row["node_ids"].iloc[0]]
                node = next((n for n in nodes if n in self.lab.index.entries), None)
                if node is not None:
                    self.link.select(node, source=self)
                    self.before_canvas.focus(node)
        # Nothing ticked: the first pattern the table shows, not the first of every match (a
        # hidden housekeeping one, explained under a table of fusions or of no rows).
        sel = self.patterns[self.patterns["match_id"].isin(keys)] if keys else self.matches.df
        patterns = list(dict.fromkeys(sel["pattern"])) if len(sel) else []
        # Assigning outputs (rather than clear_output) also works outside a kernel (tests).
        self.explanation.outputs = ()
        if not keys:
            patterns = patterns[:1]
        from IPython.display import HTML, Markdown

        if not patterns:
            self.explanation.append_display_data(HTML(notebook_html(
                "<i>No pattern is shown in the table: nothing to explain. Tick a row, or "
                "widen the filter (<b>show housekeeping rows</b>), to read about its "
                "pattern.</i>")))

        for p in patterns[:3]:
            text = _explain(p)
            if text is not None:  # onnx_lab's own teaching text, its math typeset
                self.explanation.append_display_data(Markdown(text))
                continue
            # A match's description names the model's nodes: text, neither Markdown (a name
            # "[Conv](https://...)" was a link) nor math.
            rows = self.patterns[self.patterns["pattern"] == p]
            desc = rows["description"].iloc[0] if len(rows) else ""
            self.explanation.append_display_data(HTML(notebook_html(
                f"<b>{esc_text(p)}</b>: {esc_text(desc)}")))

    def _groups(self) -> list[tuple[str, list[str]]]:
        """Selected match ids grouped by pass, in table order."""
        sel = self.patterns[self.patterns["match_id"].isin(self.selected)]
        out: dict[str, list[str]] = {}
        for mid, pname in zip(sel["match_id"], sel["pass"]):
            out.setdefault(pname, []).append(mid)
        return list(out.items())

    def _verify(self) -> tuple[Any, str]:
        """``verify=`` from the bar (written to the Lab first) and its code ('' default)."""
        self.context.apply()
        return self.context.verify_arg(), self.context.verify_code()

    def _with_bar(self, code: str) -> str:
        bar = self.context.code()
        imports = "from onnx_lab.widgets._context import image_feeds; " \
            if "image_feeds(" in code else ""
        return imports + (bar + "; " if bar else "") + code

    def _on_progress(self, done: int, total: int, label: str) -> None:
        self.progress.layout.visibility = "visible"
        self.progress.max = max(int(total), 1)
        self.progress.value = min(int(done), self.progress.max)
        self.progress_label.value = f"<small>{esc_text(str(label))} ({int(done)}/{int(total)})</small>"

    def _timed(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``self._call(fn, ...)``, its seconds kept in :attr:`timing` (``call_s``)."""
        t = time.perf_counter()
        try:
            return self._call(fn, *args, **kwargs)
        finally:
            self.timing = {"call_s": time.perf_counter() - t}

    def _done(self, result: Any, code: str) -> None:
        t_view = time.perf_counter()
        try:
            self._show_done(result, code)
        finally:
            self.timing["view_s"] = time.perf_counter() - t_view
            self.progress.layout.visibility = "hidden"
            self.progress_label.value = ""
        if self.error is None and "call_s" in self.timing:
            self.status.value += (f"<div style='color:#666;font-size:12px'>"
                                  f"{self.timing['call_s']:.1f} s in the library call, "
                                  f"{self.timing['view_s']:.1f} s redrawing</div>")

    def _show_done(self, result: Any, code: str) -> None:
        self.result = result
        results = result if isinstance(result, list) else [result]
        # The last transformer fusion step: its near-misses (walked for its model type, with
        # onnxruntime's log) stand in for the structural ones while its version is current.
        step = next((r for r in reversed(results)
                     if isinstance(getattr(r, "near_misses", None), pd.DataFrame)), None)
        if step is not None:
            self._fusion_step = step
        code = self._with_bar(code)
        self.code.value = code_html(code)
        self.matches.selected = []
        self.refresh()
        self.code.value = code_html(code)
        msgs = []
        for r in results:
            if r is None:
                continue
            if getattr(r, "dropped", None):
                # the preset went back before it: its nodes are not in the current version
                msgs.append(f"{r.name}: dropped ({r.nodes_before} → {r.nodes_after} nodes, "
                            "its version does not load at onnxruntime's default options; "
                            "the passes after it ran again without it)")
            elif r.modified:
                msgs.append(f"{r.name}: {r.nodes_before} → {r.nodes_after} nodes, "
                            + ("verification passed" if r.verify_passed else
                               "not verified" if r.verify_passed is None else
                               f"verification FAILED at {r.first_failure}"))
            else:
                msgs.append(f"{r.name}: nothing changed ({r.reason})")
        failed = any(r is not None and (r.verify_passed is False or getattr(r, "dropped", None))
                     for r in results)
        self._show_verification(results)
        self._show_changes(results)
        if step is not None and len(step.near_misses) and not failed:
            self.details.selected_index = NEAR_MISSES  # the step left something unfused: say why
        if msgs and self.error is None:
            self.status.value = info_html("; ".join(msgs), kind="warn" if failed else "ok")

    def _show_verification(self, results: list[Any]) -> None:
        """The verification report of the last verified step (``result.verification``)."""
        last = next((r for r in reversed(results) if r is not None
                     and getattr(r, "verification", None) is not None
                     and not getattr(r, "dropped", None)), None)
        if last is None:
            names = " + ".join(r.name for r in results if r is not None)
            if names:
                why = ("not verified (verify unticked)" if not self.verify.value
                       else "nothing verified (no node changed)")
                self.verification.set(pd.DataFrame(), caption=f"{names}: {why}.")
            return
        report = last.verification
        if "passed" in report:
            report = report.sort_values("passed", kind="stable")
        self.verification.set(report, caption=f"{last.name}: {len(report)} tensors compared, "
                                              f"max_abs_err {last.max_abs_err}")
        if last.verify_passed is False:
            self.details.selected_index = 2

    def _show_changes(self, results: list[Any]) -> None:
        """Which nodes the step(s) fused, rewrote or removed (``result.provenance/removed``)."""
        frames, names = [], []
        for r in results:
            if r is None or not getattr(r, "modified", False) or getattr(r, "dropped", None):
                continue  # (a step the preset dropped changed nothing in the current version)
            df = changes_frame(r)
            frames.append(df.assign(step=r.name))
            names.append(r.name)
        if not frames:
            names = " + ".join(r.name for r in results if r is not None)
            self.changes.set(pd.DataFrame(), caption=f"{names}: no node changed." if names
                             else "")
            return
        df = pd.concat(frames, ignore_index=True)
        counts = df["change"].value_counts()
        text = ", ".join(f"{int(counts[k])} {k}" for k in ("fused", "rewritten", "new", "removed")
                         if k in counts)
        # Tool steps' fusions beside ours, grouped by fusion type (the fused node's op type).
        fused = df.loc[df["change"] == "fused"]
        if not fused.empty:
            by_op = fused["op_type"].value_counts()
            text += " — by type: " + ", ".join(f"{k} {int(v)}" for k, v in by_op.items())
            df = pd.concat([fused.sort_values("op_type", kind="stable"),
                            df.loc[df["change"] != "fused"]], ignore_index=True)
        self.changes.set(df, caption=f"{' + '.join(names)}: {text} "
                                     "(lab.results[-1].provenance, .removed)")

    @property
    def near_miss_rows(self) -> pd.DataFrame:
        """The rows of the "Not fused, because" panel for the current version (found now
        when the panel has not been opened since the last change)."""
        if self._near_stale:
            self._show_near_misses()
        return self._near_miss_rows

    def _panel_opened(self, change: dict) -> None:
        if change["new"] == NEAR_MISSES and self._near_stale:
            self._show_near_misses()

    def _show_near_misses(self) -> None:
        """The "Not fused, because" panel: ``near_misses(lab.model, step=...)``, one row per
        fusion that almost applied, onnx_lab's own patterns (kind ``pattern``: "Conv →
        BatchNormalization: ... is not a constant") beside the transformer fusions (kind
        ``tool``, source ``ort_transformers``); render one with
        ``lab.render(nodes=row.node_ids)``."""
        self._near_stale = False
        step = self._fusion_step
        current = step is not None and getattr(step, "model", None) is self.lab.model
        # the progress line reaches the page before the search starts
        self.near_misses.table_html = info_html("Looking for fusions that almost applied…",
                                                kind="busy")
        df = self._call(near_misses, self.lab.model, step=step if current else None)
        if df is None:
            self.near_misses.table_html = self.status.value
            return
        self._near_miss_rows = df
        self.details.set_title(NEAR_MISSES, f"{NOT_FUSED} ({len(df)})" if len(df) else NOT_FUSED)
        if not len(df):
            self.near_misses.set(df, caption="Nothing almost fused: no near-misses in this "
                                             "version.")
            return
        counts = df["kind"].value_counts()
        at = next((i for i, r in enumerate(self.lab.results) if r is step), None) \
            if current else None
        where = (f"onnx_lab.transforms.near_miss.near_misses(lab.model, step=lab.results[{at}])"
                 if at is not None else "lab.patterns(near_misses=True)")
        # The transformer rows first: a model has few, and they are why a step fused less.
        shown = df.sort_values("kind", key=lambda k: k != "tool", kind="stable")
        self.near_misses.set(
            shown[["kind", "source", "fusion", "anchor", "reason", "node_ids", "log"]],
            caption=(f"{len(df)} not fused: {int(counts.get('pattern', 0))} of onnx_lab's "
                     f"patterns (kind pattern), {int(counts.get('tool', 0))} transformer "
                     f"fusion(s) (kind tool; source: the step that would fuse them) — {where}"))

    # ------------------------------------------------------------------ actions
    def preview(self) -> None:
        """Render the selected matches before and after (the history is not touched)."""
        groups = self._groups()
        if not groups:
            self.status.value = info_html("Tick one or more matches first.", kind="warn")
            return

        pass_name, ids = groups[0]
        node_ids = sorted({n for lst in self.patterns.loc[self.patterns["match_id"].isin(ids),
                                                          "node_ids"] for n in lst})
        res = self._call(lambda: get_pass(pass_name, matches=ids).run(self.lab.model),
                         busy="Previewing…")
        if res is None:
            return
        before = self._call(self.lab.render, around=node_ids, radius=1, highlight=node_ids,
                            title="before")
        if before is None:
            return
        new_ids = [k for k, v in res.provenance.items() if set(v) & set(node_ids)]
        keep = [n for n in before.nodes if n in res.model.index.entries]
        # The Lab's dims/shapes: the after view keeps the input shapes on its edges.
        after = self._call(render_model, res.model, nodes=keep + new_ids,
                           highlight=new_ids, title="after", dims=self.lab.dims or None,
                           shapes=self.lab.shapes or None)
        if after is None:
            return
        self.before_canvas.show(before, model=self.lab, title="before")
        self.after_canvas.show(after, model=res.model, title="after")
        self._preview_model = self.lab.model
        self.preview_note.layout.display = "none"
        for box in self.preview_box.children[1:]:
            box.layout.display = None
        self.details.selected_index = 1
        self.result = {"result": res, "before": before, "after": after}
        self.code.value = code_html(
            f"onnx_lab.transforms.get_pass({pass_name!r}, matches={ids!r}).run(lab.model)")
        more = f" (previewing {pass_name} only; {len(groups) - 1} other pass(es) selected)" \
            if len(groups) > 1 else ""
        self.status.value = info_html(
            f"{pass_name}: {res.nodes_before} → {res.nodes_after} nodes{more}", kind="info")

    def apply(self) -> None:
        """Apply the selected matches (one verified history step per pass)."""
        groups = self._groups()
        if not groups:
            self.status.value = info_html("Tick one or more matches first.", kind="warn")
            return
        results = []
        codes = []
        t_call = time.perf_counter()
        for i, (pass_name, ids) in enumerate(groups):
            if len(groups) > 1:
                self._on_progress(i, len(groups), f"applying {pass_name}")
            if i:
                # Match ids are stable per model version: re-find and keep those that remain.
                pats = self._call(self.lab.patterns)
                if pats is None:
                    break
                ids = [m for m in ids if m in set(pats["match_id"])]
                if not ids:
                    continue
            verify, vcode = self._verify()
            r = self._call(self.lab.apply, pass_name, matches=ids, verify=verify,
                           busy=f"Applying {pass_name} to {len(ids)} match(es)"
                                + (" and verifying…" if verify is not False else "…"))
            if r is None:
                break
            results.append(r)
            codes.append(f"lab.apply({pass_name!r}, matches={ids!r}"
                         + (f", {vcode}" if vcode else "") + ")")
        self.timing = {"call_s": time.perf_counter() - t_call}
        if results:
            self._done(results[0] if len(results) == 1 else results, "; ".join(codes))

    def apply_safe(self) -> None:
        """``lab.apply_preset("safe")``."""
        verify, vcode = self._verify()
        rs = self._timed(self.lab.apply_preset, "safe", verify=verify,
                         progress=self._on_progress,
                         busy="Applying the safe preset with verification…")
        if rs is not None:
            self._done(list(rs), 'lab.apply_preset("safe"' + (f", {vcode}" if vcode else "")
                       + ")")

    def apply_onnxsim(self) -> None:
        """``lab.apply("onnxsim")``."""
        verify, vcode = self._verify()
        r = self._timed(self.lab.apply, "onnxsim", verify=verify,
                       busy="Running onnxsim and verifying…")
        if r is not None:
            self._done(r, 'lab.apply("onnxsim"' + (f", {vcode}" if vcode else "") + ")")

    def apply_ort(self) -> None:
        """``lab.apply("ort:<level>")`` for the chosen level, or
        ``lab.apply("ort_transformers", model_type=...)``."""
        level = self.ort_level.value
        name, _, model_type = level.partition(":") if level.startswith(TRANSFORMERS) \
            else (level, "", "")
        params = {"model_type": model_type} if model_type else {}
        verify, vcode = self._verify()
        r = self._timed(self.lab.apply, name, verify=verify, **params,
                       busy=f"Running onnxruntime {level} and verifying…")
        if r is not None:
            args = [repr(name)] + [f"model_type={model_type!r}"] * bool(model_type) \
                + [vcode] * bool(vcode)
            self._done(r, f"lab.apply({', '.join(args)})")

    def undo(self) -> None:
        """``lab.undo()``."""
        self._call(self.lab.undo)
        if self.error is None:
            self.result = self.lab.history
            self.refresh()
            self.code.value = code_html("lab.undo()")

    def redo(self) -> None:
        """``lab.redo()``."""
        self._call(self.lab.redo)
        if self.error is None:
            self.result = self.lab.history
            self.refresh()
            self.code.value = code_html("lab.redo()")

    def checkout(self) -> None:
        """``lab.checkout(step)`` for the step in the box."""
        step = int(self.step.value)
        self._call(self.lab.checkout, step)
        if self.error is None:
            self.result = self.lab.history
            self.refresh()
            self.code.value = code_html(f"lab.checkout({step})")

    def save(self) -> None:
        """``lab.save(path)`` for the path in the box."""
        path = self.save_path.value.strip()
        if not path:
            self.status.value = info_html("Type a file name to save to (e.g. optimized.onnx).",
                                          kind="warn")
            return
        kwargs = {"overwrite": True} if self.overwrite.value else {}
        out = self._call(self.lab.save, path, **kwargs, busy=f"Saving {path}…")
        if self.error is None:
            self.result = out if out is not None else path
            self.code.value = code_html(f"lab.save({path!r}"
                                        + (", overwrite=True" if kwargs else "") + ")")
            self.status.value = info_html(f"Saved to {out if out is not None else path}",
                                          kind="ok")
