"""make_feeds / as_feed_list: dtypes, Gather vocab, masks, scalars, npz, samples, errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from numerics_helpers import make_model, vi
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.errors import DimError, InputError
from onnx_lab.numerics import as_feed_list, make_feeds


def _embedding_model():
    table = np.arange(50 * 4, dtype=np.float32).reshape(50, 4)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], name="gather"),
             helper.make_node("Cast", ["attention_mask"], ["m"], name="cast", to=1),
             helper.make_node("Unsqueeze", ["m", "axes"], ["m3"], name="unsq"),
             helper.make_node("Mul", ["emb", "m3"], ["e"], name="mul"),
             helper.make_node("Mul", ["e", "temperature"], ["y"], name="scale")]
    inits = [numpy_helper.from_array(table, "table"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    return make_model(nodes,
                      [vi("ids", ["batch", "seq"], TensorProto.INT64),
                       vi("attention_mask", ["batch", "seq"], TensorProto.INT64),
                       vi("temperature", [], TensorProto.FLOAT)],
                      [vi("y", ["batch", "seq", 4])], inits)


def test_make_feeds_respects_dtypes_vocab_masks_scalars():
    lab = onnx_lab.open(_embedding_model(), dims={"batch": 2, "seq": 64})
    f = make_feeds(lab)
    assert f["ids"].dtype == np.int64 and f["ids"].shape == (2, 64)
    assert f["ids"].min() >= 0 and f["ids"].max() < 50 and f["ids"].max() > 10
    assert (f["attention_mask"] == 1).all()
    assert f["temperature"].shape == () and f["temperature"].dtype == np.float32
    assert np.array_equal(make_feeds(lab)["ids"], f["ids"])  # seeded
    assert not np.array_equal(make_feeds(lab, seed=1)["ids"], f["ids"])
    samples = make_feeds(lab, n=3)
    assert isinstance(samples, list) and len(samples) == 3
    assert not np.array_equal(samples[0]["ids"], samples[1]["ids"])
    r = make_feeds(lab, ranges={"temperature": (2.0, 3.0)})
    assert 2.0 <= float(r["temperature"]) <= 3.0
    c = onnx_lab.compare(lab, lab, feeds=samples)
    assert c.passed and c.outputs["numel"].iloc[0] == 3 * 2 * 64 * 4


def test_unresolved_dims_name_each_dim_and_the_fix():
    with pytest.raises(DimError, match=r"'batch'.*'seq'") as e:
        make_feeds(onnx_lab.open(_embedding_model()))
    assert "dims={" in str(e.value)
    with pytest.raises(DimError, match="seq"):
        onnx_lab.compare("sample:transformer_block", "sample:transformer_block",
                         dims={"batch": 1})


def test_npz_and_dict_feeds(tmp_path):
    lab = onnx_lab.open("sample:convnet")
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    path = tmp_path / "feeds.npz"
    np.savez(path, input=x)
    (f,) = as_feed_list(str(path), lab)
    assert np.array_equal(f["input"], x)
    (g,) = as_feed_list({"input": x.astype(np.float64)}, lab)  # float64 -> float32
    assert g["input"].dtype == np.float32
    c = onnx_lab.compare(lab, lab, feeds=str(path))
    assert c.passed and np.array_equal(c.feeds[0]["input"], x)
    with pytest.raises(InputError, match="does not exist"):
        as_feed_list(str(tmp_path / "nope.npz"), lab)


def _cast_model(dtype: int):
    """y = x as float32 (a Cast for bfloat16; DequantizeLinear at scale 1, opset 21, which
    onnxruntime runs for int4 and float8 inputs): an input of ``dtype``."""
    node = {TensorProto.FLOAT: helper.make_node("Mul", ["x", "scale"], ["y"], name="mul"),
            TensorProto.BFLOAT16: helper.make_node("Cast", ["x"], ["y"], name="cast", to=1)}
    m = make_model([node.get(dtype) or helper.make_node("DequantizeLinear", ["x", "scale"],
                                                        ["y"], name="dq")],
                   [vi("x", [4], dtype)], [vi("y", [4])],
                   [numpy_helper.from_array(np.array(1, np.float32), "scale")], opset=21)
    m.ir_version = 10
    return m


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "int4"])
def test_an_npz_of_ml_dtypes_arrays_is_read_as_the_inputs_type(tmp_path, dtype):
    # numpy.savez writes an ml_dtypes array as raw bytes (dtype V2/V1 when loaded): it used to
    # end in a raw "No cast function available" ValueError (the CLI exited 1, "drift")
    import ml_dtypes

    onnx_type = {"bfloat16": TensorProto.BFLOAT16, "float8_e4m3fn": TensorProto.FLOAT8E4M3FN,
                 "int4": TensorProto.INT4}[dtype]
    lab = onnx_lab.open(_cast_model(onnx_type))
    x = np.array([0, 1, -2, 3]).astype(getattr(ml_dtypes, dtype))
    path = tmp_path / "feeds.npz"
    np.savez(path, x=x)
    assert np.load(path)["x"].dtype.type is np.void
    (f,) = as_feed_list(str(path), lab)
    assert f["x"].dtype == x.dtype and f["x"].tobytes() == x.tobytes()
    c = onnx_lab.compare(lab, lab, feeds=str(path))
    assert c.passed
    np.testing.assert_array_equal(c.feeds[0]["x"].astype(np.float32), [0, 1, -2, 3])
    # raw bytes of another item size than the input's type, or for a float32 input
    np.savez(path, x=np.zeros(4, "V8"))
    with pytest.raises(InputError, match=r"Feed 'x' holds raw bytes \(dtype \|?V8\)"):
        as_feed_list(str(path), lab)


def test_raw_bytes_for_a_float_input_and_object_arrays_say_what_to_do(tmp_path):
    lab = onnx_lab.open(_cast_model(TensorProto.FLOAT))
    path = tmp_path / "feeds.npz"
    np.savez(path, x=np.zeros(4, "V4"))
    with pytest.raises(InputError, match="raw bytes") as e:
        as_feed_list(str(path), lab)
    assert "tensor(float)" in str(e.value) or "float" in str(e.value)
    np.savez(path, x=np.array(["a", "b"], dtype=object))  # how strings are usually held
    with pytest.raises(InputError, match=r"arr\.astype\(str\)"):
        as_feed_list(str(path), lab)


def test_bad_feeds_name_the_input():
    lab = onnx_lab.open("sample:convnet")
    x = np.zeros((1, 3, 32, 32), np.float32)
    with pytest.raises(InputError, match=r"missing \['input'\]"):
        onnx_lab.compare(lab, lab, feeds={"other": x})
    with pytest.raises(InputError, match="dim 2 must be 32"):
        onnx_lab.compare(lab, lab, feeds={"input": np.zeros((1, 3, 16, 32), np.float32)})
    with pytest.raises(InputError, match="rank"):
        onnx_lab.compare(lab, lab, feeds={"input": np.zeros((3, 32, 32), np.float32)})
    with pytest.raises(InputError, match="dtype"):
        onnx_lab.compare(lab, lab, feeds={"input": np.zeros((1, 3, 32, 32), np.int64)})
    with pytest.raises(InputError, match="not a dict"):
        as_feed_list([x], lab)


def test_unresolved_dims_are_listed_once_per_dim():
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["c"], ["r"])],
        "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "seq"]),
              helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", "seq"]),
              helper.make_tensor_value_info("c", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", "seq"]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [None, 4])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(DimError) as e:
        make_feeds(lab)
    assert e.value.problem == ("Unresolved dims: 'batch' (used by a[0], b[0]); 'seq' (used by "
                               "a[1], b[1]); input 'c' dim 0 (unnamed).")
    assert "dims={'batch': 1, 'seq': 1} and shapes={'c': [...]}" in e.value.fix


def _loop_model(w: float) -> onnx.ModelProto:
    """y = x · w**n by a Loop of ``n`` iterations (a scalar int32 trip count, as a TF
    while_loop exports it), the weight read from the outer graph."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"], name="keep"),
         helper.make_node("Mul", ["y_in", "w"], ["y_out"], name="mul")], "body",
        [vi("i", [], TensorProto.INT64), vi("cond", [], TensorProto.BOOL), vi("y_in", [4])],
        [vi("cond_out", [], TensorProto.BOOL), vi("y_out", [4])])
    nodes = [helper.make_node("Cast", ["n"], ["n64"], name="cast", to=TensorProto.INT64),
             helper.make_node("Loop", ["n64", "", "x"], ["y"], name="loop", body=body)]
    return make_model(nodes, [vi("x", [4]), vi("n", [], TensorProto.INT32)], [vi("y", [4])],
                      [numpy_helper.from_array(np.array(w, np.float32), "w")])


def test_a_one_element_integer_is_a_count_of_at_least_one():
    # A TF while_loop's trip count drawn as 0 ran no iteration: a weight planted in the body
    # passed compare and every verified step.
    for seed in range(20):
        assert make_feeds(_loop_model(1.0), seed=seed)["n"] >= 1
    c = onnx_lab.compare(_loop_model(1.0), _loop_model(1.05), progress=False)
    assert not c.passed


@pytest.mark.parametrize("picker", ["Gather", "ArrayFeatureExtractor"])
def test_each_picked_column_is_drawn_from_its_own_encoder(picker):
    # skl2onnx's OneHotEncoder / OrdinalEncoder of two columns: column 1 got column 0's
    # colours (onnxruntime refused them: "Unknown Category and zeros = 0") or made-up words
    # (every LabelEncoder answered its default: two swapped keys passed)
    from ml_models import column_encoders

    feeds = make_feeds(onnx_lab.open(column_encoders(picker=picker), dims={"N": 400}))
    x = feeds["x"]
    assert set(x[:, 0]) <= {"red", "green", "blue"}
    # past the first 256 keys too, and one off the list (the LabelEncoder's default)
    assert set(x[:, 1]) == {f"k{i}" for i in range(300)} | {"unlisted"}
    c = onnx_lab.compare(column_encoders(picker=picker), column_encoders(picker=picker),
                         dims={"N": 400})
    assert c.passed
    bad = onnx_lab.compare(column_encoders(picker=picker),
                           column_encoders(picker=picker, swap=True), dims={"N": 400})
    assert not bad.passed


def test_text_before_a_tfidf_vectorizer_is_sentences_of_its_pool():
    # made-up words are in no pool: every count was 0 and a weight 3x larger passed
    import onnxruntime as ort
    from ml_models import tfidf_model

    lab = onnx_lab.open(tfidf_model(), dims={"N": 8})
    text = make_feeds(lab)["text"]
    assert all(len(t.split()) == 3 for t in text)
    assert {w for t in text for w in t.split()} <= {"apple", "banana", "cherry", "grape",
                                                       "lemon", "mango"}
    sess = ort.InferenceSession(tfidf_model().SerializeToString(),
                                providers=["CPUExecutionProvider"])
    assert sess.run(None, {"text": text})[0].any()  # counted
    assert not onnx_lab.compare(tfidf_model(), tfidf_model(weight=3.0), dims={"N": 8}).passed


@pytest.mark.parametrize("char", [False, True])
@pytest.mark.parametrize("n", [1, 4])
def test_text_reaches_every_ngram_of_a_tfidf_vectorizer(char, n):
    # 3 random words a sentence reached 12 of 80 n-grams in 4 sentences (a bigram's words
    # were never side by side; letters joined by spaces never formed a letter pair), and a
    # weight tripled on any other n-gram passed compare
    import onnxruntime as ort
    from ml_models import ngram_model

    m = ngram_model(char=char)
    feeds = make_feeds(onnx_lab.open(m, dims={"N": n}))
    assert feeds["text"].shape == (n, 1)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    extract = onnx.helper.make_tensor_value_info("counts", TensorProto.FLOAT, None)
    m2 = ngram_model(char=char)
    m2.graph.output.append(extract)
    counts = ort.InferenceSession(m2.SerializeToString(), providers=["CPUExecutionProvider"]
                                  ).run(["counts"], feeds)[0]
    assert (counts != 0).any(axis=0).all()  # every unigram and bigram counted
    sess.run(None, feeds)
    assert onnx_lab.compare(m, m, dims={"N": n}).passed
    for entry in (5, -20, -1):  # a unigram, two bigrams
        assert not onnx_lab.compare(m, ngram_model(char=char, entry=entry),
                                    dims={"N": n}).passed, entry


def test_a_long_vocabulary_keeps_short_sentences_beside_the_long_ones():
    from onnx_lab.runtime.feeds import Vocab

    rng = np.random.default_rng(0)
    rows = Vocab(tuple(f"w{i}" for i in range(100)), sentences=True).draw(8, rng)
    assert sorted(len(r.split()) for r in rows)[:4] == [3, 3, 3, 3]
    assert {w for r in rows for w in r.split()} == {f"w{i}" for i in range(100)}


def _binarizer(classes, *, gather_rows: int | None = None) -> onnx.ModelProto:
    """skl2onnx's LabelBinarizer: Equal(classes, input reshaped [N, 1]) → Where → Cast; with
    ``gather_rows`` the input also indexes a table of that many rows."""
    kind = TensorProto.STRING if isinstance(classes[0], str) else TensorProto.INT64
    arr = np.array(classes, dtype=object if kind == TensorProto.STRING else np.int64)
    inits = [numpy_helper.from_array(arr, "classes"),
             numpy_helper.from_array(np.array([-1, 1], np.int64), "col"),
             numpy_helper.from_array(np.ones((1, len(classes)), np.int64), "one"),
             numpy_helper.from_array(np.zeros((1, len(classes)), np.int64), "zero")]
    nodes = [helper.make_node("Reshape", ["label", "col"], ["r"]),
             helper.make_node("Equal", ["classes", "r"], ["eq"]),
             helper.make_node("Where", ["eq", "one", "zero"], ["onehot"])]
    outputs = [helper.make_tensor_value_info("onehot", TensorProto.INT64, None)]
    if gather_rows:
        inits.append(numpy_helper.from_array(np.arange(gather_rows, dtype=np.float32), "t"))
        nodes.append(helper.make_node("Gather", ["t", "label"], ["looked"]))
        outputs.append(helper.make_tensor_value_info("looked", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "binarizer",
                          [helper.make_tensor_value_info("label", kind, ["N"])], outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("classes", [["bird", "cat", "dog"], [3, 40, 500]])
def test_an_input_compared_with_a_constant_list_takes_its_values(classes):
    # a LabelBinarizer export: made-up words (or [0, 10)) matched no class, every row was
    # zeros, and a renamed class passed compare
    m = _binarizer(classes)
    label = make_feeds(onnx_lab.open(m, dims={"N": 8}))["label"]
    assert set(classes) <= set(label.tolist()) and len(set(label.tolist())) == 4  # + one other
    assert onnx_lab.compare(m, m, dims={"N": 8}).passed
    renamed = [*classes[:1], (classes[1] + "s") if isinstance(classes[1], str) else 41,
               *classes[2:]]
    assert not onnx_lab.compare(m, _binarizer(renamed), dims={"N": 8}).passed


def test_integers_compared_with_a_list_that_also_index_a_table_stay_within_it():
    # the classes 40 and 500 lie past a 10-row table the same input indexes: onnxruntime
    # would refuse the feeds of a correct model
    m = _binarizer([3, 40, 500], gather_rows=10)
    label = make_feeds(onnx_lab.open(m, dims={"N": 8}))["label"]
    assert label.max() < 10
    assert onnx_lab.compare(m, m, dims={"N": 8}).passed


def test_indices_of_an_array_feature_extractor_stay_within_its_columns():
    g = helper.make_graph(
        [helper.make_node("ArrayFeatureExtractor", ["x", "y"], ["z"], domain="ai.onnx.ml")],
        "afe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 1)])
    for feeds in make_feeds(onnx_lab.open(m), n=20):
        assert 0 <= feeds["y"].min() and feeds["y"].max() < 4
    assert onnx_lab.compare(m, m).passed


def _ml(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 3),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def test_picks_of_picked_columns_compose_and_integer_casts_pass():
    # a ColumnTransformer: AFE(x, [1, 2]) then Gather(.., 0) and (.., 1) feed encoders of
    # x's columns 1 and 2 (column 1 got column 2's sizes: "Unknown Category"); an int64
    # column cast before an integer OneHotEncoder got [0, 10)
    S, I64, F = TensorProto.STRING, TensorProto.INT64, TensorProto.FLOAT
    idx = {k: numpy_helper.from_array(np.array(v, np.int64), k)
           for k, v in (("c12", [1, 2]), ("k0", [0]), ("k1", [1]))}
    m = _ml([helper.make_node("ArrayFeatureExtractor", ["x", "c12"], ["two"],
                              domain="ai.onnx.ml"),
             helper.make_node("Gather", ["two", "k0"], ["colour"], axis=1),
             helper.make_node("Gather", ["two", "k1"], ["size"], axis=1),
             helper.make_node("OneHotEncoder", ["colour"], ["h1"], domain="ai.onnx.ml",
                              cats_strings=["red", "blue"], zeros=0),
             helper.make_node("OneHotEncoder", ["size"], ["h2"], domain="ai.onnx.ml",
                              cats_strings=["S", "M", "L"], zeros=0),
             helper.make_node("Gather", ["codes", "k0"], ["code"], axis=1),
             helper.make_node("Cast", ["code"], ["code32"], to=TensorProto.INT32),
             helper.make_node("Cast", ["code32"], ["code64"], to=TensorProto.INT64),
             helper.make_node("OneHotEncoder", ["code64"], ["h3"], domain="ai.onnx.ml",
                              cats_int64s=[100, 200], zeros=0)],
            [helper.make_tensor_value_info("x", S, ["N", 3]),
             helper.make_tensor_value_info("codes", I64, ["N", 1])],
            [helper.make_tensor_value_info(n, F, None) for n in ("h1", "h2", "h3")],
            idx.values())
    feeds = make_feeds(onnx_lab.open(m, dims={"N": 12}))
    assert set(feeds["x"][:, 1]) <= {"red", "blue"} and set(feeds["x"][:, 2]) <= {"S", "M", "L"}
    assert set(feeds["codes"].ravel()) == {100, 200}
    assert onnx_lab.compare(m, m, dims={"N": 12}).passed  # onnxruntime takes them


def test_sentences_are_joined_by_the_tokenizers_separator():
    from ml_models import tfidf_model

    m = tfidf_model()
    tok = next(n for n in m.graph.node if n.op_type == "Tokenizer")
    next(a for a in tok.attribute if a.name == "separators").strings[:] = [b","]
    text = make_feeds(onnx_lab.open(m, dims={"N": 4}))["text"]
    assert all(len(t.split(",")) == 3 and " " not in t for t in text)
