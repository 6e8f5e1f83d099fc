"""FusionLab: see every optimization opportunity, preview it, apply it verified, undo it.

A view over ``lab.patterns()``, ``lab.apply(...)``, ``lab.apply_preset("safe")``,
``lab.history``, ``lab.undo()/redo()/checkout()``, ``lab.save(...)``,
``onnx_lab.transforms.get_pass(...).run(...)`` (preview without touching the history) and
``onnx_lab.transforms.explain(pattern)`` (the teaching text with the math).
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from onnx_lab._pandas import pd
from onnx_lab.widgets._common import (
    PagedTable,
    SelectableTable,
    View,
    badge,
    code_html,
    info_html,
    rendering_html,
    short,
)

__all__ = ["FusionLab"]

ALL = "*"


def history_html(history: pd.DataFrame) -> str:
    """The history table with a verification badge per step and the current step marked."""
    head = ("<tr><th>step</th><th>pass</th><th>params</th><th>modified</th><th>nodes</th>"
            "<th>verification</th><th>max_abs_err</th><th>seconds</th><th></th></tr>")
    rows = []
    for r in history.to_dict("records"):
        err = r.get("max_abs_err")
        err_txt = "" if err is None or pd.isna(err) else f"{err:.3g}"
        verified = r.get("verify_passed")
        if verified is not None and pd.isna(verified):
            verified = None
        ver = "" if r["step"] == 0 else badge(None if verified is None else bool(verified))
        current = bool(r.get("current", False))
        style = " style='background:#e3f2fd;font-weight:bold'" if current else ""
        rows.append(
            f"<tr class='onnx-lab-history-row' data-step='{int(r['step'])}'{style}>"
            f"<td>{int(r['step'])}</td><td>{html.escape(str(r['pass']))}</td>"
            f"<td>{short(r['params'] or '', 40)}</td><td>{'yes' if r['modified'] else 'no'}</td>"
            f"<td class='onnx-lab-nodes' data-before='{int(r['nodes_before'])}' "
            f"data-after='{int(r['nodes_after'])}'>{int(r['nodes_before'])} → "
            f"{int(r['nodes_after'])}</td>"
            f"<td>{ver}</td><td>{err_txt}</td><td>{float(r['seconds']):.2f}</td>"
            f"<td>{'◀ current' if current else ''}</td></tr>")
    return ("<table class='onnx-lab-history onnx-lab-table' style='font-size:12px'>"
            + head + "".join(rows) + "</table>")


def _bytes(value: Any) -> str:
    from onnx_lab.render.tables import format_bytes

    try:
        return html.escape(format_bytes(value))
    except (TypeError, ValueError):
        return ""


def _explain(pattern: str) -> str | None:
    """Markdown explanation from the transforms package (None when it has none)."""
    from onnx_lab.transforms.explain import explain

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
        from onnx_lab.lab import as_lab

        self.lab = as_lab(lab)
        self.result: Any = None
        self.patterns = pd.DataFrame()
        self.pattern_filter = w.Dropdown(description="pattern", options=[("all", ALL)],
                                         value=ALL)
        self.matches = SelectableTable(
            "match_id", [("pattern", 120), ("pass", 150), ("anchor", 190),
                         ("description", 320), ("saving_nodes", 60, "−nodes"),
                         ("saving_bytes", 70, "−bytes")],
            formatters={"saving_bytes": _bytes},
            page_size=page_size, on_change=self._guard(self._on_select))
        self.matches.add_class("onnx-lab-matches")
        self.select_all = w.Button(description="select all shown", layout=w.Layout(width="150px"))
        self.preview_button = w.Button(description="Preview", icon="eye",
                                       tooltip="before/after render of the selected matches")
        self.apply_button = w.Button(description="Apply", icon="check", button_style="primary",
                                     tooltip="apply the selected matches, then verify")
        self.apply_button.add_class("onnx-lab-apply")
        self.verify = w.Checkbox(value=True, description="verify", indent=False,
                                 layout=w.Layout(width="80px"))
        self.undo_button = w.Button(description="Undo", icon="undo")
        self.redo_button = w.Button(description="Redo", icon="redo")
        self.safe_button = w.Button(description="safe preset", icon="magic",
                                    tooltip='lab.apply_preset("safe")')
        self.onnxsim_button = w.Button(description="onnxsim", tooltip='lab.apply("onnxsim")')
        self.ort_level = w.Dropdown(options=[("ORT basic", "ort:basic"),
                                             ("ORT extended", "ort:extended"),
                                             ("ORT all", "ort:all")], value="ort:basic",
                                    layout=w.Layout(width="140px"))
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
        self.before_html = w.HTML(layout=w.Layout(width="50%"))
        self.after_html = w.HTML(layout=w.Layout(width="50%"))
        self.preview_box = w.HBox([self.before_html, self.after_html])
        self.verification = PagedTable(page_size=15)

        for button, fn in [(self.select_all, self._select_all), (self.preview_button, self.preview),
                           (self.apply_button, self.apply), (self.undo_button, self.undo),
                           (self.redo_button, self.redo), (self.safe_button, self.apply_safe),
                           (self.onnxsim_button, self.apply_onnxsim),
                           (self.ort_button, self.apply_ort),
                           (self.checkout_button, self.checkout), (self.save_button, self.save)]:
            button.on_click(self._clicked(fn))
        self.pattern_filter.observe(self._guard(self._filter), names="value")

        acc = w.Accordion(children=[self.explanation, self.preview_box, self.verification])
        acc.set_title(0, "Explanation of the selected pattern")
        acc.set_title(1, "Preview (before | after)")
        acc.set_title(2, "Verification of the last step (failures first)")
        acc.selected_index = 0
        self.details = acc
        super().__init__([
            self.summary_html,
            w.HBox([self.pattern_filter, self.select_all]),
            self.matches,
            w.HBox([self.preview_button, self.apply_button, self.verify, self.undo_button,
                    self.redo_button]),
            w.HBox([self.safe_button, self.onnxsim_button, self.ort_level, self.ort_button,
                    self.step, self.checkout_button]),
            w.HBox([self.save_path, self.overwrite, self.save_button]),
            w.HTML("<b>History</b>"), self.history_html,
            acc,
        ])
        self.add_class("onnx-lab-fusion-lab")
        self._guard(self.refresh)()

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

    def refresh(self) -> None:
        """Re-read patterns and history from the Lab (after changes made in code)."""
        pats = self._call(self.lab.patterns, busy="Finding patterns…")
        if pats is None:
            return
        self.patterns = pats
        counts = pats["pattern"].value_counts()
        current = self.pattern_filter.value
        opts = [("all", ALL)] + [(f"{p} ({n})", p) for p, n in sorted(counts.items())]
        self.pattern_filter.options = opts
        self.pattern_filter.value = current if current in {v for _, v in opts} else ALL
        known = set(pats["match_id"])
        self.matches.selected = [m for m in self.matches.selected if m in known]
        self._filter()
        self._draw_history()
        if self.result is None:
            self.result = pats
            self.code.value = code_html("lab.patterns()")

    def _filter(self, _change: Any = None) -> None:
        df = self.patterns
        if len(df) and self.pattern_filter.value != ALL:
            df = df[df["pattern"] == self.pattern_filter.value]
        self.matches.set(df)
        self._on_select(self.matches.selected)

    def _select_all(self) -> None:
        self.matches.select(list(self.matches.selected) + list(self.matches.df["match_id"]))

    def _draw_history(self) -> None:
        hist = self.lab.history
        self.history_html.value = history_html(hist)
        current = int(hist.loc[hist["current"], "step"].iloc[0]) if "current" in hist else \
            int(hist["step"].iloc[-1])
        self.step.max = int(hist["step"].max())
        self.step.value = current
        self.undo_button.disabled = current == 0
        self.redo_button.disabled = current >= int(hist["step"].max())
        n = len(self.lab.index)
        self.summary_html.value = (f"<b>{n}</b> nodes now; <b>{len(self.patterns)}</b> "
                                   f"opportunities found (step {current} of the history)")

    def _on_select(self, keys: list[str]) -> None:
        self.apply_button.disabled = not keys
        self.preview_button.disabled = not keys
        sel = self.patterns[self.patterns["match_id"].isin(keys)] if keys else self.patterns
        patterns = list(dict.fromkeys(sel["pattern"])) if len(sel) else []
        # Assigning outputs (rather than clear_output) also works outside a kernel (tests).
        self.explanation.outputs = ()
        if not keys:
            patterns = patterns[:1]
        from IPython.display import Markdown

        for p in patterns[:3]:
            text = _explain(p)
            if text is None:
                rows = self.patterns[self.patterns["pattern"] == p]
                text = f"**{p}**: " + (rows["description"].iloc[0] if len(rows) else "")
            self.explanation.append_display_data(Markdown(text))

    def _groups(self) -> list[tuple[str, list[str]]]:
        """Selected match ids grouped by pass, in table order."""
        sel = self.patterns[self.patterns["match_id"].isin(self.selected)]
        out: dict[str, list[str]] = {}
        for mid, pname in zip(sel["match_id"], sel["pass"]):
            out.setdefault(pname, []).append(mid)
        return list(out.items())

    def _done(self, result: Any, code: str) -> None:
        self.result = result
        self.code.value = code_html(code)
        self.matches.selected = []
        self.refresh()
        self.code.value = code_html(code)
        results = result if isinstance(result, list) else [result]
        msgs = []
        for r in results:
            if r is None:
                continue
            if r.modified:
                msgs.append(f"{r.name}: {r.nodes_before} → {r.nodes_after} nodes, "
                            + ("verification passed" if r.verify_passed else
                               "not verified" if r.verify_passed is None else
                               f"verification FAILED at {r.first_failure}"))
            else:
                msgs.append(f"{r.name}: nothing changed ({r.reason})")
        failed = any(r is not None and r.verify_passed is False for r in results)
        self._show_verification(results)
        if msgs and self.error is None:
            self.status.value = info_html("; ".join(msgs), kind="warn" if failed else "ok")

    def _show_verification(self, results: list[Any]) -> None:
        """The verification report of the last verified step (``result.verification``)."""
        last = next((r for r in reversed(results) if r is not None
                     and getattr(r, "verification", None) is not None), None)
        if last is None:
            return
        report = last.verification
        if "passed" in report:
            report = report.sort_values("passed", kind="stable")
        self.verification.set(report, caption=f"{last.name}: {len(report)} tensors compared, "
                                              f"max_abs_err {last.max_abs_err}")
        if last.verify_passed is False:
            self.details.selected_index = 2

    # ------------------------------------------------------------------ actions
    def preview(self) -> None:
        """Render the selected matches before and after (the history is not touched)."""
        groups = self._groups()
        if not groups:
            self.status.value = info_html("Tick one or more matches first.", kind="warn")
            return
        from onnx_lab.render import render_model
        from onnx_lab.transforms import get_pass

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
        after = self._call(render_model, res.model, nodes=keep + new_ids,
                           highlight=new_ids, title="after")
        if after is None:
            return
        self.before_html.value = rendering_html(before)
        self.after_html.value = rendering_html(after)
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
        for i, (pass_name, ids) in enumerate(groups):
            if i:
                # Match ids are stable per model version: re-find and keep those that remain.
                pats = self._call(self.lab.patterns)
                if pats is None:
                    break
                ids = [m for m in ids if m in set(pats["match_id"])]
                if not ids:
                    continue
            r = self._call(self.lab.apply, pass_name, matches=ids, verify=self.verify.value,
                           busy=f"Applying {pass_name} to {len(ids)} match(es) and verifying…")
            if r is None:
                break
            results.append(r)
            codes.append(f"lab.apply({pass_name!r}, matches={ids!r}"
                         + ("" if self.verify.value else ", verify=False") + ")")
        if results:
            self._done(results[0] if len(results) == 1 else results, "; ".join(codes))

    def apply_safe(self) -> None:
        """``lab.apply_preset("safe")``."""
        rs = self._call(self.lab.apply_preset, "safe", verify=self.verify.value,
                        busy="Applying the safe preset with verification…")
        if rs is not None:
            self._done(list(rs), 'lab.apply_preset("safe")')

    def apply_onnxsim(self) -> None:
        """``lab.apply("onnxsim")``."""
        r = self._call(self.lab.apply, "onnxsim", verify=self.verify.value,
                       busy="Running onnxsim and verifying…")
        if r is not None:
            self._done(r, 'lab.apply("onnxsim")')

    def apply_ort(self) -> None:
        """``lab.apply("ort:<level>")`` for the chosen level."""
        level = self.ort_level.value
        r = self._call(self.lab.apply, level, verify=self.verify.value,
                       busy=f"Running onnxruntime {level} and verifying…")
        if r is not None:
            self._done(r, f"lab.apply({level!r})")

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
