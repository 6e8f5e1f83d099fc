"""Is one model faster than another beyond the noise: two sessions run interleaved."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onnx_lab.core.source import resolve
from onnx_lab.profiling._sweep_common import NO_SPIN, _check_budget
from onnx_lab.profiling._timing import cancelled
from onnx_lab.profiling.stats import (
    compare_samples,
    stable,
)
from onnx_lab.runtime.feeds import as_feed_list
from onnx_lab.runtime.session import make_session, run_session

__all__ = ["compare_models"]


def compare_models(a: Any, b: Any, *, runs: int | None = None, warmup: int = 3,
                   budget_s: float = 4.0, feeds: Any = None,
                   dims: Mapping[str, int] | None = None,
                   shapes: Mapping[str, Sequence[int]] | None = None,
                   providers: str | Sequence[str] | None = None, opt_level: str = "all",
                   threads: int | None = None, labels: tuple[str, str] = ("A", "B"),
                   cancel: Any = None):
    """Is model ``b`` faster or slower than ``a`` beyond the noise?

    Both sessions run interleaved (a, b, a, b...), so a change of load on the machine hits
    both alike, until both medians are stable or ``budget_s`` (from the call to the result,
    the sessions and warm-up included) is spent (or ``runs`` each).
    The feeds are made for ``a`` (both models must take the same inputs).

    Returns:
        A :class:`~onnx_lab.profiling.stats.Difference` (``.text``: the verdict in words,
        e.g. "no difference beyond noise between A and B (...)").

    Example:
        >>> compare_models("sample:convnet", "sample:convnet").different
        False
    """
    perf = time.perf_counter
    t_start = perf()
    _check_budget(runs, warmup, budget_s)
    la, dims_a, shapes_a = resolve(a, dims, shapes)
    lb, _, _ = resolve(b, dims, shapes)
    feed = as_feed_list(feeds, la, dims_a, shapes_a)[0]
    sa = make_session(la, providers=providers, opt_level=opt_level, threads=threads,
                      config_entries=NO_SPIN)
    sb = make_session(lb, providers=providers, opt_level=opt_level, threads=threads,
                      config_entries=NO_SPIN)
    last = 0.0  # seconds of the latest round: the estimate of the next one
    checked = False  # each session's first run is checked (a failure translated)
    for i in range(warmup):
        if i and runs is None and perf() + last > t_start + budget_s:
            break
        t = perf()
        if checked:
            sa.run(None, feed)
            sb.run(None, feed)
        else:
            run_session(sa, feed, what=f"model {labels[0]}")
            run_session(sb, feed, what=f"model {labels[1]}")
            checked = True
        last = perf() - t
    xa, xb = [], []
    limit = runs if runs is not None else 2000
    while len(xa) < limit:
        if xa and cancelled(cancel):
            break
        if xa and runs is None and perf() + (xa[-1] + xb[-1]) / 1e3 > t_start + budget_s:
            break
        for sess, out, label in ((sa, xa, labels[0]), (sb, xb, labels[1])):
            t = perf()
            if checked:
                sess.run(None, feed)
            else:
                run_session(sess, feed, what=f"model {label}")
            out.append((perf() - t) * 1e3)
        checked = True
        if runs is None:
            if perf() - t_start >= budget_s and len(xa) >= 3:
                break
            if len(xa) >= 20 and len(xa) % 5 == 0 and stable(np.array(xa)) \
                    and stable(np.array(xb)):
                break
    return compare_samples(np.array(xa), np.array(xb), labels=labels)
