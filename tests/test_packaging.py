"""What `make setup` installs and what CI adds: the README's commands pass on a fresh machine
with exactly pyproject's default and dev dependencies; .ci/run adds only optional extras."""
from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(req: str) -> str:
    return re.split(r"[\[<>=!~ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _ci_installs() -> list[str]:
    names = []
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        line = line.split("#", 1)[0]
        for part in re.split(r"&&|\|\|", line):
            words = shlex.split(part)
            if "pip" in words and "install" in words:
                args = words[words.index("install") + 1:]
                names += [_name(a) for a in args if not a.startswith("-")]
    return names


def test_ci_installs_only_optional_extras():
    project = PYPROJECT["project"]
    default = {_name(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    dev = {_name(r) for r in extras["dev"]}
    optional = {_name(r) for group, reqs in extras.items() if group != "dev" for r in reqs}
    installed = _ci_installs()
    assert installed, "no pip install found in .ci/run"
    for name in installed:
        assert name not in default | dev, f"{name}: make setup installs it already"
        assert name in optional, f"{name}: not an optional extra of pyproject.toml"
    # every extra CI installs is named there (and its tests skip without it)
    assert {"torch", "openvino", "onnxruntime-genai", "dask"} <= set(installed)


def test_what_notebooks_and_default_steps_need_is_a_default_dependency():
    default = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert "onnxscript" in default  # the onnxscript_rewrite step; notebooks 05 and 08
    assert "torch" not in default  # optional: notebook 08 says so and skips


def test_packaging_uses_an_spdx_license_and_a_setuptools_that_reads_it():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    reqs = PYPROJECT["build-system"]["requires"]
    setuptools = next(r for r in reqs if _name(r) == "setuptools")
    assert int(re.search(r">=\s*(\d+)", setuptools).group(1)) >= 77


def test_make_check_is_the_fast_tier_and_make_test_the_whole_suite():
    make = (ROOT / "Makefile").read_text()
    assert 'CHECK_MARKERS := not slow and not browser and not torch' in make
    test = make.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    # two parts that together are every test and the notebooks, with no marker filter: the
    # tests outside tests/browser and the notebooks in worker processes, then the browser tests
    assert "pytest tests --ignore=tests/browser --nbmake notebooks -n 2" in test
    assert "pytest tests/browser;" in test
    assert " -m \"" not in test and " -k " not in test
    assert "[ $$a -eq 0 ] && [ $$b -eq 0 ]" in test  # either part failing fails make test
    dev = {_name(r) for r in PYPROJECT["project"]["optional-dependencies"]["dev"]}
    assert {"pytest-xdist", "nbmake"} <= dev
    markers = PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]
    assert {m.split(":")[0] for m in markers} >= {"slow", "browser", "torch"}


def test_binder_installs_every_default_dependency():
    # postBuild installs onnx_lab with --no-deps: its requirements.txt must hold them all
    lines = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    binder = {_name(ln) for ln in lines if ln.strip() and not ln.startswith("#")}
    default = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert default <= binder, sorted(default - binder)


def test_dir_of_the_package_lists_its_public_names_only():
    # a newcomer's ``dir(onnx_lab)`` (and tab completion) is the API, not the module's imports
    import onnx_lab

    names = set(dir(onnx_lab))
    assert set(onnx_lab.__all__) <= names
    assert {"transforms", "widgets", "__version__"} <= names
    assert not names & {"Any", "TYPE_CHECKING", "importlib", "logging", "annotations",
                        "_FACADE", "_LAZY", "_render"}
    for name in names - {"__version__"}:
        assert getattr(onnx_lab, name) is not None
