"""Notebooks whose subject needs an optional package say what to install and skip the rest
visibly when it is missing (the `make lab` environment has no torch)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _run_without(notebook: Path, module: str, tmp_path: Path) -> list[dict]:
    """Execute ``notebook`` in a fresh kernel in which ``import module`` fails; return its
    code cells with their outputs."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(notebook, as_version=4)
    # A None entry in sys.modules makes `import module` raise ImportError, as if missing.
    hide = nbformat.v4.new_code_cell(f"import sys\nsys.modules[{module!r}] = None")
    nb.cells.insert(0, hide)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    return [c for c in nb.cells[1:] if c.cell_type == "code"]


def _text(cell: dict) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


@pytest.mark.slow
def test_source_notebook_without_torch_says_what_to_install_and_skips_the_rest(tmp_path):
    cells = _run_without(NOTEBOOKS / "08_source.ipynb", "torch", tmp_path)
    first, rest = cells[0], cells[1:]
    assert "pip install torch" in _text(first) and "skipped" in _text(first)
    assert rest and all(_text(c).strip() == "skipped: this notebook needs PyTorch (see the "
                        "first code cell)" for c in rest), [_text(c) for c in rest]
    assert not [o for c in cells for o in c.get("outputs", []) if o["output_type"] == "error"]


def test_source_notebook_states_its_requirement_in_its_first_cell():
    nb = json.loads((NOTEBOOKS / "08_source.ipynb").read_text())
    first = "".join(nb["cells"][0]["source"])
    assert nb["cells"][0]["cell_type"] == "markdown"
    assert "needs PyTorch" in first and "pip install torch" in first
