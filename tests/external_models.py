"""Models with external data (onnx helpers, and a torch dynamo export when torch is there) and
the checks every written model must pass: it loads in a fresh onnxruntime session from its
own folder, gives the source's outputs, keeps small tensors inline, reads one data file of
its own beside it, and the source files are untouched."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

#: onnx's default ``size_threshold``: tensors under it must stay inline in every saved model.
ONNX_INLINE = 1024


def conv_norm_mean(folder: Path, *, threshold: int = 0) -> Path:
    """Conv -> BatchNormalization -> Relu -> ReduceMean(axes initializer) -> Reshape(shape
    initializer) -> MatMul, ``x`` [batch, 3, 16, 16], every tensor (the int64 axes and shape
    too, with ``threshold=0``) in ``m.onnx.data``: the layout that broke ReduceMean's shape
    inference once saved."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("W", rng.standard_normal((64, 3, 3, 3)).astype(f32)),   # 6912 bytes
        ("B", rng.standard_normal(64).astype(f32)),
        ("scale", (rng.random(64) + 0.5).astype(f32)),
        ("bias", rng.standard_normal(64).astype(f32)),
        ("mean", (rng.standard_normal(64) * 0.1).astype(f32)),
        ("var", (rng.random(64) + 0.5).astype(f32)),
        ("axes", np.array([2, 3], np.int64)),
        ("shape", np.array([1, -1], np.int64)),
        ("W2", rng.standard_normal((64, 32)).astype(f32)),        # 8192 bytes
    ]]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"],
                         name="bn"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("ReduceMean", ["r", "axes"], ["m"], keepdims=1, name="reduce"),
        helper.make_node("Reshape", ["m", "shape"], ["flat"], name="reshape"),
        helper.make_node("MatMul", ["flat", "W2"], ["y"], name="head"),
    ]
    graph = helper.make_graph(
        nodes, "conv_norm_mean",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, size_threshold=threshold,
              location="m.onnx.data")
    return path


def dynamo_export(folder: Path) -> Path | None:
    """``torch.onnx.export(dynamo=True)`` of a small conv+norm+mean model (model.onnx +
    model.onnx.data), or None when torch (or its exporter) is not there."""
    try:
        import torch
    except ImportError:
        return None

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 64, 3, padding=1)
            self.norm = torch.nn.BatchNorm2d(64)
            self.fc = torch.nn.Linear(64, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.norm(self.conv(x))).mean(dim=(2, 3)))

    torch.manual_seed(0)
    net = Net().eval()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    try:
        torch.onnx.export(net, (torch.randn(1, 3, 16, 16),), str(path), dynamo=True)
    except Exception:  # noqa: BLE001 - an exporter missing a dependency (onnxscript)
        return None
    if not path.with_name("model.onnx.data").is_file():
        return None
    return path


def feeds_for(path: Path) -> dict[str, np.ndarray]:
    """Seeded float feeds for the model at ``path`` (symbolic dims = 1)."""
    m = onnx.load(str(path), load_external_data=False)
    rng = np.random.default_rng(1)
    out = {}
    inits = {t.name for t in m.graph.initializer}
    for i in m.graph.input:
        if i.name in inits:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else 1
                 for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def fresh_run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs of a fresh onnxruntime session of the file at ``path`` (its external data
    resolved from its own folder), run from another working directory."""
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as elsewhere:
        os.chdir(elsewhere)
        try:
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            names = {i.name for i in sess.get_inputs()}
            return sess.run(None, {k: v for k, v in feeds.items() if k in names})
        finally:
            os.chdir(cwd)


def reference_run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs of the model at ``path`` with all its data read into memory first (a
    source whose small tensors are external does not load from its path)."""
    m = onnx.load(str(path))  # reads the external data
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})


def snapshot(path: Path) -> dict[Path, tuple[bytes, int]]:
    """Bytes and mtime (ns) of a model file and of its data files."""
    files = [path] + sorted(path.parent.glob(path.name + ".data*"))
    return {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in files}


def check_layout(path: Path, source: Path) -> list[str]:
    """Problems of the external-data layout of the saved model at ``path`` (empty: fine).

    Every location is a plain file name in ``path``'s folder, one data file per model named
    after it, never the source's data file and never a temporary folder; tensors under 1 KiB
    are inline."""
    problems = []
    m = onnx.load(str(path), load_external_data=False)
    source_data = {p.resolve() for p in source.parent.glob(source.name + ".data*")}
    locations = set()
    graphs = [m.graph]
    while graphs:
        g = graphs.pop()
        for t in g.initializer:
            if t.data_location != TensorProto.EXTERNAL:
                continue
            info = {e.key: e.value for e in t.external_data}
            loc = info.get("location", "")
            locations.add(loc)
            if int(info.get("length", 0)) < ONNX_INLINE:
                problems.append(f"{t.name}: {info.get('length')} bytes stored externally")
            if os.path.isabs(loc) or Path(loc).name != loc:
                problems.append(f"{t.name}: location {loc!r} is not a file beside the model")
            where = (path.parent / loc).resolve()
            if where in source_data:
                problems.append(f"{t.name}: reads the source's data file {loc!r}")
            if where.parent != path.parent.resolve():  # a tool's temporary folder...
                problems.append(f"{t.name}: reads {where}, outside the model's folder")
            if not where.is_file() or where.is_symlink():
                problems.append(f"{t.name}: {loc!r} is not a regular file beside the model")
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graphs.append(a.g)
                graphs.extend(a.graphs)
    if len(locations) > 1:
        problems.append(f"several data files {sorted(locations)}")
    if locations and locations != {f"{path.name}.data"}:
        problems.append(f"data file {sorted(locations)} is not named after {path.name}")
    return problems


def assert_written_model_is_sound(path: Path, source: Path,
                                  reference: list[np.ndarray], feeds: dict[str, np.ndarray],
                                  atol: float = 1e-4, rtol: float = 1e-3) -> None:
    """The saved model loads in a fresh session, gives ``reference``, and is laid out by the
    rule."""
    assert check_layout(path, source) == []
    got = fresh_run(path, feeds)
    assert len(got) == len(reference)
    for g, r in zip(got, reference, strict=True):
        np.testing.assert_allclose(g, r, atol=atol, rtol=rtol)


def external_sources(root: Path) -> dict[str, Path]:
    """The models with external data the writer and tool tests run on: ``helpers`` (built
    with onnx helpers, every tensor external) and, when torch is installed, ``dynamo`` (a
    torch.onnx dynamo export)."""
    out = {"helpers": conv_norm_mean(root / "helpers")}
    exported = dynamo_export(root / "dynamo")
    if exported is not None:
        out["dynamo"] = exported
    return out
