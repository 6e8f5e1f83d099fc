"""Write the registry's pass table into docs/passes.md and its counts into the README.

The table between ``<!-- passes:begin -->`` and ``<!-- passes:end -->`` in docs/passes.md is
:func:`onnx_lab.transforms.explain.pass_table`, the presets' members between ``<!-- presets:begin
-->`` and ``<!-- presets:end -->`` :func:`onnx_lab.transforms.presets.preset_markdown`; the README's "N graph passes, M edits" is
:func:`~onnx_lab.transforms.explain.pass_counts`. ``tests/transforms/test_pass_docs.py``
fails until this has been run after a pass was added.

Usage: python scripts/sync_pass_docs.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from onnx_lab.transforms.explain import pass_counts, pass_table  # noqa: E402
from onnx_lab.transforms.presets import preset_markdown  # noqa: E402

BEGIN, END = "<!-- passes:begin -->", "<!-- passes:end -->"
PRESETS_BEGIN, PRESETS_END = "<!-- presets:begin -->", "<!-- presets:end -->"
COUNT = re.compile(r"\d+ graph passes, \d+ edits")


def _between(text: str, begin: str, end: str, body: str) -> str:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def synced_passes_doc(text: str) -> str:
    """docs/passes.md with the generated pass table and preset lists between their markers."""
    text = _between(text, BEGIN, END, pass_table())
    return _between(text, PRESETS_BEGIN, PRESETS_END, preset_markdown())


def synced_readme(text: str) -> str:
    c = pass_counts()
    return COUNT.sub(f"{c.get('graph', 0)} graph passes, {c.get('edit', 0)} edits", text)


def main() -> int:
    for path, fn in ((ROOT / "docs" / "passes.md", synced_passes_doc),
                     (ROOT / "README.md", synced_readme)):
        text = path.read_text(encoding="utf-8")
        new = fn(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"updated {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
