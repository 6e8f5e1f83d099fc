"""Tree ensembles are fed values around their thresholds: scikit-learn's trees are trained on
data of any scale (ages, prices), and standard-normal feeds all took the same branches, so a
forest whose every threshold moved passed ``compare``."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.numerics import make_feeds


def _stump_forest(shift: float = 0.0) -> onnx.ModelProto:
    # 3 stumps on two features whose thresholds lie near 50 (an age) and 2000 (a price)
    thresholds = [45.0 + shift, 55.0 + shift, 2000.0 + shift]
    feats = [0, 0, 1]
    ids, nodes, fid, vals, modes, t_true, t_false = [], [], [], [], [], [], []
    tw_tree, tw_node, tw_w = [], [], []
    for t, (f, v) in enumerate(zip(feats, thresholds)):
        for n, mode in enumerate(("BRANCH_LEQ", "LEAF", "LEAF")):
            ids.append(t), nodes.append(n), fid.append(f if n == 0 else 0)
            vals.append(v if n == 0 else 0.0), modes.append(mode)
            t_true.append(1 if n == 0 else 0), t_false.append(2 if n == 0 else 0)
        tw_tree += [t, t]
        tw_node += [1, 2]
        tw_w += [float(t), float(t + 10)]
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", name="forest",
        n_targets=1, nodes_treeids=ids, nodes_nodeids=nodes, nodes_featureids=fid,
        nodes_values=vals, nodes_modes=modes, nodes_truenodeids=t_true,
        nodes_falsenodeids=t_false, target_treeids=tw_tree, target_nodeids=tw_node,
        target_ids=[0] * len(tw_w), target_weights=tw_w)
    g = helper.make_graph([node], "forest",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    return m


def test_feeds_cross_every_threshold():
    x = make_feeds(onnx_lab.open(_stump_forest(), dims={"N": 16}))["X"]
    assert x.dtype == np.float32 and x.shape == (16, 3)
    # feature 0 takes its three intervals: below 45, between 45 and 55, above 55
    assert (x[:, 0] < 45).any() and ((x[:, 0] > 45) & (x[:, 0] < 55)).any() \
        and (x[:, 0] > 55).any()
    assert (x[:, 1] < 2000).any() and (x[:, 1] > 2000).any()


def test_moved_thresholds_fail_compare():
    ref = onnx_lab.open(_stump_forest(), dims={"N": 16})
    assert onnx_lab.compare(ref, ref).passed
    c = onnx_lab.compare(ref, onnx_lab.open(_stump_forest(shift=3.0), dims={"N": 16}))
    assert not c.passed and c.first_divergence["node_id"] == "forest"


def test_a_leaf_few_rows_reach_is_judged_on_enough_samples():
    # the last leaf of a comb of 6 splits takes a row above all of them: each feature is
    # drawn on its own, and the one sample of 4 rows reached it in no run, so its weight
    # changed by 5 passed compare while onnxruntime gives the real row another value
    from ml_models import comb_tree

    from onnx_lab.runtime.feeds import branch_feeds, tree_samples

    row = np.array([[70.0, 6000.0, 2.0]], np.float32)
    truth = [ort_session(m).run(None, {"X": row})[0] for m in (comb_tree(),
                                                                comb_tree(leaf_delta=5.0))]
    assert truth[0][0, 0] == 10.0 and truth[1][0, 0] == 15.0
    ref = onnx_lab.open(comb_tree(), shapes={"X": [4, 3]})
    n = tree_samples(ref.model, ref.dims, ref.shapes)
    samples = branch_feeds(ref)
    assert n > 1 and len(samples) == n
    assert all(f["X"].shape == (4, 3) for f in samples)
    x = np.concatenate([f["X"] for f in samples])
    assert ((x[:, 0] > 60) & (x[:, 1] > 5000) & (x[:, 2] > 1.5)).any()
    assert onnx_lab.compare(ref, ref).passed
    c = onnx_lab.compare(ref, onnx_lab.open(comb_tree(leaf_delta=5.0), shapes={"X": [4, 3]}))
    assert not c.passed and c.first_divergence["node_id"] == "comb"
    # a model without trees keeps its one sample
    from ml_models import linear_zipmap

    lin = onnx_lab.open(linear_zipmap(), shapes={"X": [4, 3]})
    assert tree_samples(lin.model, lin.dims, lin.shapes) == 1 and len(branch_feeds(lin)) == 1


def ort_session(model: onnx.ModelProto):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _set_membership(first_set=(1.2, 3.7, 8.0, 9.0)) -> onnx.ModelProto:
    """ML opset 5's TreeEnsemble with set nodes (BRANCH_MEMBER): their split values are
    placeholders (232344, NaN), the sets are in membership_values (onnx's own case)."""
    from onnx import numpy_helper

    def t(name, values, dtype):
        return numpy_helper.from_array(np.asarray(values, dtype), name)

    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", name="trees",
        aggregate_function=1, leaf_targetids=[0, 1, 2, 3],
        leaf_weights=t("leaf_weights", [1, 10, 1000, 100], np.float32),
        membership_values=t("membership_values", [*first_set, np.nan, 12, 7, np.nan],
                            np.float32),
        n_targets=4, nodes_falseleafs=[1, 0, 1], nodes_falsenodeids=[2, 2, 3],
        nodes_featureids=[0, 0, 0], nodes_modes=t("nodes_modes", [0, 6, 6], np.uint8),
        nodes_splits=t("nodes_splits", [11, 232344, np.nan], np.float32),
        nodes_trueleafs=[0, 1, 1], nodes_truenodeids=[1, 0, 1], post_transform=0,
        tree_roots=[0])
    g = helper.make_graph([node], "members",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [6, 1])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [6, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 21),
                                            helper.make_operatorsetid("ai.onnx.ml", 5)])
    m.ir_version = 10
    return m


def test_set_members_are_fed_and_a_changed_member_fails_compare():
    x = make_feeds(onnx_lab.open(_set_membership()))["X"].ravel().tolist()
    members = {round(v, 3) for v in x}
    assert members & {1.2, 3.7, 8.0, 9.0} and members & {12.0, 7.0}
    assert 232344.0 not in members  # a placeholder split is no threshold
    ref = onnx_lab.open(_set_membership())
    assert onnx_lab.compare(ref, ref).passed
    c = onnx_lab.compare(ref, onnx_lab.open(_set_membership((1.7, 3.7, 8.0, 9.0))))
    assert not c.passed and c.first_divergence["node_id"] == "trees"


def test_text_thresholds_or_members_are_no_crash_of_make_feeds():
    # a malformed ensemble (thresholds or set members as a tensor of text) opens, and
    # make_feeds raised "could not convert string to float" instead of drawing its input
    from onnx import numpy_helper

    text = numpy_helper.from_array(np.array([b"a", b"b", b"c"], dtype=object), "v")
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", name="t", n_targets=1,
        nodes_falsenodeids=[2, 0, 0], nodes_truenodeids=[1, 0, 0], nodes_featureids=[0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_nodeids=[0, 1, 2],
        nodes_treeids=[0, 0, 0], nodes_values_as_tensor=text, target_ids=[0, 0],
        target_nodeids=[1, 2], target_treeids=[0, 0], target_weights=[1.0, 2.0])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                      [3, 2])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 3)])
    assert make_feeds(onnx_lab.open(m))["X"].shape == (3, 2)
    members = _set_membership()
    a = next(a for a in members.graph.node[0].attribute if a.name == "membership_values")
    a.t.CopyFrom(numpy_helper.from_array(np.array([b"x", b"y"], dtype=object),
                                         "membership_values"))
    assert make_feeds(onnx_lab.open(members))["X"].shape == (6, 1)


def _column_transformer_forest(shift: float = 0.0, *, scaler: str = "Scaler"
                               ) -> onnx.ModelProto:
    """A ColumnTransformer's layout in front of the stump forest: an age and a price column,
    each its own input, joined by a Concat (the age standardized first: skl2onnx's Scaler,
    or the Sub and Div other converters write), then a third column of something else. The
    forest's thresholds are in standardized units for the age (45 and 55 years are -0.5 and
    0.5 at mean 50, scale 10)."""
    from onnx import numpy_helper

    forest = _stump_forest(shift).graph.node[0]
    for a in forest.attribute:
        if a.name == "nodes_values":  # the age's thresholds in standardized units
            a.floats[:] = [(v - 50.0) / 10.0 if f == 0 and m != "LEAF" else v
                           for v, f, m in zip(a.floats, _attr(forest, "nodes_featureids"),
                                              _attr(forest, "nodes_modes"))]
    forest.input[0] = "joined"
    if scaler == "Scaler":
        std = [helper.make_node("Scaler", ["age"], ["age_std"], domain="ai.onnx.ml",
                                offset=[50.0], scale=[0.1])]
        inits = []
    else:
        std = [helper.make_node("Sub", ["age", "mean"], ["centred"]),
               helper.make_node("Div", ["centred", "std"], ["age_std"])]
        inits = [numpy_helper.from_array(np.array([50.0], np.float32), "mean"),
                 numpy_helper.from_array(np.array([10.0], np.float32), "std")]
    nodes = [*std, helper.make_node("Concat", ["age_std", "price"], ["numeric"], axis=1),
             helper.make_node("Concat", ["numeric", "other"], ["joined"], axis=-1), forest]
    g = helper.make_graph(
        nodes, "columns",
        [helper.make_tensor_value_info("age", TensorProto.FLOAT, ["N", 1]),
         helper.make_tensor_value_info("price", TensorProto.FLOAT, ["N", 1]),
         helper.make_tensor_value_info("other", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    return m


def _attr(node: onnx.NodeProto, name: str) -> list:
    return list(helper.get_attribute_value(next(a for a in node.attribute if a.name == name)))


@pytest.mark.parametrize("scaler", ["Scaler", "SubDiv"])
def test_trees_behind_a_scaler_and_a_concat_of_columns_are_fed_in_the_inputs_units(scaler):
    # a Pipeline(StandardScaler, forest) or a ColumnTransformer: the thresholds sit behind
    # the scaler and the Concat, and the inputs were standard normal (every age took the
    # same branch, so a forest whose thresholds all moved passed compare)
    feeds = make_feeds(onnx_lab.open(_column_transformer_forest(scaler=scaler),
                                     dims={"N": 16}))
    age, price = feeds["age"].ravel(), feeds["price"].ravel()
    assert (age < 45).any() and ((age > 45) & (age < 55)).any() and (age > 55).any()
    assert (price < 2000).any() and (price > 2000).any()
    assert np.abs(feeds["other"]).max() < 10  # no forest threshold reaches it: made up
    ref = onnx_lab.open(_column_transformer_forest(scaler=scaler), dims={"N": 16})
    assert onnx_lab.compare(ref, ref).passed
    moved = onnx_lab.open(_column_transformer_forest(3.0, scaler=scaler), dims={"N": 16})
    c = onnx_lab.compare(ref, moved)
    assert not c.passed and c.first_divergence["node_id"] == "forest"


def test_a_scikit_learn_column_transformer_forest_is_fed_across_its_thresholds():
    pd = pytest.importorskip("pandas")
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"age": rng.uniform(20, 80, 300).astype(np.float32),
                          "price": rng.uniform(1000, 9000, 300).astype(np.float32),
                          "city": rng.choice(["a", "b", "c"], 300)})
    y = (frame.age > 50).astype(np.float32) + frame.price / 1000
    columns = ColumnTransformer([("age", StandardScaler(), ["age"]),
                                 ("price", "passthrough", ["price"]),
                                 ("city", OneHotEncoder(), ["city"])])
    model = make_pipeline(columns, RandomForestRegressor(n_estimators=3, max_depth=3,
                                                         random_state=0)).fit(frame, y)
    onx = to_onnx(model, initial_types=[("age", FloatTensorType([None, 1])),
                                        ("price", FloatTensorType([None, 1])),
                                        ("city", StringTensorType([None, 1]))])
    feeds = make_feeds(onnx_lab.open(onx), shapes={"age": [32, 1], "price": [32, 1],
                                                   "city": [32, 1]})
    # the values span the data's range (standard-normal ages and prices took one branch)
    assert 20 < np.median(feeds["age"]) < 80 and 1000 < np.median(feeds["price"]) < 9000
    x = np.c_[feeds["age"], feeds["price"]]
    leaves = model[-1].apply(model[0].transform(pd.DataFrame(
        {"age": x[:, 0], "price": x[:, 1], "city": feeds["city"].ravel()})))
    assert all(len(set(leaves[:, t])) > 2 for t in range(leaves.shape[1]))


@pytest.mark.parametrize("one_input", [True, False])
def test_every_transformer_of_a_column_transformer_is_fed_in_the_inputs_units(one_input):
    # one matrix input: each transformer reaches the same Concat (only the first one reached
    # was followed); skl2onnx's MinMaxScaler casts its columns first, a Cast of an
    # intermediate whose dtype is inferred, not stored (it stopped the route)
    pd = pytest.importorskip("pandas")
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, StandardScaler
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(0)
    x = np.c_[rng.uniform(20, 80, 300), rng.uniform(1000, 9000, 300),
              rng.uniform(-5, 5, 300)].astype(np.float32)
    y = (x[:, 0] > 50) + x[:, 1] / 1000 + (x[:, 2] > 0)
    if one_input:
        columns = ColumnTransformer([("std", StandardScaler(), [0, 2]),
                                     ("mm", MinMaxScaler(), [1])])
        model = make_pipeline(columns, DecisionTreeRegressor(max_depth=4, random_state=0))
        model.fit(x, y)
        onx = to_onnx(model, x[:1])
        feeds = make_feeds(onnx_lab.open(onx), shapes={"X": [64, 3]})
        fed = feeds["X"]
    else:
        frame = pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2]})
        columns = ColumnTransformer([("mm", MinMaxScaler(), ["a", "b"]),
                                     ("std", StandardScaler(), ["c"])])
        model = make_pipeline(columns, DecisionTreeRegressor(max_depth=4, random_state=0))
        model.fit(frame, y)
        onx = to_onnx(model, initial_types=[(k, FloatTensorType([None, 1])) for k in "abc"])
        feeds = make_feeds(onnx_lab.open(onx), shapes={k: [64, 1] for k in "abc"})
        fed = np.c_[feeds["a"], feeds["b"], feeds["c"]]
        x = frame
    # each column in its own range (the price column had the age column's values, ~50)
    assert 20 < np.median(fed[:, 0]) < 80 and 1000 < np.median(fed[:, 1]) < 9000
    data = fed if one_input else pd.DataFrame({"a": fed[:, 0], "b": fed[:, 1],
                                               "c": fed[:, 2]})
    reached = set(model[-1].apply(model[0].transform(data)))
    assert len(reached) >= model[-1].get_n_leaves() // 2


def _leaves_reached(model, x) -> int:
    return min(len(set(model[-1].apply(model[0].transform(x))[:, t]))
               for t in range(len(model[-1].estimators_)))


def test_trees_behind_a_cast_of_joined_columns_are_fed_in_the_inputs_units():
    # skl2onnx's MinMaxScaler after a ColumnTransformer's Concat of float columns: a Cast
    # (float to float) of the Concat, whose type the file does not declare, then Mul and Add
    pd = pytest.importorskip("pandas")
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, OneHotEncoder

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"city": rng.choice(["a", "b", "c"], 400),
                          "age": rng.integers(18, 91, 400).astype(np.float32),
                          "price": rng.uniform(100, 100000, 400).astype(np.float32)})
    y = (frame.age > 50) * 10.0 + frame.price / 10000
    columns = ColumnTransformer([("city", OneHotEncoder(handle_unknown="ignore"), ["city"]),
                                 ("num", MinMaxScaler(), ["age", "price"])])
    model = make_pipeline(columns, RandomForestRegressor(n_estimators=3, max_depth=4,
                                                         random_state=0)).fit(frame, y)
    onx = to_onnx(model, frame[:1])
    assert "Cast" in [n.op_type for n in onx.graph.node]
    shapes = {"city": [64, 1], "age": [64, 1], "price": [64, 1]}
    feeds = make_feeds(onnx_lab.open(onx, shapes=shapes))
    assert 18 <= np.median(feeds["age"]) <= 90 and 100 <= np.median(feeds["price"]) <= 1e5
    x = pd.DataFrame({k: v.ravel() for k, v in feeds.items()})
    assert _leaves_reached(model, x) >= 6  # standard-normal ages and prices: 1 or 2


def test_trees_reading_an_integer_input_through_a_cast_are_fed_its_thresholds():
    # counts given as Int64TensorType: skl2onnx casts them to float before the forest, and
    # the feeds were integers in [0, 10) whatever the thresholds
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    rng = np.random.default_rng(0)
    x = np.c_[rng.integers(18, 91, 400), rng.poisson(40, 400)].astype(np.int64)
    y = (x[:, 0] > 50) * 10.0 + x[:, 1] / 10
    model = make_pipeline(FunctionTransformer(), RandomForestRegressor(
        n_estimators=3, max_depth=4, random_state=0)).fit(x, y)
    onx = to_onnx(model[-1], x[:1])
    assert [n.op_type for n in onx.graph.node][0] == "Cast"
    feeds = make_feeds(onnx_lab.open(onx, shapes={"X": [64, 2]}))["X"]
    assert feeds.dtype == np.int64 and 18 <= np.median(feeds[:, 0]) <= 90
    assert _leaves_reached(model, feeds) >= 6
    # both sides of the ages' split at 50.5 (values just beside it, 50.45 and 50.55, were
    # both truncated to 50)
    split = model[-1].estimators_[0].tree_.threshold[0]
    assert (feeds[:, 0] <= split).any() and (feeds[:, 0] > split).any()


def test_trees_behind_a_simple_imputer_are_fed_their_thresholds_and_the_missing_value():
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    x = np.c_[rng.integers(18, 91, 400), rng.uniform(100, 100000, 400)].astype(np.float32)
    y = (x[:, 0] > 50) * 10.0 + x[:, 1] / 10000
    x[rng.random(x.shape) < 0.1] = np.nan
    model = make_pipeline(SimpleImputer(), StandardScaler(), RandomForestRegressor(
        n_estimators=3, max_depth=4, random_state=0)).fit(x, y)
    onx = to_onnx(model, x[:1])
    feeds = make_feeds(onnx_lab.open(onx, shapes={"X": [64, 2]}))["X"]
    assert np.isnan(feeds).any()  # the Imputer's replacement still runs
    assert 18 <= np.nanmedian(feeds[:, 0]) <= 90 and 100 <= np.nanmedian(feeds[:, 1]) <= 1e5
    leaves = model[-1].apply(model[:-1].transform(feeds))
    assert min(len(set(leaves[:, t])) for t in range(3)) >= 6  # standard normal: 1 or 2
    # the root's threshold moved by about 5 years (its age or price split) fails compare
    moved = onnx.ModelProto()
    moved.CopyFrom(onx)
    node = next(n for n in moved.graph.node if n.op_type == "TreeEnsembleRegressor")
    next(a for a in node.attribute if a.name == "nodes_values").floats[0] += 0.25
    assert onnx_lab.compare(onx, onx, shapes={"X": [64, 2]}).passed
    assert not onnx_lab.compare(onx, moved, shapes={"X": [64, 2]}).passed


def test_an_add_of_a_zero_offset_before_a_tree_warns_nothing():
    # skl2onnx's MinMaxScaler is Mul then Add; a column whose minimum is 0 has an Add of 0:
    # make_feeds computed 1 / 0 for it (the Mul's inverse) and warned on every call
    inits = [onnx.numpy_helper.from_array(np.array([0.5, 0.001], np.float32), "k"),
             onnx.numpy_helper.from_array(np.array([0.0, -0.1], np.float32), "b")]
    tree = helper.make_node(
        "TreeEnsembleRegressor", ["scaled"], ["Y"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_values=[0.3, 0.0, 0.0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], target_treeids=[0, 0],
        target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[1.0, 2.0])
    g = helper.make_graph(
        [helper.make_node("Mul", ["X", "k"], ["m"]), helper.make_node("Add", ["m", "b"],
                                                                       ["scaled"]), tree],
        "minmax", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = make_feeds(onnx_lab.open(m, dims={"N": 16}))["X"]
    assert (x[:, 0] < 0.6).any() and (x[:, 0] > 0.6).any()  # 0.3 in the input's units
