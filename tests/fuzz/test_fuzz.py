"""The fuzz harness in the normal test run: a few hundred hostile cases, each in its own
child process with a time and a memory limit (``make fuzz`` runs 10,000; see fuzz.py).

Every case must end in a result, a LabError or a skip (bytes that are no ModelProto cannot be
passed as one): no other exception, no crash, no timeout, no case over the memory limit, no
read outside the model's folder, no change to an input file, no temporary left behind, every
history version unchanged, every CLI error one line with exit code 2.

``ONNX_LAB_FUZZ_CASES`` (default 300) and ``ONNX_LAB_FUZZ_SEED`` (default 14) change the run.
"""

from __future__ import annotations

import os

import pytest
from fuzz_cases import FAMILIES, cases, nested_if_bytes
from fuzz_worker import GOOD, Worker
from hypothesis import HealthCheck, Phase, given, seed, settings

CASES = int(os.environ.get("ONNX_LAB_FUZZ_CASES", "300"))
SEED = int(os.environ.get("ONNX_LAB_FUZZ_SEED", "14"))

pytestmark = pytest.mark.slow  # hundreds of child processes: `make test`, not `make check`


@pytest.fixture(scope="module")
def worker():
    with Worker(time_limit=20.0, memory_limit=2 << 30) as w:
        yield w


def test_fuzz_cases_end_in_a_result_or_a_lab_error(worker):
    seen: dict[str, int] = {}
    bad: list[str] = []

    @seed(SEED)
    @settings(max_examples=CASES, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(cases())
    def one(case):
        r = worker.run(case)
        seen[case["family"]] = seen.get(case["family"], 0) + 1
        if r["outcome"] not in GOOD:
            bad.append(f"{r['outcome']}: {case['desc'][:200]}\n    {r.get('detail', '')[:400]}"
                       f"\n{r.get('traceback', '')[-1500:]}")

    one()
    assert not bad, f"{len(bad)} of {sum(seen.values())} cases failed:\n" + "\n".join(bad[:10])
    # every family ran (the weights make each likely at a few hundred cases)
    if CASES >= 200:
        assert set(seen) == set(FAMILIES), seen


def test_worker_reports_a_crash_a_timeout_and_memory():
    """The harness itself: a case that kills its process, one that hangs and one that
    allocates past the limit end as crash, timeout and memory, not as passes."""
    fast = Worker(time_limit=2.0, memory_limit=512 << 20)
    try:
        crash = fast.run({"kind": "selftest", "what": "segv", "files": {}, "desc": "segv"})
        hang = fast.run({"kind": "selftest", "what": "hang", "files": {}, "desc": "hang"})
        big = fast.run({"kind": "selftest", "what": "alloc", "files": {}, "desc": "alloc"})
        ok = fast.run({"kind": "model", "files": {"model/m.onnx": nested_if_bytes(2)},
                       "model": "model/m.onnx", "source": "path", "ops": ["nodes"],
                       "desc": "nested 2"})
    finally:
        fast.close()
    assert crash["outcome"] == "crash" and "SIGSEGV" in crash["detail"]
    assert hang["outcome"] == "timeout" and hang["seconds"] < 10
    assert big["outcome"] == "memory"
    assert ok["outcome"] == "result", ok
