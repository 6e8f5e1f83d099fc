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


def prefetch() -> None:
    """Import pandas now: for a caller that would otherwise sit idle (``open`` waiting for a
    large model's weights to be read in the background), so the first table does not pay it."""
    import pandas  # noqa: F401 - the import is the point


class _Pandas:
    """Forwards attribute lookups to the pandas module, imported on the first one."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        import pandas

        return getattr(pandas, name)

    def __repr__(self) -> str:
        return "<pandas, imported on first use by onnx_lab>"


if TYPE_CHECKING:
    import pandas as pd
else:
    pd = _Pandas()
