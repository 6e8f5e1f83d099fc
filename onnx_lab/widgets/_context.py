"""The run-context bar: dims, input shapes, feeds and verification of a widget that runs a model.

Prefilled from the Lab: every symbolic dim has a field, empty and named when unresolved
(``height``), and every input shows its shape. :meth:`RunContext.apply` writes the values to
``lab.dims`` / ``lab.shapes`` (exactly what ``onnx_lab.open(..., dims=..., shapes=...)`` does),
so the one-line Python equivalent stays true. A :class:`~onnx_lab.errors.DimError` inside the
widget focuses the bar on the missing dim (:meth:`RunContext.focus_dims`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import ipywidgets as w

from onnx_lab.core.derived import derived_dims, length_sums, with_derived
from onnx_lab.core.shapes import dynamic_dims, expression_dims, resolve_dim, shape_tuple
from onnx_lab.errors import DimError, InputError
from onnx_lab.render._html import esc_text

__all__ = ["RunContext", "missing_dims", "image_feeds"]

_USED_BY = re.compile(r"'([^']+)' \(used by")


def _derived_hints(model: Any, names: list[str]) -> dict[str, tuple[str, str]]:
    """{dim: (placeholder, tooltip)} for the dims the model determines."""
    out = {n: (f"{d.value} (derived)", d.source) for n, d in derived_dims(model).items()}
    for n, total in length_sums(model).items():  # derived once both lengths are given
        if n in names:
            out[n] = ("past + new", f"{n} = {total}, filled in (the cache grows by the new "
                                    "tokens)")
    return out


def missing_dims(exc: BaseException) -> list[str]:
    """The dim names a DimError is about (its ``dims`` attribute, else named in its text)."""
    names = getattr(exc, "dims", None)
    if names:
        return list(names)
    return _USED_BY.findall(getattr(exc, "problem", str(exc)))


class RunContext(w.VBox):
    """Dims, input shapes, feeds (random seeded, .npz, image) and a verify toggle.

    Args:
        lab: the Lab whose dims/shapes the bar edits.
        verify: show a *verify* checkbox with this initial value (None: no checkbox).
        feeds: show the feeds controls.
        write: :meth:`apply` writes dims/shapes to the Lab (False: the widget passes
            ``context.dims`` / ``context.shapes`` to its call, as the DriftDebugger does for
            ``compare(..., dims=...)``).
        dims, shapes: initial values (default: the Lab's).

    Attributes:
        dim_fields: {dim name: Text}; empty means unresolved.
        shape_fields: {input name: Text} (comma-separated; names for symbolic dims).
        feed_mode, seed, feed_path, verify: the controls.
    """

    def __init__(self, lab: Any, *, verify: bool | None = None, feeds: bool = True,
                 write: bool = True, dims: dict[str, int] | None = None,
                 shapes: dict[str, Any] | None = None, seeded: bool = True) -> None:
        self.lab = lab
        self.write = write
        self.seeded = seeded
        model = lab.model
        start_dims = {**dict(getattr(lab, "dims", None) or {}), **dict(dims or {})}
        start_shapes = {**dict(getattr(lab, "shapes", None) or {}), **dict(shapes or {})}
        self._start_dims, self._start_shapes = start_dims, start_shapes
        names = [d for d in dynamic_dims(model) if d != "?"]
        # Dims the model determines (a head size; a total length from past + new) are shown
        # as placeholders: left empty, they are filled in; typed, the typed value wins.
        derived = _derived_hints(model, names)
        self.dim_fields: dict[str, w.Text] = {}
        for d in names:
            val = start_dims.get(d)
            hint, source = derived.get(d, (d, ""))
            # Long names (genai's total_sequence_length) leave room for the value and hint.
            f = w.Text(value="" if val is None else str(val), placeholder=hint,
                       description=d, layout=w.Layout(width=f"{max(190, 7 * len(d) + 120)}px"),
                       style={"description_width": "initial"}, tooltip=source or None)
            if source:
                f.add_class("onnx-lab-dim-derived")
            f.add_class("onnx-lab-dim")
            f.add_class(f"onnx-lab-dim-{re.sub(r'[^A-Za-z0-9_-]', '_', d)}")
            self.dim_fields[d] = f
        # A dim expression (past + new lengths) is no field: it shows its value, computed
        # from the fields, as they are typed.
        self.expr_labels: dict[str, w.Label] = {}
        for text, uses in expression_dims(model).items():
            label = w.Label(tooltip=f"{text}: {', '.join(uses)}")
            label.add_class("onnx-lab-dim-expr")
            self.expr_labels[text] = label
        for f in self.dim_fields.values():
            f.observe(self._show_expressions, names="value")
        self._show_expressions()
        inits = set(model.graph.initializers)
        self.shape_fields: dict[str, w.Text] = {}
        for v in model.graph.inputs:
            if v.name in inits:
                continue
            shape = start_shapes.get(v.name) or shape_tuple(v.shape) or ()
            text = ", ".join("?" if s is None else str(s) for s in shape)
            f = w.Text(value=text, description=v.name, layout=w.Layout(width="300px"),
                       style={"description_width": "initial"})
            f.add_class("onnx-lab-shape")
            self.shape_fields[v.name] = f
        self._declared = {n: f.value for n, f in self.shape_fields.items()}
        self.feed_mode = w.Dropdown(options=[("random (seeded)", "random"), (".npz file", "npz"),
                                             ("image file", "image")], value="random",
                                    description="feeds", layout=w.Layout(width="220px"))
        self.seed = w.IntText(value=0, description="seed", layout=w.Layout(width="130px"))
        self.feed_path = w.Text(placeholder="inputs.npz or image.jpg", description="path",
                                layout=w.Layout(width="300px"))
        self.verify = w.Checkbox(value=bool(verify), description="verify", indent=False,
                                 layout=w.Layout(width="90px"))
        self.message = w.HTML()
        rows: list[w.Widget] = []
        if self.dim_fields or self.expr_labels:
            rows.append(w.HBox([w.HTML("<b>dims</b>&nbsp;"), *self.dim_fields.values(),
                                *self.expr_labels.values()],
                               layout=w.Layout(flex_flow="row wrap")))
        if self.shape_fields:
            rows.append(w.HBox([w.HTML("<b>inputs</b>&nbsp;"), *self.shape_fields.values()],
                               layout=w.Layout(flex_flow="row wrap")))
        extra: list[w.Widget] = []
        if feeds:
            extra += [self.feed_mode, self.seed, self.feed_path]
        if verify is not None:
            extra.append(self.verify)
        if extra:
            rows.append(w.HBox(extra, layout=w.Layout(flex_flow="row wrap")))
        rows.append(self.message)
        self.feed_mode.observe(lambda _c: self._feed_controls(), names="value")
        self._feed_controls()
        super().__init__(rows, layout=w.Layout(border="1px solid #e0e0e0", padding="2px 4px",
                                               margin="2px 0", max_width="100%"))
        self.add_class("onnx-lab-context")
        self.missing: list[str] = []

    # ------------------------------------------------------------------ values
    def _feed_controls(self) -> None:
        random = self.feed_mode.value == "random"
        self.seed.layout.display = None if random and self.seeded else "none"
        self.feed_path.layout.display = "none" if random else None

    def _show_expressions(self, _change: Any = None) -> None:
        """Each dim expression's label: ``past + seq = 7`` (``= ?`` while a name is empty)."""
        # (the start dims the bar has no field for, such as an expression given by its text)
        rest = {k: v for k, v in self._start_dims.items() if k not in self.dim_fields}
        given = with_derived(self.lab.model, {**rest, **self.dims})
        for text, label in self.expr_labels.items():
            try:
                value = resolve_dim(text, given, strict=True)
            except DimError as e:
                label.value = f"{text} = ? ({e.problem})"
                continue
            label.value = f"{text} = {value if isinstance(value, int) else '?'}"

    @property
    def dims(self) -> dict[str, int]:
        """The dims typed in (fields that are empty or not integers are left out)."""
        out = {}
        for d, f in self.dim_fields.items():
            t = f.value.strip()
            if re.fullmatch(r"-?\d+", t):  # 0 is an empty KV cache; a negative one fails apply()
                out[d] = int(t)
        return out

    @property
    def shapes(self) -> dict[str, list[int]]:
        """Input shapes edited to all integers (inputs left as declared are not listed)."""
        out = {}
        for n, f in self.shape_fields.items():
            if f.value == self._declared[n]:
                continue
            parts = [p.strip() for p in re.split(r"[,x×]", f.value) if p.strip()]
            if parts and all(p.isdigit() for p in parts):
                out[n] = [int(p) for p in parts]
        return out

    def set_dims(self, dims: dict[str, int]) -> None:
        """Type ``dims`` into the bar (as a user would)."""
        for d, v in dims.items():
            if d in self.dim_fields:
                self.dim_fields[d].value = str(v)

    def apply(self) -> None:
        """Write the bar's dims/shapes to the Lab (``lab.dims = {...}; lab.shapes = {...}``).

        Raises:
            DimError: a value does not fit the model (shown by the widget).
        """
        for f in self.dim_fields.values():
            f.remove_class("onnx-lab-missing")
        self.missing = []
        self.message.value = ""
        if not self.write:
            return
        self.lab.dims  # noqa: B018 - a Lab without dims fails here, not half-way
        dims, shapes = {**self.lab.dims, **self.dims}, {**self.lab.shapes, **self.shapes}
        if dims != self.lab.dims:
            self.lab.dims = dims
        if shapes != self.lab.shapes:
            self.lab.shapes = shapes

    def code(self) -> str:
        """The Python equivalent of :meth:`apply` ('' when nothing was typed)."""
        if not self.write:
            return ""
        parts = []
        if self.dims:
            parts.append(f"lab.dims = {{**lab.dims, **{self.dims!r}}}")
        if self.shapes:
            parts.append(f"lab.shapes = {{**lab.shapes, **{self.shapes!r}}}")
        return "; ".join(parts)

    def feeds(self) -> dict[str, Any] | str | None:
        """The feeds chosen: None (random, seeded), an .npz path, or arrays from an image.

        Raises:
            InputError: the .npz/image mode without a path, or an image that cannot be fed.
        """
        mode, path = self.feed_mode.value, self.feed_path.value.strip()
        if mode == "random":
            return None
        if not path:
            raise InputError(f"Feeds from {'an .npz' if mode == 'npz' else 'an image'} file "
                             "need a path.", fix="Type the file's path in the bar's *path* "
                             "box, or choose random (seeded) feeds.")
        if mode == "npz":
            return path
        name, shape = self._image_input()
        return image_feeds(path, name, shape)

    def _image_input(self) -> tuple[str, list[int]]:
        if not self.shape_fields:
            raise InputError("The model has no input to feed an image to.")
        name = next(iter(self.shape_fields))
        shape = self.shapes.get(name) or self._start_shapes.get(name)
        if shape is None:
            known = {**self._start_dims, **self.dims}
            parts = [p.strip() for p in self.shape_fields[name].value.split(",")]
            shape = [int(p) if p.isdigit() else known.get(p) for p in parts]
        return name, list(shape)

    def seed_value(self) -> int | None:
        """The seed of random feeds (None when it is the default 0 or feeds come from a file)."""
        if self.feed_mode.value != "random" or int(self.seed.value) == 0:
            return None
        return int(self.seed.value)

    def feeds_code(self) -> str | None:
        """Python for :meth:`feeds` (None for random feeds)."""
        mode, path = self.feed_mode.value, self.feed_path.value.strip()
        if mode == "random":
            return None
        if mode == "npz":
            return repr(path)
        name, shape = self._image_input()
        return f"image_feeds({path!r}, {name!r}, {shape!r})"

    def verify_arg(self) -> bool | dict[str, Any]:
        """``verify=`` for a call: False when unticked, else True or ``{'feeds'/'seed': ...}``."""
        if not self.verify.value:
            return False
        opts: dict[str, Any] = {}
        feeds = self.feeds()
        if feeds is not None:
            opts["feeds"] = feeds
        seed = self.seed_value()
        if seed is not None:
            opts["seed"] = seed
        return opts or True

    def verify_code(self) -> str:
        """``verify=...`` as Python ('' for the default ``verify=True``)."""
        if not self.verify.value:
            return "verify=False"
        opts = []
        fc = self.feeds_code()
        if fc is not None:
            opts.append(f"'feeds': {fc}")
        seed = self.seed_value()
        if seed is not None:
            opts.append(f"'seed': {seed}")
        return "verify={" + ", ".join(opts) + "}" if opts else ""


    # ------------------------------------------------------------------ errors
    def focus_dims(self, names: Iterable[str]) -> None:
        """Mark the fields of ``names`` as missing and say so in the bar."""
        names = [n for n in names if n in self.dim_fields]
        self.missing = names
        for d, f in self.dim_fields.items():
            if d in names:
                f.add_class("onnx-lab-missing")
                f.placeholder = f"{d}: required"
            else:
                f.remove_class("onnx-lab-missing")
        if names:
            self.message.value = ("<div class='onnx-lab-warn' style='color:#8a4b00'>Set "
                                  + ", ".join(f"<b>{esc_text(n)}</b>" for n in names)
                                  + " here, then run again.</div>")


def image_feeds(path: str, name: str, shape: Any) -> dict[str, Any]:
    """``{name: array}`` from an image file resized to ``shape`` (N×C×H×W, values in [0, 1]).

    Example:
        >>> image_feeds("cat.jpg", "images", [1, 3, 640, 640])["images"].shape
        (1, 3, 640, 640)
    """
    import numpy as np

    shape = list(shape)
    if len(shape) != 4 or any(s is None for s in shape):
        raise InputError(f"Input {name!r} has shape {shape}: an image needs a resolved "
                         "N×C×H×W shape.", fix="Set its dims (height, width) in the bar.")
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - Pillow comes with matplotlib
        raise InputError("Reading an image needs Pillow.", fix="pip install pillow") from e
    try:
        img = Image.open(path).convert("RGB" if int(shape[1]) == 3 else "L")
    except OSError as e:
        raise InputError(f"Cannot read image {path!r}: {e}.",
                         fix="Pick a .jpg/.png file that exists.") from e
    img = img.resize((int(shape[3]), int(shape[2])))
    a = np.asarray(img, dtype=np.float32) / 255.0
    a = a.reshape(int(shape[2]), int(shape[3]), -1).transpose(2, 0, 1)[None]
    return {name: np.repeat(a, int(shape[0]), axis=0)}
