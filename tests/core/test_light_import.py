"""`import onnx_lab` and the core features load no heavy optional modules."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("onnxruntime", "matplotlib", "ipywidgets", "graphviz", "torch", "onnxsim",
         "onnxoptimizer")


@pytest.mark.slow
def test_core_features_import_nothing_heavy():
    code = (
        "import sys, onnx_lab\n"
        f"heavy = {HEAVY!r}\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "lab = onnx_lab.open('sample:transformer_block', dims={'batch': 1})\n"
        "lab.nodes, lab.initializers, lab.tensors, lab.inputs, lab.outputs\n"
        "lab.summary()._repr_html_(), lab.weight_stats()\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert out == ["[]", "[]"]


@pytest.mark.slow
def test_import_and_optimize_command_do_not_import_pandas(tmp_path):
    # pandas (~0.2 s to import) loads when a table is built, not with onnx_lab, and
    # `onnx-lab optimize` builds none: its verification reports stay rows.
    src = tmp_path / "convnet.onnx"
    code = (
        "import sys, contextlib, io, onnx, onnx_lab\n"
        "from onnx_lab.cli import main\n"
        "print('pandas' in sys.modules)\n"
        f"onnx.save(onnx_lab.samples.build('convnet'), {str(src)!r})\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main(['optimize', {str(src)!r}, {str(tmp_path / 'out.onnx')!r}, '--json'])\n"
        "print(code, 'pandas' in sys.modules, 'onnxscript' in sys.modules)\n"
        f"lab = onnx_lab.open({str(src)!r})\n"
        "r = lab.apply('fuse_conv_bn')\n"
        "print(r.verify_passed, 'pandas' in sys.modules)\n"
        "print(type(r.verification).__name__, r.verification.attrs['passed'],\n"
        "      'pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    # onnxscript (~0.1 s) is imported by its own step only, not by looking passes up.
    assert out == ["False", "0 False False", "True False", "DataFrame True True"]


# What ``onnx-lab --help`` must not load: the bare ``import onnx, onnxruntime`` the CLI is
# measured against (benchmarks/bench_cli_startup.py) loads none of these either.
CLI_HEAVY = ("onnx_ir", "sympy", "pandas", "matplotlib", "onnx.reference", "pyarrow", "scipy",
             "onnxruntime", "torch", "onnx_lab.lab", "onnx_lab.core.model")


@pytest.mark.slow  # a fresh interpreter per check: a subprocess round trip
def test_cli_help_imports_no_feature_module():
    code = (
        "import sys, contextlib, io\n"
        "import onnx_lab.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        onnx_lab.cli.main(['--help'])\n"
        "    except SystemExit as e:\n"
        "        code = e.code\n"
        f"print(code, 'summary' in out.getvalue(), sorted(m for m in {CLI_HEAVY!r} "
        "if m in sys.modules))\n"
        # the façade still loads on first access
        "lab = onnx_lab.open('sample:convnet')\n"
        "print(type(lab).__name__, 'onnx_ir' in sys.modules, onnx_lab.samples.names()[:1] != [])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert out == ["0 True []", "Lab True True"]


@pytest.mark.slow  # a fresh interpreter per check: a subprocess round trip
def test_cli_summary_loads_only_what_it_uses(tmp_path):
    # summary opens the model (onnx_ir), builds no table (no pandas), and nothing else heavy.
    code = (
        "import sys, contextlib, io, json\n"
        "from onnx_lab.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    code = main(['summary', 'sample:convnet', '--json'])\n"
        "print(code, json.loads(out.getvalue())['num_nodes'] > 0)\n"
        f"print(sorted(m for m in {CLI_HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert out[0] == "0 True"
    loaded = set(eval(out[1]))  # noqa: S307 - a list of names this test printed
    assert {"onnx_ir", "onnx_lab.lab"} <= loaded
    assert "pandas" not in loaded  # the summary counts weights without building a table
    assert not loaded & {"matplotlib", "onnx.reference", "scipy", "onnxruntime", "torch"}
