"""Generation profiling benchmarks (prints figures; asserts nothing).

Loop overhead: ``onnx_lab.profile_generation`` against a bare onnxruntime loop doing the same
feeding (IOBinding, ``present.*`` bound back as ``past_key_values.*``, ``attention_mask`` /
``position_ids`` grown per step, argmax of the last logits), alternated in ABBA order in one
process, on ``sample:tiny_llm`` and on a Llama built by onnxruntime-genai's model builder
(random weights, 4 layers; built once into ``benchmarks/_models/llm/``). Two ratios per model:

- loop: the median wall time of one generation (prefill + N decode steps) inside
  ``profile_generation`` (its unprofiled generations) over the bare loop's; target <= 1.1x.
- loop, interleaved: the loop ``profile_generation`` runs (``_Loop.generate``: the same code,
  its per-step timing included) and the bare loop on one session, alternating generation by
  generation (ABBA), so a load change on the shared machine hits both alike; target <= 1.1x.
- call: the whole ``profile_generation(runs=R, warmup=1)`` call (session with the profiler, 2
  profiled generations, trace parsing, the tables) over the bare loop's session creation and
  R + 1 generations: what the per-operator shares cost on top (reported, no target).

    .venv/bin/python benchmarks/bench_llm.py [--prompt 32] [--new 32] [--runs 20] [--repeat 4]
        [--only tiny,genai]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import _models  # noqa: E402

import onnx_lab  # noqa: E402
from onnx_lab.core.derived import with_derived  # noqa: E402
from onnx_lab.core.llm import require_decoder_io  # noqa: E402
from onnx_lab.runtime.session import make_session  # noqa: E402


def genai_model() -> Path:
    """The genai-built tiny Llama (onnxruntime-genai's builder, cached)."""
    from models import genai_build

    return genai_build(_models.MODELS_DIR / "llm", "fp32")


class BareLoop:
    """What a user writes by hand: one session, IOBinding, greedy argmax."""

    def __init__(self, lab, prompt: np.ndarray, new: int, dims: dict) -> None:
        self.sess = make_session(lab.model, opt_level="all")
        io = require_decoder_io(lab.model)
        self.io, self.prompt, self.new = io, prompt, new
        self.empty = io.empty_cache(batch=1, dims=with_derived(lab.model, dims))
        self.outs = [o.name for o in self.sess.get_outputs()]
        self.li = self.outs.index(io.logits)
        self.pi = [(s.past, self.outs.index(s.present)) for s in io.cache]
        total = prompt.shape[1] + new
        self.mask = np.ones((1, total), np.int64)
        self.pos = np.arange(total, dtype=np.int64)[None]

    def generate(self) -> float:
        t = time.perf_counter()
        ids, past, n = self.prompt, self.empty, 0
        for _ in range(self.new + 1):
            b = self.sess.io_binding()
            b.bind_cpu_input(self.io.input_ids, ids)
            end = n + ids.shape[1]
            b.bind_cpu_input(self.io.attention_mask, self.mask[:, :end])
            if self.io.position_ids:
                b.bind_cpu_input(self.io.position_ids, np.ascontiguousarray(self.pos[:, n:end]))
            for k, v in past.items():
                if isinstance(v, np.ndarray):
                    b.bind_cpu_input(k, v)
                else:
                    b.bind_ortvalue_input(k, v)
            for o in self.outs:
                b.bind_output(o, "cpu")
            self.sess.run_with_iobinding(b)
            res = b.get_outputs()
            ids = res[self.li].numpy()[:, -1].argmax(-1).reshape(1, 1)
            past = {p: res[i] for p, i in self.pi}
            n = end
        return (time.perf_counter() - t) * 1e3


def bare(lab, prompt, new, runs, dims) -> tuple[float, list[float]]:
    """(seconds of the whole loop with session creation and 1 warm-up, generation ms)."""
    t0 = time.perf_counter()
    loop = BareLoop(lab, prompt, new, dims)
    loop.generate()
    ms = [loop.generate() for _ in range(runs)]
    return time.perf_counter() - t0, ms


def ours(lab, prompt, new, runs, dims, profile_runs=None) -> tuple[float, list[float]]:
    t0 = time.perf_counter()
    g = onnx_lab.profile_generation(lab, prompt=prompt[0], new_tokens=new, runs=runs,
                                    warmup=1, providers="cpu", dims=dims, progress=False,
                                    profile_runs=profile_runs)
    secs = time.perf_counter() - t0
    gens = g.generations.loc[~g.generations.warmup & ~g.generations.profiled]
    return secs, list(gens.total_ms)


def interleaved(lab, prompt, new, dims, n: int) -> tuple[float, float]:
    """Median generation ms of profile_generation's loop and of the bare loop, one session,
    alternating per generation in ABBA order."""
    from onnx_lab.profiling.generate import _Loop, cache_layout

    b = BareLoop(lab, prompt, new, dims)
    ours_loop = _Loop(b.sess, cache_layout(lab.model, dims), prompt, new, True)
    ms = np.empty(new + 1)

    def one_ours() -> float:
        t = time.perf_counter()
        ours_loop.generate(ms)
        return (time.perf_counter() - t) * 1e3

    for _ in range(3):
        b.generate()
        one_ours()
    a, o = [], []
    for i in range(n):
        if i % 2 == 0:
            a.append(b.generate())
            o.append(one_ours())
        else:
            o.append(one_ours())
            a.append(b.generate())
    return statistics.median(o), statistics.median(a)


def bench(name: str, source, dims: dict, P: int, N: int, runs: int, repeat: int) -> None:
    lab = onnx_lab.open(str(source), dims=dims)
    prompt = np.random.default_rng(0).integers(0, 200, (1, P)).astype(np.int64)
    bare(lab, prompt, N, 1, dims)  # warm the allocator and the file cache
    ours(lab, prompt, N, 1, dims, profile_runs=0)
    loop_b, loop_o, call_b, call_o = [], [], [], []
    for i in range(repeat):
        # ABBA: whichever runs second is not always the same side.
        order = ("b", "o") if i % 2 == 0 else ("o", "b")
        for side in order:
            if side == "b":
                s, ms = bare(lab, prompt, N, runs, dims)
                call_b.append(s)
                loop_b.extend(ms)
            else:
                # The loop ratio without the profiler's generations, the call with them.
                _, ms = ours(lab, prompt, N, runs, dims, profile_runs=0)
                loop_o.extend(ms)
                s, _ = ours(lab, prompt, N, runs, dims)
                call_o.append(s)
    mb, mo = statistics.median(loop_b), statistics.median(loop_o)
    print(f"{name}: prompt {P}, {N} new tokens, {runs} generations x {repeat} repeats (ABBA)")
    qb, qo = np.percentile(loop_b, 25), np.percentile(loop_o, 25)
    print(f"  loop: median generation {mo:.2f} ms in profile_generation vs {mb:.2f} ms bare "
          f"-> {mo / mb:.3f}x (target <= 1.1x); p25 {qo / qb:.3f}x, best "
          f"{min(loop_o) / min(loop_b):.3f}x; ~{mo / (N + 1):.3f} ms/step; load average "
          f"{os.getloadavg()[0]:.1f}")
    io, ib = interleaved(lab, prompt, N, dims, runs * repeat)
    print(f"  loop, interleaved per generation on one session: {io:.2f} vs {ib:.2f} ms "
          f"-> {io / ib:.3f}x (target <= 1.1x)")
    cb, co = statistics.median(call_b), statistics.median(call_o)
    print(f"  call: profile_generation {co:.2f} s (2 profiled generations, trace, tables) vs "
          f"bare {cb:.2f} s -> {co / cb:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--only", default="tiny,genai")
    a = ap.parse_args()
    only = set(a.only.split(","))
    if "tiny" in only:
        bench("sample:tiny_llm (genai layout, 2 layers)", "sample:tiny_llm", {}, a.prompt,
              a.new, a.runs, a.repeat)
    if "genai" in only:
        bench("onnxruntime-genai builder, tiny Llama (4 layers)", genai_model(), {},
              a.prompt, a.new, a.runs, a.repeat)


if __name__ == "__main__":
    main()
