"""Dim expressions: symbolic dims computed from other dims, evaluated from the dims given.

Exporters write dims such as ``past_sequence_length + sequence_length`` (optimum's attention
mask and present key/values), ``2*seq``, ``floor(height/32)`` or ``((s0 - 1)//2) + 1`` (torch's
sympy dims). Such a dim is not a name to give: it is evaluated from the names it uses, wherever
dims are resolved (open, feeds, every step and tool, cost, profile, the tables, the widgets).

Grammar (spaces anywhere; anything else is not an expression and stays one opaque dim name)::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/" | "//" | "%") unary)*
    unary  := ("-" | "+") unary | atom
    atom   := INT | NAME | "(" expr ")" | FUNC "(" expr ("," expr)* ")"
    FUNC   := floor | ceil | ceiling | min | max          (any case: Floor, Max...)
            | Mod(a, b) | FloorDiv(a, b) | CeilToInt(x) | FloorToInt(x)

``/`` divides exactly (fractions); ``floor``/``ceil`` round; ``//`` and ``%`` are floor
division and modulo. A dim's value must come out a whole number ``>= 0``. A dim given by its
exact text in ``dims`` takes that value (so a name that happens to parse, ``batch-size``, can
still be given as it is written).

A model's strings are hostile: the text is parsed with :mod:`ast` (never ``eval``) and only the
nodes above are accepted. Text over :data:`MAX_TEXT` characters or :data:`MAX_NODES` parse
nodes, powers (``9**9**9``), attributes, calls of anything else (``__import__('os')``),
strings and floats are not expressions. Every value while evaluating stays within
:data:`MAX_VALUE` in magnitude, else DimError.

Why not onnx_ir's ``SymbolicDim.evaluate``: its parser accepts ``**`` and sympy computes the
power eagerly — ``9**9**5`` builds a 56,000-digit integer, ``9**9**9`` exhausts memory — so a
model's dim string could stall open().

Example:
    >>> from onnx_lab.core.dimexpr import dim_expression, resolve_dim
    >>> e = dim_expression("past_sequence_length + sequence_length")
    >>> e.names, e.evaluate({"past_sequence_length": 4, "sequence_length": 3})
    (('past_sequence_length', 'sequence_length'), 7)
    >>> resolve_dim("floor(height/32)", {"height": 320})
    10
"""

from __future__ import annotations

import ast
import copy
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from onnx_lab.errors import DimError

__all__ = ["DimExpr", "dim_expression", "dim_names", "resolve_dim", "MAX_TEXT", "MAX_NODES",
           "MAX_VALUE"]

#: Longest dim text parsed as an expression (torch's longest sympy dims are ~100 characters).
MAX_TEXT = 256
#: Most parse nodes in one expression.
MAX_NODES = 64
#: Largest magnitude of any value met while evaluating (a dim is an int64 at run time).
MAX_VALUE = (1 << 62) - 1

_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
_FUNCS = {  # name -> (canonical, min args, max args)
    "floor": ("floor", 1, 1), "floortoint": ("floor", 1, 1),
    "ceil": ("ceil", 1, 1), "ceiling": ("ceil", 1, 1), "ceiltoint": ("ceil", 1, 1),
    "min": ("min", 2, 8), "max": ("max", 2, 8),
    "mod": ("mod", 2, 2), "floordiv": ("floordiv", 2, 2),
}


@dataclass(frozen=True)
class DimExpr:
    """A parsed dim expression.

    Attributes:
        text: the dim as the model writes it.
        names: the dim names it uses, in order of first appearance.
    """

    text: str
    names: tuple[str, ...]
    _tree: ast.expr = field(repr=False, compare=False)

    def evaluate(self, dims: Mapping[str, int]) -> int | None:
        """The value with ``dims``; None when a name it uses is not in ``dims``.

        Raises:
            DimError: a division by zero, a value out of range, a result that is not a
                whole number >= 0.
        """
        if any(not _is_int(dims.get(n)) for n in self.names):
            return None
        value = _eval(self._tree, dims, self.text)
        if value.denominator != 1:
            raise DimError(f"Dim {self.text!r} is {value} with {self.given(dims)}: not a whole "
                           "number.", fix="Give sizes for which it divides evenly.")
        if value < 0:
            raise DimError(f"Dim {self.text!r} is {value} with {self.given(dims)}: a size "
                           "cannot be negative.", fix="Give larger sizes for its names.")
        return int(value)

    def substitute(self, dims: Mapping[str, int]) -> int | str:
        """The value when ``dims`` gives every name; else the text with the names it gives
        replaced by their values (``4 + sequence_length``), or unchanged.

        Raises:
            DimError: as :meth:`evaluate`.
        """
        value = self.evaluate(dims)
        if value is not None:
            return value
        fixed = {n: int(dims[n]) for n in self.names if _is_int(dims.get(n))}
        if not fixed:
            return self.text

        class _Fix(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name) -> ast.AST:
                return ast.Constant(fixed[node.id]) if node.id in fixed else node

            def visit_Call(self, node: ast.Call) -> ast.AST:  # keep the function's name
                node.args = [self.visit(a) for a in node.args]
                return node

        return ast.unparse(_Fix().visit(copy.deepcopy(self._tree)))

    def given(self, dims: Mapping[str, int]) -> str:
        """``"past=4, seq=3"``: the values of its names in ``dims`` (for messages)."""
        return ", ".join(f"{n}={dims[n]}" for n in self.names) or "no names"


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def dim_expression(text: str) -> DimExpr | None:
    """The expression ``text`` writes, or None when it is a plain name or not an expression.

    Never runs code and never raises: hostile or malformed text is simply not an expression
    (it stays an opaque dim name, given by that name or by ``shapes=``).

    Example:
        >>> dim_expression("2*seq").names
        ('seq',)
        >>> dim_expression("batch") is None, dim_expression("__import__('os')") is None
        (True, True)
    """
    if not isinstance(text, str) or not text or len(text) > MAX_TEXT or text.isidentifier():
        return None
    if not any(c in text for c in "+-*/%()") and not text.strip().isdigit():
        return None  # "batch size", "s0 s1": no operator, nothing to evaluate
    return _parse(text)  # cached: only short texts (a long one is never kept)


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> DimExpr | None:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    nodes = []
    for node in ast.walk(tree):
        nodes.append(node)
        if len(nodes) > MAX_NODES or not _allowed(node):
            return None
    funcs = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    # ast.walk is breadth-first: order the names as the text writes them
    found = sorted((n for n in nodes if isinstance(n, ast.Name) and id(n) not in funcs),
                   key=lambda n: (n.lineno, n.col_offset))
    return DimExpr(text, tuple(dict.fromkeys(n.id for n in found)), tree.body)


def _allowed(node: ast.AST) -> bool:
    if isinstance(node, (ast.Expression, ast.Load, *_BINOPS, ast.USub, ast.UAdd, ast.Name)):
        return True
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, _BINOPS)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, (ast.USub, ast.UAdd))
    if isinstance(node, ast.Constant):
        return _is_int(node.value)
    if isinstance(node, ast.Call):
        spec = _FUNCS.get(node.func.id.lower()) if isinstance(node.func, ast.Name) else None
        return spec is not None and not node.keywords and spec[1] <= len(node.args) <= spec[2] \
            and not any(isinstance(a, ast.Starred) for a in node.args)
    return False


def _bounded(v: Fraction, text: str) -> Fraction:
    if abs(v.numerator) > MAX_VALUE or v.denominator > MAX_VALUE:
        raise DimError(f"Dim {text!r} computes a value beyond {MAX_VALUE} (2**62): not a size.",
                       fix="Give smaller sizes, or the input's whole shape with shapes=.")
    return v


def _eval(node: ast.expr, dims: Mapping[str, int], text: str) -> Fraction:
    if isinstance(node, ast.Constant):
        return _bounded(Fraction(node.value), text)
    if isinstance(node, ast.Name):
        return _bounded(Fraction(int(dims[node.id])), text)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, dims, text)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, dims, text), _eval(node.right, dims, text)
        return _bounded(_binop(type(node.op).__name__, a, b, text), text)
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)  # by _allowed
    fn = _FUNCS[node.func.id.lower()][0]
    args = [_eval(a, dims, text) for a in node.args]
    if fn == "floor":
        return Fraction(math.floor(args[0]))
    if fn == "ceil":
        return Fraction(math.ceil(args[0]))
    if fn == "min":
        return min(args)
    if fn == "max":
        return max(args)
    return _bounded(_binop("Mod" if fn == "mod" else "FloorDiv", args[0], args[1], text), text)


def _binop(op: str, a: Fraction, b: Fraction, text: str) -> Fraction:
    if op == "Add":
        return a + b
    if op == "Sub":
        return a - b
    if op == "Mult":
        return a * b
    if b == 0:
        raise DimError(f"Dim {text!r} divides by zero with the dims given.",
                       fix="Give a non-zero size for the divisor's names.")
    if op == "Div":
        return a / b
    if op == "FloorDiv":
        return Fraction(a // b)
    return a % b  # Mod


def dim_names(d: object) -> tuple[str, ...]:
    """The dim names a user gives for dim ``d``: itself for a name, an expression's names,
    none for an int or an unknown dim."""
    if not isinstance(d, str) or not d:
        return ()
    expr = dim_expression(d)
    return expr.names if expr is not None else (d,)


def resolve_dim(d: object, dims: Mapping[str, int], *, strict: bool = False) -> object:
    """``d`` with ``dims`` applied: a given name's value, an expression's value once all its
    names are given, else ``d`` unchanged (ints and None pass through).

    Args:
        strict: raise DimError when an expression cannot be evaluated (division by zero, a
            negative or fractional value); otherwise it stays symbolic.

    Example:
        >>> resolve_dim("past + seq", {"past": 4, "seq": 3}), resolve_dim("batch", {})
        (7, 'batch')
    """
    if not isinstance(d, str):
        return d
    if d in dims and _is_int(dims[d]):
        return int(dims[d])
    expr = dim_expression(d)
    if expr is None:
        return d
    try:
        value = expr.evaluate(dims)
    except DimError:
        if strict:
            raise
        return d
    return d if value is None else value
