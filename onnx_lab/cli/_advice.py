"""A LabError's advice in the words of the command line.

The library's messages give their fix in Python (``dims={'batch': 1}``, ``lab.nodes.node_id``,
``overwrite=True``), which is right in a notebook and wrong in a shell: there the same fix is a
flag (``--dims batch=1``) or a file ``onnx-lab tables`` writes. :func:`command_line_text` rewrites
those phrases; the library keeps one message per error and the CLI says it its own way.

Example:
    >>> from onnx_lab.errors import DimError
    >>> command_line_text(DimError("Unresolved dims: 'batch'.", fix="Pass dims={'batch': 1}."))
    "Unresolved dims: 'batch'. Pass --dims batch=1."
"""
from __future__ import annotations

import ast
import re
import shlex
from typing import Any

from onnx_lab.errors import LabError

# "Pass dims={...} (to open(), or to this call; on the CLI --dims NAME=V / --shape INPUT:AxB)."
# The parenthesis speaks to both doors; the command line needs only its own words.
_BOTH_DOORS = re.compile(r" \(to open\(\), or to this call; on the CLI [^)]*\)")
_PY_ONLY = (", or pass overwrite=True.", ", or overwrite=True.")
# A Python dict literal of names: {'batch': 1, "seq": ...} / {input: [...]}
_DICT = r"""\{((?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^{}'"])*)\}"""  # braces in names too
# a phrase of the library's advice, not part of a path, a word or a quoted name the user gave
_START = r"(?<![\w./\\'\"-])"
_PAIR = re.compile(r"""\s*(?:(['"])(.*?)\1|([A-Za-z_]\w*))\s*:\s*([^,]+)""")
_TABLES = "onnx-lab tables MODEL"
# Longest phrase first: "lab.nodes.node_id" before "lab.nodes".
_TABLE_PHRASES = (
    (re.compile(_START + r"lab\.nodes(?:\.node_id|\[['\"]node_id['\"]\])"),
     f"nodes.csv's node_id column ({_TABLES})"),
    (re.compile(_START + r"lab\.nodes\.scope"), f"nodes.csv's scope column ({_TABLES})"),
    (re.compile(_START + r"lab\.nodes\.query\([^)]*\)"), f"nodes.csv ({_TABLES})"),
    (re.compile(_START + r"lab\.tensors\.name"), f"tensors.csv's name column ({_TABLES})"),
    (re.compile(_START + r"lab\.nodes / lab\.tensors"), f"nodes.csv / tensors.csv ({_TABLES})"),
    (re.compile(_START + r"lab\.nodes"), f"nodes.csv ({_TABLES})"),
    (re.compile(_START + r"lab\.tensors"), f"tensors.csv ({_TABLES})"),
    (re.compile(_START + r"lab\.initializers"), f"initializers.csv ({_TABLES})"),
)


_UNSAYABLE = "unsayable"  # a name no --dims flag carries: the advice is left as the library said it


def _pairs(body: str) -> list[tuple[str, str]] | str | None:
    out = []
    for part in filter(str.strip, re.findall(r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^,'"])+""", body)):
        m = _PAIR.fullmatch(part)
        if m is None:
            return None
        if m.group(1):
            try:  # the name as the model spells it, not its Python repr
                name = ast.literal_eval(m.group(1) + m.group(2) + m.group(1))
            except (ValueError, SyntaxError):
                return _UNSAYABLE
        else:
            name = m.group(3)
        if not isinstance(name, str) or "=" in name or "," in name or not name.isprintable():
            # --dims splits at "," and at the first "="; a control character stays escaped
            return _UNSAYABLE
        out.append((name, m.group(4).strip()))
    return out


def _with_pairs(m: re.Match, each: Any, generic: str | None) -> str:
    """A matched dict literal (group 1) rewritten by ``each(pairs)``; ``generic`` when it
    names nothing readable (None: the library's words); a name no flag can carry keeps them."""
    pairs = _pairs(m.group(1))
    if pairs == _UNSAYABLE or (not pairs and generic is None):
        return m.group(0)
    return each(pairs) if pairs else generic


def _dims_flags(m: re.Match) -> str:
    # a dim name is the model's string: quoted for the shell it is pasted into
    return _with_pairs(m, lambda pairs: " ".join(
        "--dims " + shlex.quote(f"{name}={value if value.isdigit() else 'N'}")
        for name, value in pairs), "--dims NAME=V")


def _shape_flag(name: str, value: str) -> str:
    dims = re.findall(r"\d+", value) if value.startswith("[") else []
    name = "INPUT" if name == "input" else name
    return "--shape " + shlex.quote(f"{name}:{'x'.join(dims) if dims else 'AxBxC'}")


def _shape_flags(m: re.Match) -> str:
    return _with_pairs(m, lambda pairs: " ".join(_shape_flag(*p) for p in pairs),
                       "--shape INPUT:AxBxC")


def _fix_dims_command(m: re.Match) -> str:
    return _with_pairs(m, lambda pairs: "onnx-lab fix-dims MODEL OUT " + " ".join(
        shlex.quote(f"{name}={value}") for name, value in pairs), None)


# lab.apply('fold_constants', max_growth_bytes=33_554_432): one pass with its parameters
_APPLY = re.compile(_START + r"""lab\.apply\((['"])(\w[\w:]*)\1((?:, \w+=[^,()]+)*)\)""")


def _optimize_command(m: re.Match) -> str:
    name = m.group(2)
    params = re.findall(r", (\w+)=([^,()]+)", m.group(3))
    return (f"onnx-lab optimize MODEL OUT --passes {name}"
            + "".join(f" --param {name}.{k}={shlex.quote(v.strip())}" for k, v in params))


# Phrases of advice only a Python session can follow (a Lab's history, keyword arguments of a
# call), each with what the command line offers instead. Literal phrases of the library's own
# messages: a user's path or name never holds them whole.
_PY_PHRASES = (
    # core/save.py: a written model that would not load in onnxruntime
    ("lab.history shows the steps (a failed one, or the one the message names: lab.undo() or "
     "lab.checkout(N) goes back before it); save with external_data=False to keep every tensor "
     "inside the file, check=False to write it as it is, or report the model to onnx_lab.",
     "Leave out the step the message names (optimize --passes/--skip, precision --keep), or "
     "report the model to onnx_lab."),
    # steps.py: the model before a step does not run
    (" Inputs it runs on can be given: verify={'feeds': {name: array}} or a .npz path "
     "(--feeds); or apply with verify=False (--no-verify).",
     " Inputs it runs on can be given with --feeds FILE.npz; or skip verification with "
     "--no-verify."),
    ("verify=False (--no-verify)", "--no-verify"),
    ("Check lab.check()", "Check onnx-lab check MODEL"),
    # profiling/sweep_batch.py
    ("Make the batch dim symbolic first (lab.set_input_shape(input, ['batch', ...]) or "
     "lab.fix_dims for the other dims)",
     "Make the batch dim symbolic first (onnx-lab edit MODEL OUT --input-shape "
     "INPUT:batchx..., or onnx-lab fix-dims for the other dims)"),
    # transforms/registry.py
    ("See onnx_lab.transforms.available() (or `onnx-lab passes`).", "See `onnx-lab passes`."),
)
# lab.py: "Step 3 (fuse_x) is the first version that does not load so: lab.checkout(2) goes
# back before it (its verification ran ...; the steps after it can be applied again without
# it)" -- in the problem, which is otherwise left as the library said it.
_CHECKOUT = re.compile(r": lab\.checkout\(\d+\) goes back before it \(its verification ran "
                       r"with the optimizations off; the steps after it can be applied again "
                       r"without it\)")


def command_line_words(text: str) -> str:
    """``text`` (a message or a finding's fix) with its Python advice as the command line's.

    Example:
        >>> command_line_words("lab.apply('fold_constants', max_growth_bytes=1_000) folds them")
        'onnx-lab optimize MODEL OUT --passes fold_constants --param fold_constants.max_growth_bytes=1_000 folds them'
    """
    for python_only in _PY_ONLY:
        text = text.replace(python_only, ".")
    for python, words in _PY_PHRASES:
        text = text.replace(python, words)
    text = _BOTH_DOORS.sub("", text)
    text = re.sub(_START + r"dims=" + _DICT, _dims_flags, text)
    text = re.sub(_START + r"shapes=" + _DICT, _shape_flags, text)
    text = re.sub(_START + r"feeds=" + _DICT, "--feeds FILE.npz (arrays by input name)", text)
    text = re.sub(_START + r"shapes=(?![{\w])", "--shape INPUT:AxBxC", text)
    text = re.sub(_START + r"lab\.fix_dims\(" + _DICT + r"\)", _fix_dims_command, text)
    text = re.sub(_START + r"lab\.fix_dims\b", "onnx-lab fix-dims", text)
    text = re.sub(_START + r"""lab\.set_input_shape\((['"])((?:(?!\1).)*)\1, \[\.\.\.\]\)""",
                  lambda m: "onnx-lab edit MODEL OUT --input-shape "
                  + shlex.quote(f"{m.group(2)}:AxBxC"), text)
    text = re.sub(_START + r"lab\.convert_opset\((\d+)\)",
                  r"onnx-lab edit MODEL OUT --convert-opset \1", text)
    text = re.sub(_START + r"lab\.convert_opset\b", "onnx-lab edit --convert-opset", text)
    text = _APPLY.sub(_optimize_command, text)
    for pattern, words in _TABLE_PHRASES:
        text = pattern.sub(words, text)
    # the command that writes the tables, said once
    head, sep, tail = text.partition(f" ({_TABLES})")
    return head + sep + tail.replace(f" ({_TABLES})", "")


def command_line_text(e: LabError) -> str:
    """The error as the command line says it: its fix as flags and files instead of Python.

    ``dims={...}`` becomes ``--dims NAME=V`` flags, ``shapes={...}`` ``--shape INPUT:AxB``,
    ``feeds={...}`` ``--feeds FILE.npz``, the tables of a Lab (``lab.nodes.node_id``...) the
    CSV files ``onnx-lab tables`` writes, and the Python-only ``overwrite=True`` escape goes
    (the commands never write over a model or a non-empty folder; there is no flag for it).
    """
    # only the fix is advice: the problem quotes the user's paths and the model's names,
    # which are theirs to keep as they are (a file 'collab.nodes.onnx' was named
    # 'colnodes.csv (onnx-lab tables MODEL).onnx')
    problem = getattr(e, "problem", None)
    if problem is None:
        return command_line_words(str(e))
    for python_only in _PY_ONLY:
        problem = problem.replace(python_only, ".")
    problem = _CHECKOUT.sub(" (its verification ran with the optimizations off)", problem)
    return f"{problem} {command_line_words(e.fix)}" if e.fix else problem
