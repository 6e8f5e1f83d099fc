"""optimum's merged decoders (all decoder compute inside an ``If`` on ``use_cache_branch``):
tiny random-weight T5 and Whisper exported by optimum, every onnx_lab check that concerns them.

Setup (once; nothing is fetched from a model hub, the weights are random)::

    python3.11 -m venv /tmp/optimum && /tmp/optimum/bin/pip install torch==2.13.0
    /tmp/optimum/bin/pip install optimum-onnx onnxruntime sentencepiece

Run::

    .venv/bin/python benchmarks/bench_merged_decoders.py --export-python /tmp/optimum/bin/python
    .venv/bin/python benchmarks/bench_merged_decoders.py --models DIR   # DIR/{t5,whisper}/ exported

Per model it prints: ``cost()`` nodes of unknown cost with every dim given and the KV cache's
size; the fp16 and bf16 plans of ``find_precision`` and, for each, the logits of the saved plan
in a fresh onnxruntime session for ``use_cache_branch`` True (past 4 and 1) and False (past 0)
(finite? max |err| against float32); the int8 refusal; onnxslim with past length 0 and
onnxruntime's transformer optimizer (both refused before verification); for T5 also int8 on the
encoder (whose relative-attention Gather fails to run when quantized: failed trials).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import onnx_lab
from onnx_lab.errors import LabError

DIMS = {"batch_size": 1, "decoder_sequence_length": 3, "past_decoder_sequence_length": 4,
        "encoder_sequence_length": 5}

_EXPORT = r'''
import os, sys
os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"
import torch
from optimum.exporters.onnx import main_export
from transformers import (T5Config, T5ForConditionalGeneration, WhisperConfig,
                          WhisperFeatureExtractor, WhisperForConditionalGeneration)
out = sys.argv[1]
torch.manual_seed(0)
T5ForConditionalGeneration(T5Config(
    vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, relative_attention_num_buckets=8,
    relative_attention_max_distance=16)).save_pretrained(f"{out}/src/t5")
WhisperForConditionalGeneration(WhisperConfig(
    vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
    max_source_positions=32, max_target_positions=32, pad_token_id=0, bos_token_id=1,
    eos_token_id=2, decoder_start_token_id=1, begin_suppress_tokens=None,
    suppress_tokens=None)).save_pretrained(f"{out}/src/whisper")
WhisperFeatureExtractor(feature_size=16, n_samples=64 * 160, chunk_length=1).save_pretrained(
    f"{out}/src/whisper")
main_export(f"{out}/src/t5", output=f"{out}/t5", task="text2text-generation-with-past")
main_export(f"{out}/src/whisper", output=f"{out}/whisper",
            task="automatic-speech-recognition-with-past", nb_max_frames=64)
'''


def export(python: str, folder: Path) -> None:
    script = folder / "export.py"
    script.write_text(_EXPORT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([python, str(script), str(folder)], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _feeds(sess, flag: bool, past: int, rng) -> dict[str, np.ndarray]:
    """optimum's feeds of one step: use_cache_branch=False with an empty cache."""
    b, s, e = 1, DIMS["decoder_sequence_length"], DIMS["encoder_sequence_length"]
    out = {}
    for i in sess.get_inputs():
        n, shape = i.name, i.shape
        if n == "use_cache_branch":
            out[n] = np.array([flag])
        elif n == "input_ids":
            out[n] = rng.integers(0, 128, (b, s)).astype(np.int64)
        elif n == "encoder_attention_mask":
            out[n] = np.ones((b, e), np.int64)
        elif n == "encoder_hidden_states":
            out[n] = rng.standard_normal((b, e, shape[2])).astype(np.float32)
        else:  # past_key_values.{i}.{decoder,encoder}.{key,value}
            out[n] = rng.standard_normal(
                (b, shape[1], past if ".decoder." in n else e, shape[3])).astype(np.float32)
    return out


def fresh_check(original: Path, plan: Path) -> str:
    """The saved plan's logits in a fresh onnxruntime session, both branches."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    ref = ort.InferenceSession(str(original), so, providers=["CPUExecutionProvider"])
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 3
    cand = ort.InferenceSession(str(plan), quiet, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    parts = []
    for flag, past in ((True, 4), (False, 0), (True, 1)):
        f = _feeds(ref, flag, past, rng)
        r = ref.run(["logits"], f)[0]
        c = np.asarray(cand.run(["logits"], f)[0], np.float32)
        parts.append(f"{flag}/past {past}: " + (f"max|err| {np.abs(c - r).max():.3g}"
                                                 if np.isfinite(c).all() else "NaN/inf"))
    return "; ".join(parts)


def attempt(what: str, fn) -> str:
    try:
        return str(fn())
    except LabError as e:
        return f"{type(e).__name__}: {e.problem[:160]}"


def check(folder: Path, name: str, out: Path) -> None:
    path = folder / name / "decoder_model_merged.onnx"
    lab = onnx_lab.open(path, dims=DIMS)
    t0 = time.perf_counter()
    c = lab.cost()
    print(f"{name}: cost() {c.total['unknown_nodes']} of {c.total['nodes']} nodes unknown, "
          f"KV cache {c.kv_cache} ({time.perf_counter() - t0:.2f} s)")
    print(f"  outputs: {dict(zip(lab.outputs['name'], lab.outputs['shape']))}")
    for target in ("fp16", "bf16"):
        t0 = time.perf_counter()
        plan_lab = onnx_lab.open(path, dims=DIMS)
        plan = plan_lab.find_precision(target, progress=False)
        saved = plan_lab.save(out / f"{name}_{target}.onnx")
        print(f"  {target}: {len(plan.kept)} kept, {len(plan.trials)} trials, verified "
              f"{plan.result.verify_passed}, {time.perf_counter() - t0:.0f} s; fresh session: "
              f"{fresh_check(path, saved)}")
    print("  int8:", attempt("int8", lambda: lab.find_precision("int8", progress=False)))
    slim = onnx_lab.open(path, dims={**DIMS, "past_decoder_sequence_length": 0})
    print("  onnxslim, past 0:", attempt("slim", lambda: slim.apply("onnxslim")))
    print("  ort_transformers:", attempt("ort", lambda: lab.apply("ort_transformers")))
    if name == "t5":
        enc = onnx_lab.open(folder / name / "encoder_model.onnx",
                            dims={"batch_size": 1, "encoder_sequence_length": 5})
        plan = enc.find_precision("int8", progress=False)
        failed = int(plan.trials["note"].astype(str).str.startswith(
            "candidate failed to run").sum())
        print(f"  encoder int8: {failed} of {len(plan.trials)} trials failed to run "
              f"(counted as failed), {len(plan.kept)} kept, passed {plan.passed}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--export-python", help="python of an environment with optimum-onnx")
    p.add_argument("--models", help="a folder holding t5/ and whisper/ exported by optimum")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="merged_") as tmp:
        folder = Path(args.models) if args.models else Path(tmp)
        if not args.models:
            if not args.export_python:
                sys.exit("pass --export-python (an environment with optimum) or --models DIR")
            export(args.export_python, folder)
        for name in ("t5", "whisper"):
            check(folder, name, Path(tmp))


if __name__ == "__main__":
    main()
