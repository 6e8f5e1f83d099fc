"""pandas, imported when a table is first built rather than with ``import onnx_lab``.

Importing pandas takes ~0.2 s, a tenth of a whole ``onnx-lab optimize`` run on BERT-base,
and commands such as ``optimize`` and ``extract`` build no table at all. Modules write
``from onnx_lab._pandas import pd`` and use ``pd.DataFrame`` as usual: the first attribute
looked up imports pandas. Type checkers see the real module. Nothing is put in
``sys.modules``: the user's own ``import pandas`` is the ordinary one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["pd", "prefetch"]


_READY: list[Any] = []  # the pandas module, once configured


def _pandas() -> Any:
    """The pandas module; the first call turns off its MathJax in HTML tables
    (``display.html.use_mathjax``): onnx_lab's tables hold a model's names, which are text.
    ``$\\href{https://...}{Conv}$`` as a node name was typeset in JupyterLab into a link
    reading "Conv". Set it back with ``pandas.set_option("display.html.use_mathjax", True)``.
    """
    if not _READY:
        import pandas

        pandas.set_option("display.html.use_mathjax", False)
        _READY.append(pandas)
    return _READY[0]


def prefetch() -> None:
    """Import pandas now: for a caller that would otherwise sit idle (``open`` waiting for a
    large model's weights to be read in the background), so the first table does not pay it."""
    _pandas()


class _Pandas:
    """Forwards attribute lookups to the pandas module, imported on the first one."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(_pandas(), name)

    def __repr__(self) -> str:
        return "<pandas, imported on first use by onnx_lab>"


if TYPE_CHECKING:
    import pandas as pd
else:
    pd = _Pandas()
