"""A KNeighborsClassifier in float16 whose TopK flips an exact distance tie: the comparison
passes (the tie is one in exact arithmetic: either neighbour is as right), and its summary
says what the outputs do as run, with the candidate's own picks."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnxruntime as ort
from skl2onnx import to_onnx
from sklearn.neighbors import KNeighborsClassifier

import onnx_lab

# iris rows: the query's third neighbour is at squared distance 0.22 (in decimals) from two
# training rows of other classes, [6.3, 2.8, 5.1, 1.5] (class 2) and [5.7, 2.8, 4.5, 1.3]
# (class 1); float32 rounding picks class 1, float16's class 2
ROWS = [["6.1", "3.0", "4.6", "1.4"], ["6.0", "3.0", "4.8", "1.8"], ["6.3", "2.8", "5.1", "1.5"],
        ["5.7", "2.8", "4.5", "1.3"], ["5.0", "3.4", "1.5", "0.2"], ["4.9", "3.0", "1.4", "0.2"],
        ["7.7", "3.0", "6.1", "2.3"], ["5.1", "3.5", "1.4", "0.3"]]
TRAIN = np.array(ROWS, np.float64).astype(np.float32)
LABELS = np.array([1, 2, 2, 1, 0, 0, 2, 0])
QUERY = {"X": np.array([[6.1, 2.9, 4.7, 1.4], [5.0, 3.3, 1.5, 0.2]], np.float32)}


def test_a_flipped_exact_tie_passes_and_says_what_the_outputs_do_as_run():
    knn = KNeighborsClassifier(n_neighbors=3).fit(TRAIN, LABELS)
    ref = to_onnx(knn, TRAIN[:1], target_opset=17, options={"zipmap": False})
    half = onnx_lab.to_fp16(onnx_lab.open(ref)).model.to_proto()
    # the truth, in fresh sessions: the first row's label and probabilities move
    r = ort.InferenceSession(ref.SerializeToString()).run(None, QUERY)
    c = ort.InferenceSession(half.SerializeToString()).run(None, QUERY)
    assert list(r[0]) == [1, 0] and list(c[0]) == [2, 0]
    moved = float(np.abs(c[1].astype(np.float64) - r[1]).max())
    assert abs(moved - 1 / 3) < 1e-3
    # the distances tie in exact (decimal) arithmetic, at the third neighbour
    q = [Fraction(v) for v in ("6.1", "2.9", "4.7", "1.4")]
    d = [sum((Fraction(a) - b) ** 2 for a, b in zip(row, q)) for row in ROWS]
    assert d[2] == d[3] == Fraction("0.22") and sorted(d)[1] < d[2] < sorted(d)[4]

    cmp = onnx_lab.compare(ref, half, feeds=QUERY)
    assert cmp.passed, cmp.summary_text()
    assert cmp.selections and cmp.selections[0]["node_id"] == "To_TopK"
    prob = cmp.outputs.set_index("tensor").loc["probabilities"]
    assert prob["max_abs"] < 1e-2  # judged on the reference's picks
    assert f"as run, with the candidate's own picks, max_abs {moved:.3g}" in prob["note"]
    text = cmp.summary_text()
    assert ("as run, with the candidate's own picks, the outputs below the flip differ: "
            f"'label' (max_abs 1), 'probabilities' (max_abs {moved:.3g})") in text, text
    assert "rewritten by the step" not in text
