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

__all__ = ["RunContext", "missing_dims"]

_USED_BY = re.compile(r"'([^']+)' \(used by")


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

    Attributes:
        dim_fields: {dim name: Text}; empty means unresolved.
        shape_fields: {input name: Text} (comma-separated; names for symbolic dims).
        feed_mode, seed, feed_path, verify: the controls.
    """

    def __init__(self, lab: Any, *, verify: bool | None = None, feeds: bool = True) -> None:
        from onnx_lab.core.shapes import dynamic_dims, shape_tuple

        self.lab = lab
        model = lab.model
        names = [d for d in dynamic_dims(model) if d != "?"]
        self.dim_fields: dict[str, w.Text] = {}
        for d in names:
            val = lab.dims.get(d)
            f = w.Text(value="" if val is None else str(val), placeholder=d,
                       description=d, layout=w.Layout(width="190px"),
                       style={"description_width": "initial"})
            f.add_class("onnx-lab-dim")
            f.add_class(f"onnx-lab-dim-{re.sub(r'[^A-Za-z0-9_-]', '_', d)}")
            self.dim_fields[d] = f
        inits = set(model.graph.initializers)
        self.shape_fields: dict[str, w.Text] = {}
        for v in model.graph.inputs:
            if v.name in inits:
                continue
            shape = lab.shapes.get(v.name) or shape_tuple(v.shape) or ()
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
        if self.dim_fields:
            rows.append(w.HBox([w.HTML("<b>dims</b>&nbsp;"), *self.dim_fields.values()],
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
        super().__init__(rows, layout=w.Layout(border="1px solid #e0e0e0", padding="2px 4px",
                                               margin="2px 0", max_width="100%"))
        self.add_class("onnx-lab-context")
        self.missing: list[str] = []

    # ------------------------------------------------------------------ values
    @property
    def dims(self) -> dict[str, int]:
        """The dims typed in (fields that are empty or not integers are left out)."""
        out = {}
        for d, f in self.dim_fields.items():
            t = f.value.strip()
            if t.isdigit() and int(t) > 0:
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
        dims, shapes = {**self.lab.dims, **self.dims}, {**self.lab.shapes, **self.shapes}
        if dims != self.lab.dims:
            self.lab.dims = dims
        if shapes != self.lab.shapes:
            self.lab.shapes = shapes
        for f in self.dim_fields.values():
            f.remove_class("onnx-lab-missing")
        self.missing = []
        self.message.value = ""

    def code(self) -> str:
        """The Python equivalent of :meth:`apply` ('' when nothing was typed)."""
        parts = []
        if self.dims:
            parts.append(f"lab.dims = {{**lab.dims, **{self.dims!r}}}")
        if self.shapes:
            parts.append(f"lab.shapes = {{**lab.shapes, **{self.shapes!r}}}")
        return "; ".join(parts)

    def feeds(self) -> dict[str, Any] | str | None:
        """The feeds chosen: None (random, seeded), an .npz path, or arrays from an image."""
        mode, path = self.feed_mode.value, self.feed_path.value.strip()
        if mode == "random" or not path:
            return None
        if mode == "npz":
            return path
        return self._image_feeds(path)

    def _image_feeds(self, path: str) -> dict[str, Any]:
        import numpy as np
        from PIL import Image

        from onnx_lab.errors import InputError

        img_inputs = {n: f for n, f in self.shape_fields.items()}
        if not img_inputs:
            raise InputError("The model has no input to feed an image to.")
        name = next(iter(img_inputs))
        shape = self.lab.shapes.get(name)
        if shape is None:
            parts = [p.strip() for p in self.shape_fields[name].value.split(",")]
            shape = [int(p) if p.isdigit() else self.lab.dims.get(p) for p in parts]
        if len(shape) != 4 or any(s is None for s in shape):
            raise InputError(f"Input {name!r} has shape {shape}: an image needs a resolved "
                             "N×C×H×W shape.", fix="Set its dims (height, width) in the bar.")
        try:
            img = Image.open(path).convert("RGB" if shape[1] == 3 else "L")
        except OSError as e:
            raise InputError(f"Cannot read image {path!r}: {e}.",
                             fix="Pick a .jpg/.png file that exists.") from e
        img = img.resize((int(shape[3]), int(shape[2])))
        a = np.asarray(img, dtype=np.float32) / 255.0
        a = a.reshape(shape[2], shape[3], -1).transpose(2, 0, 1)[None]
        return {name: np.repeat(a, int(shape[0]), axis=0)}

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
                                  + ", ".join(f"<b>{n}</b>" for n in names)
                                  + " here, then run again.</div>")
