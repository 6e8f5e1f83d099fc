"""Builders of small ONNX-ML models in the layouts scikit-learn / LightGBM / XGBoost exporters
produce, built with ``onnx.helper`` only (shared by the core, numerics, analysis and transforms
tests; ``tests/`` is on ``sys.path``).

- :func:`linear_zipmap`: ``X`` float [N, 3] → LinearClassifier (3 classes, softmax) → ZipMap:
  outputs ``output_label`` int64 [N] and ``output_probability`` ``seq(map(int64,float))``
  (skl2onnx's default classifier layout).
- :func:`tree_zipmap`: ``X`` float [N, 2] → TreeEnsembleClassifier (2 trees of depth 2, 2
  classes) → ZipMap; ``leaf_delta`` shifts one leaf weight (a real drift).
  ``zipmap=False``: the probabilities tensor is the output; ``ml_only=True``: the model imports
  the ``ai.onnx.ml`` domain only (onnxmltools' XGBoost layout).
- :func:`comb_tree`: ``X`` float [N, 3] → TreeEnsembleRegressor, one tree of 6 splits in a
  row (each feature split twice, at thresholds of different scales), each split's true branch
  a leaf: only a row above every threshold reaches the last leaf; ``leaf_delta`` shifts that
  leaf's weight (a real drift that few rows see).
- :func:`string_pipeline`: string input ``city`` [N] → Identity → OneHotEncoder → MatMul (a float
  score), LabelEncoder → int64 ids, LabelEncoder → string ``region``; ``swap`` changes one
  region of the mapping (a real drift in a string output).
- :func:`sequence_model`: SplitToSequence → SequenceAt / ConcatFromSequence, with the
  sequence itself as an output.
- :func:`sequence_input_model`: a ``seq(tensor(float))`` graph input.
- :func:`optional_model`: Optional → OptionalHasElement / OptionalGetElement, an
  ``optional(tensor(float))`` output.
- :func:`dict_input_model`: a ``map(int64,float)`` graph input → DictVectorizer → Scaler.
- :func:`column_encoders`: a string input [N, 2] whose columns are picked (a Gather, or an
  ArrayFeatureExtractor as skl2onnx's OrdinalEncoder does) into encoders of their own
  (OneHotEncoder of colours, raising on unknown categories; a LabelEncoder of 300 keys);
  ``swap`` exchanges two of the second column's keys (a real drift).
- :func:`tfidf_model`: a string input [N] → Tokenizer → TfIdfVectorizer
  (a pool of 6 words) → MatMul (scikit-learn's TF-IDF + linear model layout); ``weight``
  scales one word's weight.
- :func:`ngram_model`: skl2onnx's CountVectorizer layout, a string input [N, 1] → Reshape →
  Tokenizer by a token expression → TfIdfVectorizer of unigrams and bigrams (40 words and
  40 pairs of them; ``char=True``: 20 letters and 40 letter pairs, split by ``.``) → MatMul;
  ``entry`` (an n-gram's column) has its weight tripled.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["linear_zipmap", "tree_zipmap", "comb_tree", "string_pipeline", "sequence_model",
           "sequence_input_model",
           "optional_model", "dict_input_model", "column_encoders", "tfidf_model", "ngram_model",
           "CITIES"]

F, I64, S = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING
ML = helper.make_operatorsetid("ai.onnx.ml", 3)
CITIES = ["brest", "lyon", "paris", "nantes", "lille"]


def _model(graph: onnx.GraphProto, *, opset: int = 17, ml_only: bool = False,
           producer: str = "skl2onnx") -> onnx.ModelProto:
    imports = [ML] if ml_only else [helper.make_operatorsetid("", opset), ML]
    m = helper.make_model(graph, opset_imports=imports, producer_name=producer)
    m.ir_version = 8
    return m


def _seq_map_float() -> onnx.TypeProto:
    return helper.make_sequence_type_proto(
        helper.make_map_type_proto(I64, helper.make_tensor_type_proto(F, [])))


def linear_zipmap() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    coef = rng.standard_normal(9).astype(np.float32)
    nodes = [
        helper.make_node("LinearClassifier", ["X"], ["label", "probabilities"],
                         domain="ai.onnx.ml", name="LinearClassifier",
                         classlabels_ints=[0, 1, 2], coefficients=coef.tolist(),
                         intercepts=[0.1, -0.2, 0.05], multi_class=1,
                         post_transform="SOFTMAX"),
        helper.make_node("Identity", ["label"], ["output_label"], name="label_id"),
        helper.make_node("ZipMap", ["probabilities"], ["output_probability"],
                         domain="ai.onnx.ml", name="ZipMap", classlabels_int64s=[0, 1, 2]),
    ]
    g = helper.make_graph(
        nodes, "linear_zipmap", [helper.make_tensor_value_info("X", F, ["N", 3])],
        [helper.make_tensor_value_info("output_label", I64, ["N"]),
         helper.make_value_info("output_probability", _seq_map_float())])
    return _model(g)


def tree_zipmap(*, zipmap: bool = True, ml_only: bool = False,
                leaf_delta: float = 0.0) -> onnx.ModelProto:
    # Two trees of depth 2 over 2 features: nodes 0 (root), 1, 2 are splits, 3..6 leaves.
    tree_ids, node_ids, feat, vals, modes, t_true, t_false = [], [], [], [], [], [], []
    cw_tree, cw_node, cw_class, cw_w = [], [], [], []
    for t in range(2):
        for n, (f, v) in enumerate([(0, 0.0), (1, 0.5 * t), (1, -0.5)]):
            tree_ids.append(t), node_ids.append(n), feat.append(f), vals.append(v)
            modes.append("BRANCH_LEQ"), t_true.append(2 * n + 1), t_false.append(2 * n + 2)
        for n in range(3, 7):
            tree_ids.append(t), node_ids.append(n), feat.append(0), vals.append(0.0)
            modes.append("LEAF"), t_true.append(0), t_false.append(0)
            p = 0.2 + 0.15 * (n - 3) + 0.05 * t
            for c, w in ((0, 1.0 - p), (1, p)):
                cw_tree.append(t), cw_node.append(n), cw_class.append(c), cw_w.append(w)
    cw_w[-1] += leaf_delta  # tree 1, leaf 6, class 1
    out = "probabilities" if zipmap else "output_probability"
    nodes = [helper.make_node(
        "TreeEnsembleClassifier", ["X"], ["output_label", out], domain="ai.onnx.ml",
        name="TreeEnsembleClassifier", classlabels_int64s=[0, 1],
        nodes_treeids=tree_ids, nodes_nodeids=node_ids, nodes_featureids=feat,
        nodes_values=vals, nodes_modes=modes, nodes_truenodeids=t_true,
        nodes_falsenodeids=t_false, nodes_hitrates=[1.0] * len(tree_ids),
        nodes_missing_value_tracks_true=[0] * len(tree_ids),
        class_treeids=cw_tree, class_nodeids=cw_node, class_ids=cw_class,
        class_weights=cw_w, post_transform="NONE")]
    outputs = [helper.make_tensor_value_info("output_label", I64, ["N"])]
    if zipmap:
        nodes.append(helper.make_node("ZipMap", ["probabilities"], ["output_probability"],
                                      domain="ai.onnx.ml", name="ZipMap",
                                      classlabels_int64s=[0, 1]))
        outputs.append(helper.make_value_info("output_probability", _seq_map_float()))
    else:
        outputs.append(helper.make_tensor_value_info("output_probability", F, ["N", 2]))
    g = helper.make_graph(nodes, "trees", [helper.make_tensor_value_info("X", F, ["N", 2])],
                          outputs)
    return _model(g, ml_only=ml_only, producer="OnnxMLTools" if ml_only else "skl2onnx")


def comb_tree(*, leaf_delta: float = 0.0) -> onnx.ModelProto:
    splits = [(0, 30.0), (1, 2000.0), (2, 0.5), (0, 60.0), (1, 5000.0), (2, 1.5)]
    ids, fid, vals, modes, t_true, t_false, w_node, w = [], [], [], [], [], [], [], []
    for k, (f, v) in enumerate(splits):  # split k is node 2k, its leaf 2k + 1
        ids += [2 * k, 2 * k + 1]
        fid += [f, 0]
        vals += [v, 0.0]
        modes += ["BRANCH_LEQ", "LEAF"]
        t_true += [2 * k + 1, 0]
        t_false += [2 * k + 2, 0]
        w_node.append(2 * k + 1)
        w.append(float(k))
    last = 2 * len(splits)  # the false branch of the last split
    ids.append(last), fid.append(0), vals.append(0.0), modes.append("LEAF")
    t_true.append(0), t_false.append(0)
    w_node.append(last), w.append(10.0 + leaf_delta)
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", name="comb", n_targets=1,
        nodes_treeids=[0] * len(ids), nodes_nodeids=ids, nodes_featureids=fid,
        nodes_values=vals, nodes_modes=modes, nodes_truenodeids=t_true,
        nodes_falsenodeids=t_false, target_treeids=[0] * len(w), target_nodeids=w_node,
        target_ids=[0] * len(w), target_weights=w)
    g = helper.make_graph([node], "comb", [helper.make_tensor_value_info("X", F, ["N", 3])],
                          [helper.make_tensor_value_info("Y", F, ["N", 1])])
    return _model(g, opset=17)


def string_pipeline(*, swap: bool = False) -> onnx.ModelProto:
    regions = ["bretagne", "rhone", "idf", "loire", "nord"]
    if swap:
        regions[1] = "auvergne"
    w = np.arange(1, len(CITIES) + 1, dtype=np.float32).reshape(-1, 1) / 10
    nodes = [
        # An untyped string intermediate, as skl2onnx's column handling leaves.
        helper.make_node("Identity", ["city"], ["city_col"], name="column"),
        helper.make_node("OneHotEncoder", ["city_col"], ["onehot"], domain="ai.onnx.ml",
                         name="OneHotEncoder", cats_strings=CITIES, zeros=1),
        helper.make_node("MatMul", ["onehot", "w"], ["score"], name="score"),
        helper.make_node("LabelEncoder", ["city_col"], ["city_id"], domain="ai.onnx.ml",
                         name="LabelEncoder", keys_strings=CITIES,
                         values_int64s=list(range(len(CITIES))), default_int64=-1),
        helper.make_node("LabelEncoder", ["city_col"], ["region"], domain="ai.onnx.ml",
                         name="RegionEncoder", keys_strings=CITIES, values_strings=regions,
                         default_string="unknown"),
    ]
    g = helper.make_graph(
        nodes, "strings", [helper.make_tensor_value_info("city", S, ["N"])],
        [helper.make_tensor_value_info("score", F, ["N", 1]),
         helper.make_tensor_value_info("city_id", I64, ["N"]),
         helper.make_tensor_value_info("region", S, ["N"])],
        [numpy_helper.from_array(w, "w")])
    return _model(g)


def sequence_model() -> onnx.ModelProto:
    # Uneven parts (widths 1, 2, 3): numpy cannot stack them into one array.
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [4, None]))
    nodes = [
        helper.make_node("Relu", ["X"], ["r"], name="relu"),
        helper.make_node("SplitToSequence", ["r", "split"], ["parts"], axis=1, name="split"),
        helper.make_node("SequenceAt", ["parts", "one"], ["second"], name="at"),
        helper.make_node("ConcatFromSequence", ["parts"], ["joined"], axis=1, name="concat"),
        helper.make_node("Mul", ["joined", "two"], ["Y"], name="mul"),
    ]
    g = helper.make_graph(
        nodes, "sequences", [helper.make_tensor_value_info("X", F, [4, 6])],
        [helper.make_tensor_value_info("Y", F, [4, 6]),
         helper.make_tensor_value_info("second", F, [4, 2]),
         helper.make_value_info("parts", seq)],
        [numpy_helper.from_array(np.array([1, 2, 3], np.int64), "split"),
         numpy_helper.from_array(np.array(1, np.int64), "one"),
         numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    return _model(g, producer="onnx_lab.tests")


def sequence_input_model(element_shape: list | None = (2, 3)) -> onnx.ModelProto:
    """A ``seq(tensor(float))`` graph input named ``sequence`` (elements ``element_shape``;
    None: undeclared, as the ONNX backend tests' sequence models) → ConcatFromSequence → Relu,
    and SequenceLength."""
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(
        F, None if element_shape is None else list(element_shape)))
    nodes = [
        helper.make_node("ConcatFromSequence", ["sequence"], ["joined"], axis=0, name="concat"),
        helper.make_node("Relu", ["joined"], ["Y"], name="relu"),
        helper.make_node("SequenceLength", ["sequence"], ["length"], name="length"),
    ]
    g = helper.make_graph(nodes, "seq_input", [helper.make_value_info("sequence", seq)],
                          [helper.make_tensor_value_info("Y", F, [None, 3]),
                           helper.make_tensor_value_info("length", I64, [])])
    return _model(g, producer="onnx_lab.tests")


def optional_model() -> onnx.ModelProto:
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2, 3]))
    nodes = [
        helper.make_node("Optional", ["X"], ["maybe"], name="wrap"),
        helper.make_node("OptionalHasElement", ["maybe"], ["has"], name="has"),
        helper.make_node("OptionalGetElement", ["maybe"], ["got"], name="get"),
        helper.make_node("Sigmoid", ["got"], ["Y"], name="sig"),
    ]
    g = helper.make_graph(
        nodes, "optionals", [helper.make_tensor_value_info("X", F, [2, 3])],
        [helper.make_tensor_value_info("Y", F, [2, 3]),
         helper.make_tensor_value_info("has", TensorProto.BOOL, []),
         helper.make_value_info("maybe", opt)])
    return _model(g, opset=18, producer="onnx_lab.tests")


def dict_input_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("DictVectorizer", ["features"], ["vec"], domain="ai.onnx.ml",
                         name="DictVectorizer", int64_vocabulary=[1, 2, 3]),
        helper.make_node("Scaler", ["vec"], ["Y"], domain="ai.onnx.ml", name="Scaler",
                         offset=[0.5, 0.5, 0.5], scale=[2.0, 2.0, 2.0]),
    ]
    in_type = helper.make_map_type_proto(I64, helper.make_tensor_type_proto(F, []))
    g = helper.make_graph(nodes, "dicts", [helper.make_value_info("features", in_type)],
                          [helper.make_tensor_value_info("Y", F, [1, 3])])
    return _model(g)


def column_encoders(*, picker: str = "Gather", swap: bool = False) -> onnx.ModelProto:
    keys = [f"k{i}" for i in range(300)]
    values = list(range(300))
    if swap:
        values[280], values[281] = values[281], values[280]
    nodes = []
    for k in (0, 1):
        index = numpy_helper.from_array(np.array([k], np.int64), f"col{k}")
        nodes.append(helper.make_node("Constant", [], [f"i{k}"], value=index))
        if picker == "Gather":
            nodes.append(helper.make_node("Gather", ["x", f"i{k}"], [f"c{k}"], axis=1))
        else:
            nodes.append(helper.make_node("ArrayFeatureExtractor", ["x", f"i{k}"], [f"c{k}"],
                                          domain="ai.onnx.ml"))
    nodes += [
        helper.make_node("OneHotEncoder", ["c0"], ["hot"], domain="ai.onnx.ml",
                         cats_strings=["red", "green", "blue"], zeros=0),
        helper.make_node("ReduceSum", ["hot"], ["colour"], keepdims=0),
        helper.make_node("LabelEncoder", ["c1"], ["code"], domain="ai.onnx.ml",
                         keys_strings=keys, values_int64s=values, default_int64=-1),
    ]
    g = helper.make_graph(nodes, "columns", [helper.make_tensor_value_info("x", S, ["N", 2])],
                          [helper.make_tensor_value_info("colour", F, None),
                           helper.make_tensor_value_info("code", I64, None)])
    return _model(g)


def tfidf_model(*, weight: float = 1.0) -> onnx.ModelProto:
    pool = ["apple", "banana", "cherry", "grape", "lemon", "mango"]
    w = np.linspace(0.5, 2.0, len(pool), dtype=np.float32).reshape(-1, 1)
    w[3] *= weight
    nodes = [
        # (a StringNormalizer before it wants the en_US locale, which onnxruntime lacks here)
        helper.make_node("Tokenizer", ["text"], ["tokens"], domain="com.microsoft",
                         mark=0, mincharnum=1, pad_value="#", separators=[" "]),
        helper.make_node("TfIdfVectorizer", ["tokens"], ["counts"], mode="TF",
                         min_gram_length=1, max_gram_length=1, max_skip_count=0,
                         ngram_counts=[0], ngram_indexes=list(range(len(pool))),
                         pool_strings=pool),
        helper.make_node("MatMul", ["counts", "w"], ["score"]),
    ]
    g = helper.make_graph(nodes, "tfidf", [helper.make_tensor_value_info("text", S, ["N"])],
                          [helper.make_tensor_value_info("score", F, None)],
                          [numpy_helper.from_array(w, "w")])
    m = _model(g)
    m.opset_import.append(helper.make_operatorsetid("com.microsoft", 1))
    return m


def ngram_model(*, char: bool = False, entry: int | None = None) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    letters = [chr(ord("a") + i) for i in range(20)]
    tokens = letters if char else [f"{a}{b}o" for a in letters[:8] for b in letters[:5]]
    pairs = [(tokens[k // len(tokens)], tokens[k % len(tokens)])
             for k in rng.choice(len(tokens) ** 2, 40, replace=False)]
    pool = tokens + [t for p in pairs for t in p]
    size = len(tokens) + len(pairs)
    w = np.linspace(0.5, 2.0, size, dtype=np.float32).reshape(-1, 1)
    if entry is not None:
        w[entry] *= 3
    nodes = [
        helper.make_node("Reshape", ["text", "flat"], ["flattened"]),
        helper.make_node("Tokenizer", ["flattened"], ["tokens"], domain="com.microsoft",
                         mark=0, mincharnum=1, pad_value="#",
                         tokenexp="." if char else "[a-zA-Z0-9_]+"),
        helper.make_node("TfIdfVectorizer", ["tokens"], ["counts"], mode="TF",
                         min_gram_length=1, max_gram_length=2, max_skip_count=0,
                         ngram_counts=[0, len(tokens)], ngram_indexes=list(range(size)),
                         pool_strings=pool),
        helper.make_node("MatMul", ["counts", "w"], ["score"]),
    ]
    g = helper.make_graph(nodes, "ngrams", [helper.make_tensor_value_info("text", S, ["N", 1])],
                          [helper.make_tensor_value_info("score", F, None)],
                          [numpy_helper.from_array(w, "w"),
                           numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    m = _model(g)
    m.opset_import.append(helper.make_operatorsetid("com.microsoft", 1))
    return m
