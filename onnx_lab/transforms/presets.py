"""Named lists of passes applied in order (``lab.apply_preset("safe")``), built from the registry.

A pass joins a preset by declaring it: ``presets = {"safe": (45,)}`` on its class (or
``presets=`` to ``_register_factory``); each preset is its members sorted by those order keys
(:func:`onnx_lab.transforms.available`'s ``presets`` column), so adding a pass to a preset is
an edit of that pass's file only. A key may be given twice: the pass then runs twice.

``safe`` holds only rewrites that keep the outputs equal up to float rounding. Its keys leave
room between bands so that each pass sees the others' results:

- 10-30 clean-up first: Identity (10) and Dropout (20) go so that Conv->Add->BN chains are
  adjacent, then a first dead-node sweep (30);
- 40 constant folding, then 42 layout: the Transposes around elementwise regions go
  (tf2onnx's NHWC ops between Conv's Transposes), so the bias Add and batch norm Mul they
  held sit next to their Conv for the fusions (and again at 75, after them);
- 50-80 fusions: Conv+Add bias (50) before Conv+BN (60) (block2 of sample:convnet is
  Conv->Add->BN), then Transpose (70) and Reshape (80) chains;
- 90-100 a second dead-node sweep (90) for the nodes the fusions left unused, and unused
  initializers last of all (100).

Example:
    >>> from onnx_lab.transforms.presets import PRESETS
    >>> PRESETS["safe"][:2]
    ['eliminate_identity', 'eliminate_dropout']
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from onnx_lab._pandas import pd
from onnx_lab.transforms.registry import preset_members

__all__ = ["PRESETS", "preset_table", "preset_markdown"]


def preset_table() -> pd.DataFrame:
    """Every preset's members in order, one row per (preset, order key).

    Columns:
        preset (str), order (int: the key the pass declares), name (str: the pass).
    """
    return pd.DataFrame(preset_members(), columns=["preset", "order", "name"])


def preset_markdown() -> str:
    """Each preset's members in order as markdown (docs/passes.md, between ``<!-- presets:begin
    -->`` and ``<!-- presets:end -->``; ``scripts/sync_pass_docs.py`` writes it, a test keeps
    them equal).

    Example:
        >>> print(preset_markdown().splitlines()[0])
        - `safe`: 1. `eliminate_identity` (10), 2. `eliminate_dropout` (20), ...
    """
    lines = []
    for preset, rows in preset_table().groupby("preset", sort=True):
        items = ", ".join(f"{i}. `{r.name}` ({r.order})"
                          for i, r in enumerate(rows.itertuples(index=False), 1))
        lines.append(f"- `{preset}`: {items}")
    return "\n".join(lines)


class _Presets(Mapping[str, list[str]]):
    """The presets as a read-only mapping name -> pass names, read from the registry on each
    access (a pass registered later, e.g. by a plugin or a test, joins at once)."""

    def _lists(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for preset, _key, name in preset_members():
            out.setdefault(preset, []).append(name)
        return out

    def __getitem__(self, name: str) -> list[str]:
        return self._lists()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._lists())

    def __len__(self) -> int:
        return len(self._lists())

    def __repr__(self) -> str:
        return f"PRESETS({self._lists()!r})"


PRESETS: Mapping[str, list[str]] = _Presets()
