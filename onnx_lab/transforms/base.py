"""Pass infrastructure: matches, results with provenance, the rewrite context, the registry.

Every transform is a :class:`LabPass`, an ``onnx_ir.passes.InPlacePass`` that works on a clone:
``LabPass(...).run(model)`` clones the LabModel, stamps each node with its origin, lets the pass
find its matches and rewrite the chosen ones through a :class:`Rewrite` context (which records
which nodes each new node came from), and returns a :class:`PassResult` with the new model,
before/after counts, provenance, removed ids, and a human reason when nothing was done.

Provenance is written into node ``metadata_props["onnx_lab.origin"]`` (a JSON list of node ids
of the original model), so it composes across steps and survives save/load; :func:`origins`
reads it back. onnx_ir's own passes do not track provenance, which is why this layer exists.

The parts live by job and every name stays importable from here: ``results.py`` (Param,
Match, PassContext, PassResult), ``rewrite.py`` (Rewrite), ``registry.py`` (LabPass and the
registry: register_pass, get_pass, pass_names, pass_kind, pass_traits, available).
"""

from __future__ import annotations

from onnx_lab.core.provenance import ORIGIN_KEY, node_origin, origins, stamp_origins
from onnx_lab.transforms.registry import (  # noqa: F401  (private names re-exported for tests)
    _REGISTRY,
    LabPass,
    _Entry,
    _load_builtins,
    _register_factory,
    available,
    get_pass,
    pass_kind,
    pass_names,
    pass_traits,
    register_pass,
)
from onnx_lab.transforms.results import Match, Param, PassContext, PassResult
from onnx_lab.transforms.rewrite import Rewrite, _fresh  # noqa: F401

__all__ = ["ORIGIN_KEY", "Param", "Match", "PassContext", "PassResult", "Rewrite", "LabPass", "register_pass",
           "get_pass", "pass_names", "pass_kind", "available", "origins", "node_origin",
           "stamp_origins"]
