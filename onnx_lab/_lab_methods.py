"""The parts of :class:`onnx_lab.lab.Lab` that are generated rather than written: the edit
methods (``lab.set_attribute(...)`` is ``lab.apply("set_attribute", ...)``, its signature,
doc and keyword check read from the registry: :class:`_EditStep`) and ``lab.history``'s table
that writes the session as a script (:func:`_history_table`)."""

from __future__ import annotations

import inspect
import types
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from onnx_lab._pandas import pd
from onnx_lab.errors import InputError, check_keywords

if TYPE_CHECKING:
    from onnx_lab.lab import Lab


def _history_table(df: pd.DataFrame, replay: Any) -> pd.DataFrame:
    """``lab.history``: the history's table (a DataFrame) that can also write the session as a
    script (``lab.history.to_script()``). Frames derived from it (``.tail()``, a query) are
    plain DataFrames. The class is made on first use: pandas is imported when a table is first
    built, not with the façade (``onnx-lab summary`` builds none)."""
    cls = _HISTORY_TABLE[0] if _HISTORY_TABLE else None
    if cls is None:
        class HistoryTable(pd.DataFrame):
            _metadata = ["_replay"]

            @property
            def _constructor(self) -> type:
                return pd.DataFrame

            def to_script(self, source: str | None = None) -> str:
                """The Python script that replays the session up to the current step
                (:meth:`Lab.to_script`)."""
                replay = getattr(self, "_replay", None)
                if replay is None:
                    raise InputError("This table is not a Lab's history.",
                                     fix="Call lab.history.to_script() or lab.to_script().")
                return replay(source)

        _HISTORY_TABLE.append(HistoryTable)
        cls = HistoryTable
    table = cls(df)
    table._replay = replay
    return table


_HISTORY_TABLE: list[type] = []


class _EditStep:
    """``lab.<pass>(...)``: ``lab.apply(<pass>, verify=verify, **params)`` for an edit pass of
    the registry. Its signature (the pass's parameters in their registered order, then
    ``verify``), its doc (the pass's docstring) and its keyword check come from the registry,
    read on first use (the passes stay unimported until then). ``legacy``: keyword names the
    hand-written methods had ({old: parameter}); they still work, with a DeprecationWarning
    naming the new keyword. ``tests/test_keywords.py`` keeps the methods equal to the
    registry's edit passes."""

    def __init__(self, pass_name: str, legacy: Mapping[str, str] | None = None) -> None:
        self.pass_name = pass_name
        self.legacy = dict(legacy or {})
        self.__name__ = self.__qualname__ = pass_name
        self._sig: inspect.Signature | None = None
        self._params: tuple = ()

    def __set_name__(self, owner: type, name: str) -> None:
        self.__qualname__ = f"{owner.__name__}.{name}"

    def _resolve(self) -> None:
        # on first use: the façade loads no pass until an edit method is read or called
        from onnx_lab.transforms.base import _REGISTRY, _load_builtins

        _load_builtins()
        entry = _REGISTRY[self.pass_name]
        self._params = entry.params
        P = inspect.Parameter
        params = [P("self", P.POSITIONAL_OR_KEYWORD)]
        params += [P(p.name, P.POSITIONAL_OR_KEYWORD, default=p.default) for p in entry.params]
        params.append(P("verify", P.KEYWORD_ONLY, default=True))
        self._sig = inspect.Signature(params)
        doc = inspect.cleandoc(entry.factory.__doc__ or entry.summary)
        self._doc = (f"{doc}\n\nA new version: ``lab.apply({self.pass_name!r}, verify=verify, "
                     "**params)`` (:meth:`Lab.apply`).")

    @property
    def __signature__(self) -> inspect.Signature:
        if self._sig is None:
            self._resolve()
        return self._sig

    @property
    def __doc__(self) -> str:  # type: ignore[override]
        if self._sig is None:
            self._resolve()
        return self._doc

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, lab: Lab, *args: Any, verify: bool | Mapping[str, Any] = True,
                 **kw: Any):
        if self._sig is None:
            self._resolve()
        names = [p.name for p in self._params]
        for old, new in self.legacy.items():
            if old in kw and new not in kw:
                warnings.warn(f"lab.{self.pass_name}({old}=...) is deprecated: use "
                              f"lab.{self.pass_name}({new}=...).", DeprecationWarning,
                              stacklevel=2)
                kw[new] = kw.pop(old)
        check_keywords(f"Lab.{self.pass_name}()", kw, names + ["verify"])
        if len(args) > len(names):
            raise InputError(f"Lab.{self.pass_name}() takes {len(names)} positional "
                             f"arguments ({', '.join(names)}), got {len(args)}.",
                             fix="Pass the rest by keyword.")
        for name, value in zip(names, args):
            if name in kw:
                raise InputError(f"Lab.{self.pass_name}() got {name!r} twice.",
                                 fix=f"Pass {name} once.")
            kw[name] = value
        for p in self._params:  # the containers the methods always accepted in any form
            v = kw.get(p.name)
            if p.type is dict and isinstance(v, Mapping) and not isinstance(v, dict):
                kw[p.name] = dict(v)
            elif p.type is list and isinstance(v, tuple):
                kw[p.name] = list(v)
        return lab.apply(self.pass_name, verify=verify, **kw)
