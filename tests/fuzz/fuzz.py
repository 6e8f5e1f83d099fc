"""Run the fuzz harness: ``make fuzz`` (10,000 cases), or a few hundred from the test suite.

Cases come from the hypothesis strategies of ``fuzz_cases``; each runs in its own child process
of a ``fuzz_worker`` fork server, with a time and a memory limit. Shards run in parallel (one
fork server each, distinct seeds); every outcome goes to a JSON-lines log, the cases that end
badly (anything but a result, a LabError or a skip) are pickled next to it for ``--replay``,
and a summary (cases, outcomes per family, slowest case, peak memory) is printed and written
as JSON.

Usage::

    .venv/bin/python tests/fuzz/fuzz.py --cases 10000 --jobs 2       # what make fuzz runs
    .venv/bin/python tests/fuzz/fuzz.py --replay test-artifacts/fuzz/failures/0-17.pkl
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from fuzz_worker import GOOD, Worker  # noqa: E402


def _record(case: dict[str, Any], r: dict[str, Any], i: int) -> dict[str, Any]:
    return {"i": i, "family": case.get("family"), "kind": case.get("kind"),
            "desc": str(case.get("desc", ""))[:400], "outcome": r.get("outcome"),
            "seconds": r.get("seconds"), "max_rss": r.get("max_rss"),
            "detail": str(r.get("detail", ""))[:600], "notes": [str(n)[:200] for n in
                                                             r.get("notes", [])[:4]],
            "traceback": r.get("traceback", "")[-2500:] if r.get("outcome") not in GOOD else ""}


def run_shard(n: int, seed: int, log: Path, failures: Path, time_limit: float,
              memory_limit: int, shard: int = 0) -> int:
    """Run ``n`` cases drawn with ``seed``; append one JSON line per case to ``log``."""
    from fuzz_cases import cases
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    done = 0
    with Worker(time_limit, memory_limit) as worker, open(log, "a") as out:
        attempt = 0
        while done < n:
            @hseed(seed * 1000 + attempt)
            @settings(max_examples=n - done, database=None, deadline=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            @given(cases())
            def one(case: dict[str, Any]) -> None:
                nonlocal done
                if done >= n:
                    return
                r = worker.run(case)
                rec = _record(case, r, done)
                if rec["outcome"] not in GOOD:
                    failures.mkdir(parents=True, exist_ok=True)
                    with open(failures / f"{shard}-{done}.pkl", "wb") as f:
                        pickle.dump(case, f)
                out.write(json.dumps(rec) + "\n")
                out.flush()
                done += 1

            before = done
            one()
            attempt += 1
            if done == before:  # hypothesis found nothing new to draw: give up honestly
                break
    return done


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Cases, outcomes (overall and per family), slowest case, peak memory, bad cases."""
    outcomes = Counter(r["outcome"] for r in records)
    families: dict[str, Counter] = {}
    for r in records:
        families.setdefault(r["family"], Counter())[r["outcome"]] += 1
    slow = max(records, key=lambda r: r["seconds"] or 0, default=None)
    big = max(records, key=lambda r: r["max_rss"] or 0, default=None)
    secs = sorted(r["seconds"] or 0 for r in records)
    return {
        "cases": len(records),
        "outcomes": dict(outcomes.most_common()),
        "families": {f: dict(c.most_common()) for f, c in sorted(families.items())},
        "bad": sum(v for k, v in outcomes.items() if k not in GOOD),
        "slowest": {"seconds": slow["seconds"], "desc": slow["desc"]} if slow else None,
        "median_seconds": secs[len(secs) // 2] if secs else None,
        "peak_rss_bytes": big["max_rss"] if big else None,
        "peak_rss": {"GiB": round(big["max_rss"] / 2**30, 3), "desc": big["desc"]}
        if big else None,
        "bad_cases": [{k: r[k] for k in ("family", "desc", "outcome", "detail")}
                      for r in records if r["outcome"] not in GOOD][:50],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--time-limit", type=float, default=20.0, help="seconds per case")
    ap.add_argument("--memory-limit", type=float, default=2.0, help="GiB of peak RSS per case")
    ap.add_argument("--out", default="test-artifacts/fuzz", help="folder for log and summary")
    ap.add_argument("--shard", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--replay", default=None, help="run one pickled case and print its report")
    a = ap.parse_args(argv)
    out = Path(a.out)
    mem = int(a.memory_limit * 2**30)
    if a.replay:
        with open(a.replay, "rb") as f:
            case = pickle.load(f)
        with Worker(a.time_limit, mem) as w:
            r = w.run(case)
        print(case["desc"])
        print(json.dumps({k: v for k, v in r.items()}, indent=2, default=str))
        return 0 if r["outcome"] in GOOD else 1
    if a.shard is not None:
        run_shard(a.cases, a.seed, out / f"log-{a.shard}.jsonl", out / "failures",
                  a.time_limit, mem, a.shard)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for p in out.glob("log-*.jsonl"):
        p.unlink()
    t0 = time.time()
    per = [a.cases // a.jobs + (1 if k < a.cases % a.jobs else 0) for k in range(a.jobs)]
    procs = [subprocess.Popen([sys.executable, __file__, "--shard", str(k), "--cases", str(n),
                               "--seed", str(a.seed + k), "--time-limit", str(a.time_limit),
                               "--memory-limit", str(a.memory_limit), "--out", str(out)])
             for k, n in enumerate(per) if n]
    last = t0
    while any(p.poll() is None for p in procs):
        time.sleep(1)
        if time.time() - last < 60:
            continue
        last = time.time()
        done = sum(sum(1 for _ in open(p)) for p in out.glob("log-*.jsonl"))
        print(f"fuzz: {done}/{a.cases} cases, {time.time() - t0:.0f} s", file=sys.stderr,
              flush=True)
    records = [json.loads(line) for p in sorted(out.glob("log-*.jsonl")) for line in open(p)]
    s = summarize(records)
    s.update(seed=a.seed, jobs=a.jobs, time_limit_s=a.time_limit,
             memory_limit_gib=a.memory_limit, wall_seconds=round(time.time() - t0, 1))
    (out / "summary.json").write_text(json.dumps(s, indent=2))
    print(json.dumps({k: v for k, v in s.items() if k != "bad_cases"}, indent=2))
    for b in s["bad_cases"][:20]:
        print(f"BAD {b['outcome']}: {b['desc'][:200]}\n    {b['detail'][:300]}")
    ok = s["bad"] == 0 and s["cases"] >= a.cases and all(p.returncode == 0 for p in procs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
