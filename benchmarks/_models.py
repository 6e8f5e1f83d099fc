"""Realistic benchmark models, exported once and cached in ``benchmarks/_models/`` (gitignored).

Every builder returns the path of an ``.onnx`` file. A model is built only when its file (whose
name carries a version tag) is missing; a lock file keeps several processes from exporting the
same model at once, and the ``.onnx`` file is renamed into place last, so its existence means the
model (and its external data) is complete.

- ``resnet50()``: ResNet-50 written in plain torch (no torchvision), input ``x`` [1,3,224,224],
  opset 17, TorchScript exporter, ~100 MB embedded weights.
- ``bert_base()``: a BERT-base encoder (12 layers, hidden 768, 12 heads, FFN 3072, GELU,
  LayerNorm), int64 inputs ``input_ids``/``token_type_ids``/``attention_mask`` with dynamic
  ``batch`` and ``sequence``, opset 14 (LayerNorm decomposed), ~435 MB embedded weights.
- ``gpt2(layers=24)``: a GPT-2-style decoder (n_embd 384, 6 heads, vocab 50257, tied LM head),
  input ``input_ids`` [batch, sequence], opset 14.
- ``resnet50_bn()``: the same ResNet-50 exported without the exporter's constant folding
  (BatchNormalization, Constant and Identity nodes kept).
- ``ssd_lite()``: an SSDlite-style detector written in plain torch (MobileNet-like backbone,
  six box/class heads, softmax, anchor decoding), input ``image`` [1,3,320,320], opset 17.
- ``bert_transformers()``: BERT-base from ``transformers`` with random weights (needs
  transformers), opset 17, dynamic ``batch`` and ``sequence``.
- ``gpt2_dynamo(layers=24)``: transformers' ``GPT2LMHeadModel`` from a ``GPT2Config`` (n_embd
  256, 4 heads, random weights), torch.onnx with ``dynamo=True`` (its default optimization), dynamic
  ``batch``/``sequence``, weights in ``<name>.onnx.data`` beside it (~1,500 nodes).
- ``llama_dynamo(layers=32)``: transformers' ``LlamaForCausalLM`` from a ``LlamaConfig`` (hidden
  64, 4 heads, 2 KV heads: the file stays small, the node count is a real 32-layer export's),
  ``dynamo=True, optimize=False``, ``input_ids`` [1, 8], external data: ~6,000 nodes (96 layers:
  ~17,800).
- ``big_external(gb=3)``: ``gb * 8`` blocks of MatMul(4096x4096) -> Relu -> MatMul(4096x4096) ->
  Add (residual), numpy weights stored as external data in one ``.data`` file, written tensor by
  tensor so building it never holds more than one weight in memory. No torch needed.

Torch is imported inside the builders; without it they raise ``SystemExit`` with a clear
message (tests should call ``pytest.importorskip("torch")`` first). Run as a script to build all
models and print their node counts and sizes::

    .venv/bin/python benchmarks/_models.py            # all
    .venv/bin/python benchmarks/_models.py bert_base  # one
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import warnings
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent / "_models"
VERSION = "v1"  # bump when a builder changes so stale cached files are not reused

__all__ = ["MODELS_DIR", "resnet50", "resnet50_bn", "bert_base", "gpt2", "big_external",
           "ssd_lite",
           "bert_transformers", "gpt2_dynamo", "llama_dynamo", "node_count"]


# --------------------------------------------------------------------------- helpers
@contextlib.contextmanager
def _build_lock(name: str):
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    with open(MODELS_DIR / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _torch():
    try:
        import torch
    except ImportError as e:  # torch is a benchmark-only dependency
        raise SystemExit(
            "benchmarks/_models.py needs torch to export this model: "
            "pip install torch --index-url https://download.pytorch.org/whl/cpu"
        ) from e
    return torch


def _export(module, args, path: Path, *, opset: int, input_names, output_names,
            dynamic_axes=None, fold: bool = True) -> Path:
    """Export with the TorchScript exporter into a temp file, then rename into place."""
    torch = _torch()
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    module.eval()
    # The TorchScript exporter warns that it is deprecated; builders print nothing.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, args, str(tmp), opset_version=opset, input_names=list(input_names),
            output_names=list(output_names), dynamic_axes=dynamic_axes, do_constant_folding=fold,
            dynamo=False,
        )
    os.replace(tmp, path)
    return path


def node_count(path: str | os.PathLike) -> int:
    """Number of nodes in the main graph of ``path`` (external data is not read)."""
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


# --------------------------------------------------------------------------- ResNet-50
def _resnet50_module():
    torch = _torch()
    nn = torch.nn

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    class ResNet50(nn.Module):
        def __init__(self, num_classes: int = 1000) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers, cin = [], 64
            for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                stage = []
                for i in range(blocks):
                    stage.append(Bottleneck(cin, width, stride if i == 0 else 1))
                    cin = width * 4
                layers.append(nn.Sequential(*stage))
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2048, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    model = ResNet50()
    # Non-trivial BatchNorm statistics so Conv+BN folding changes numbers visibly.
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model


def resnet50() -> Path:
    """ResNet-50 (input ``x`` float32 [1,3,224,224], output ``logits`` [1,1000]), opset 17.

    Example:
        >>> lab = onnx_lab.open(resnet50())
    """
    return _resnet50_file("resnet50", fold=True)


def resnet50_bn() -> Path:
    """The ResNet-50 of :func:`resnet50` exported without the exporter's constant folding:
    its BatchNormalization nodes (and the Constant/Identity nodes of the export) are kept, as
    an optimizer finds them in a model exported that way.

    Example:
        >>> lab = onnx_lab.open(resnet50_bn())
    """
    return _resnet50_file("resnet50_bn", fold=False)


def _resnet50_file(name: str, *, fold: bool) -> Path:
    path = MODELS_DIR / f"{name}_{VERSION}.onnx"
    if path.exists():
        return path
    with _build_lock(name):
        if path.exists():
            return path
        torch = _torch()
        torch.manual_seed(0)
        model = _resnet50_module()
        x = torch.randn(1, 3, 224, 224)
        return _export(model, (x,), path, opset=17, input_names=["x"],
                       output_names=["logits"], fold=fold)


# --------------------------------------------------------------------------- BERT-base
def _bert_module(layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                 vocab: int = 30522, max_pos: int = 512):
    torch = _torch()
    nn = torch.nn

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)
            self.dense = nn.Linear(hidden, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def split(self, x):
            b, s, _ = x.shape
            return x.view(b, s, heads, hidden // heads).transpose(1, 2)

        def forward(self, x, mask):
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / (hidden // heads) ** 0.5
            probs = torch.softmax(scores + mask, dim=-1)
            ctx = torch.matmul(probs, v).transpose(1, 2)
            ctx = ctx.reshape(ctx.shape[0], ctx.shape[1], hidden)
            return self.norm(self.dense(ctx) + x)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = SelfAttention()
            self.intermediate = nn.Linear(hidden, ffn)
            self.act = nn.GELU()
            self.output = nn.Linear(ffn, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x, mask):
            x = self.attention(x, mask)
            return self.norm(self.output(self.act(self.intermediate(x))) + x)

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word_embeddings = nn.Embedding(vocab, hidden)
            self.position_embeddings = nn.Embedding(max_pos, hidden)
            self.token_type_embeddings = nn.Embedding(2, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)
            self.layer = nn.ModuleList(Layer() for _ in range(layers))
            self.pooler = nn.Linear(hidden, hidden)

        def forward(self, input_ids, token_type_ids, attention_mask):
            seq = input_ids.shape[1]
            pos = torch.arange(seq, dtype=torch.int64).unsqueeze(0)
            x = (self.word_embeddings(input_ids) + self.position_embeddings(pos)
                 + self.token_type_embeddings(token_type_ids))
            x = self.norm(x)
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in self.layer:
                x = layer(x, mask)
            pooled = torch.tanh(self.pooler(x[:, 0]))
            return x, pooled

    return Bert()


def bert_base() -> Path:
    """BERT-base encoder, opset 14, embedded weights (~435 MB), dynamic batch and sequence.

    Inputs: ``input_ids``, ``token_type_ids``, ``attention_mask`` (int64 [batch, sequence]);
    outputs: ``last_hidden_state`` [batch, sequence, 768], ``pooler_output`` [batch, 768].

    Example:
        >>> lab = onnx_lab.open(bert_base(), dims={"batch": 1, "sequence": 128})
    """
    path = MODELS_DIR / f"bert_base_{VERSION}.onnx"
    if path.exists():
        return path
    with _build_lock("bert_base"):
        if path.exists():
            return path
        torch = _torch()
        torch.manual_seed(0)
        model = _bert_module()
        ids = torch.randint(0, 30522, (2, 16), dtype=torch.int64)
        tt = torch.zeros(2, 16, dtype=torch.int64)
        am = torch.ones(2, 16, dtype=torch.int64)
        axes = {0: "batch", 1: "sequence"}
        return _export(
            model, (ids, tt, am), path, opset=14,
            input_names=["input_ids", "token_type_ids", "attention_mask"],
            output_names=["last_hidden_state", "pooler_output"],
            dynamic_axes={"input_ids": axes, "token_type_ids": axes, "attention_mask": axes,
                          "last_hidden_state": axes, "pooler_output": {0: "batch"}},
        )


# --------------------------------------------------------------------------- GPT-2
def _gpt2_module(layers: int, n_embd: int = 384, n_head: int = 6, vocab: int = 50257,
                 n_ctx: int = 1024):
    torch = _torch()
    nn = torch.nn
    hd = n_embd // n_head

    class Block(nn.Module):
        # Heads are split with Einsum on [embd, head, head_dim] weights instead of view():
        # a traced view with dynamic batch/sequence adds ~10 Shape/Gather/Unsqueeze/Concat
        # nodes per use and would triple the graph (2,700 nodes instead of ~1,200).
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.w_q = nn.Parameter(torch.randn(n_embd, n_head, hd) * 0.02)
            self.w_k = nn.Parameter(torch.randn(n_embd, n_head, hd) * 0.02)
            self.w_v = nn.Parameter(torch.randn(n_embd, n_head, hd) * 0.02)
            self.b_q = nn.Parameter(torch.randn(n_head, 1, hd) * 0.02)
            self.b_k = nn.Parameter(torch.randn(n_head, 1, hd) * 0.02)
            self.b_v = nn.Parameter(torch.randn(n_head, 1, hd) * 0.02)
            self.w_o = nn.Parameter(torch.randn(n_head, hd, n_embd) * 0.02)
            self.b_o = nn.Parameter(torch.zeros(n_embd))
            self.ln_2 = nn.LayerNorm(n_embd)
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.act = nn.GELU()
            self.mlp_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x, mask):
            h = self.ln_1(x)
            q = torch.einsum("bsc,chd->bhsd", h, self.w_q) + self.b_q
            k = torch.einsum("bsc,chd->bhsd", h, self.w_k) + self.b_k
            v = torch.einsum("bsc,chd->bhsd", h, self.w_v) + self.b_v
            att = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / hd ** 0.5)
            y = torch.matmul(torch.softmax(att + mask, dim=-1), v)
            x = x + torch.einsum("bhsd,hdc->bsc", y, self.w_o) + self.b_o
            return x + self.mlp_proj(self.act(self.c_fc(self.ln_2(x))))

    class GPT2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(n_ctx, n_embd)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(n_embd)
            causal = torch.triu(torch.full((n_ctx, n_ctx), -1e4), diagonal=1)
            self.register_buffer("causal", causal, persistent=False)

        def forward(self, input_ids):
            s = input_ids.shape[1]
            pos = torch.arange(s, dtype=torch.int64).unsqueeze(0)
            x = self.wte(input_ids) + self.wpe(pos)
            mask = self.causal[:s, :s]  # additive causal mask, computed once for all blocks
            for block in self.h:
                x = block(x, mask)
            return torch.matmul(self.ln_f(x), self.wte.weight.t())

    return GPT2()


def gpt2(layers: int = 24) -> Path:
    """GPT-2-style decoder (n_embd 384, 6 heads, vocab 50257), opset 14, embedded weights.

    Input ``input_ids`` int64 [batch, sequence]; output ``logits`` [batch, sequence, 50257].

    Example:
        >>> lab = onnx_lab.open(gpt2(), dims={"batch": 1, "sequence": 64})
    """
    path = MODELS_DIR / f"gpt2_{layers}l_{VERSION}.onnx"
    if path.exists():
        return path
    with _build_lock(f"gpt2_{layers}"):
        if path.exists():
            return path
        torch = _torch()
        torch.manual_seed(0)
        model = _gpt2_module(layers)
        ids = torch.randint(0, 50257, (1, 16), dtype=torch.int64)
        axes = {0: "batch", 1: "sequence"}
        return _export(model, (ids,), path, opset=14, input_names=["input_ids"],
                       output_names=["logits"],
                       dynamic_axes={"input_ids": axes, "logits": axes})


# --------------------------------------------------------------------------- big external
def big_external(gb: int = 3) -> Path:
    """A ``gb``-GB MLP of 4096x4096 fp32 MatMuls with all weights in one external data file.

    ``gb * 8`` blocks (``gb=3``: 24 blocks, 48 MatMuls, 3 GiB) of
    ``x -> MatMul(W_a) -> Relu -> MatMul(W_b) -> Add(x)``; input ``x`` float32 [batch, 4096].
    Weights are N(0, 0.01) from a fixed seed, written one tensor at a time.

    Example:
        >>> lab = onnx_lab.open(big_external())
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    path = MODELS_DIR / f"big_external_{gb}gb_{VERSION}.onnx"
    if path.exists():
        return path
    with _build_lock(f"big_external_{gb}"):
        if path.exists():
            return path
        n, blocks = 4096, gb * 8
        data_name = path.name + ".data"
        rng = np.random.default_rng(0)
        inits, nodes, offset, x = [], [], 0, "x"
        with open(MODELS_DIR / data_name, "wb") as f:
            for i in range(blocks):
                for part in ("a", "b"):
                    w = (rng.standard_normal((n, n), dtype=np.float32) * 0.01)
                    raw = w.tobytes()
                    f.write(raw)
                    tensor = TensorProto(name=f"blocks.{i}.w_{part}", data_type=TensorProto.FLOAT,
                                         dims=[n, n])
                    # Set the reference by hand: onnx's set_external_data wants raw_data
                    # in the proto, which is what we avoid holding.
                    tensor.data_location = TensorProto.EXTERNAL
                    for key, value in (("location", data_name), ("offset", str(offset)),
                                       ("length", str(len(raw)))):
                        tensor.external_data.add(key=key, value=value)
                    inits.append(tensor)
                    offset += len(raw)
                    del w, raw
                h, r, o = f"blocks.{i}.h", f"blocks.{i}.relu", f"blocks.{i}.out"
                nodes += [
                    helper.make_node("MatMul", [x, f"blocks.{i}.w_a"], [h], name=f"/blocks.{i}/MatMul_a"),
                    helper.make_node("Relu", [h], [r], name=f"/blocks.{i}/Relu"),
                    helper.make_node("MatMul", [r, f"blocks.{i}.w_b"], [f"blocks.{i}.mm"],
                                     name=f"/blocks.{i}/MatMul_b"),
                    helper.make_node("Add", [f"blocks.{i}.mm", x], [o], name=f"/blocks.{i}/Add"),
                ]
                x = o
        nodes.append(helper.make_node("Identity", [x], ["y"], name="/output/Identity"))
        graph = helper.make_graph(
            nodes, f"big_external_{gb}gb",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])],
            initializer=inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  producer_name="onnx_lab.benchmarks")
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        onnx.save_model(model, str(tmp))  # tensors are already external: only the graph
        os.replace(tmp, path)
        return path


# --------------------------------------------------------------------------- SSD-style detector
def _ssd_module(num_classes: int = 21):
    """An SSDlite-style detector by hand (torchvision's own does not import with this CPU
    torch build): a MobileNet-like backbone (Conv-BN-ReLU6, depthwise separable blocks),
    extra layers down to 1x1, a box and a class head (depthwise + pointwise) on six feature
    maps, each permuted to NHWC and reshaped, concatenated, class scores through Softmax and
    boxes decoded against fixed anchors (Exp, Mul, Add)."""
    torch = _torch()
    nn = torch.nn

    def cbr(cin, cout, k=3, s=1, groups=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU6())

    def sep(cin, cout, s=1):
        return nn.Sequential(cbr(cin, cin, 3, s, groups=cin), cbr(cin, cout, 1))

    class Head(nn.Module):
        def __init__(self, cin, out):
            super().__init__()
            self.dw = cbr(cin, cin, 3, 1, groups=cin)
            self.pw = nn.Conv2d(cin, out, 1)

        def forward(self, x):
            return self.pw(self.dw(x))

    class SSDLite(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = cbr(3, 32, 3, 2)
            self.stage1 = nn.Sequential(sep(32, 64), sep(64, 128, 2), sep(128, 128))
            self.stage2 = nn.Sequential(sep(128, 256, 2), sep(256, 256))          # 40x40
            self.stage3 = nn.Sequential(sep(256, 512, 2), *[sep(512, 512) for _ in range(4)])
            self.stage4 = nn.Sequential(sep(512, 1024, 2), sep(1024, 1024))       # 10x10
            self.extras = nn.ModuleList([
                nn.Sequential(cbr(1024, 256, 1), sep(256, 512, 2)),                # 5x5
                nn.Sequential(cbr(512, 128, 1), sep(128, 256, 2)),                 # 3x3
                nn.Sequential(cbr(256, 128, 1), sep(128, 256, 2)),                 # 2x2
                nn.Sequential(cbr(256, 64, 1), sep(64, 128, 2))])                  # 1x1
            chans = [512, 1024, 512, 256, 256, 128]
            self.anchors_per = 6
            self.loc = nn.ModuleList([Head(c, self.anchors_per * 4) for c in chans])
            self.conf = nn.ModuleList([Head(c, self.anchors_per * num_classes) for c in chans])
            self.num_classes = num_classes

        def forward(self, x):
            x = self.stage2(self.stage1(self.stem(x)))
            f1 = self.stage3(x)
            f2 = self.stage4(f1)
            feats = [f1, f2]
            y = f2
            for extra in self.extras:
                y = extra(y)
                feats.append(y)
            locs, confs = [], []
            for f, loc, conf in zip(feats, self.loc, self.conf):
                locs.append(loc(f).permute(0, 2, 3, 1).reshape(f.shape[0], -1, 4))
                confs.append(conf(f).permute(0, 2, 3, 1).reshape(f.shape[0], -1,
                                                                 self.num_classes))
            loc = torch.cat(locs, 1)
            scores = torch.softmax(torch.cat(confs, 1), -1)
            return loc, scores

    class Decoded(nn.Module):
        def __init__(self, net, anchors):
            super().__init__()
            self.net = net
            self.register_buffer("anchors", anchors)

        def forward(self, x):
            loc, scores = self.net(x)
            a = self.anchors
            xy = a[:, :2] + loc[..., :2] * 0.1 * a[:, 2:]
            wh = a[:, 2:] * torch.exp(loc[..., 2:] * 0.2)
            return torch.cat([xy - wh / 2, xy + wh / 2], -1), scores

    net = SSDLite()
    sizes = [20, 10, 5, 3, 2, 1]
    anchors = []
    for k, n in enumerate(sizes):
        for i in range(n):
            for j in range(n):
                for r in range(net.anchors_per):
                    s = 0.1 + 0.15 * k
                    anchors.append([(j + 0.5) / n, (i + 0.5) / n, s * (1 + 0.1 * r),
                                    s / (1 + 0.1 * r)])
    g = torch.Generator().manual_seed(2)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
    return Decoded(net, torch.tensor(anchors, dtype=torch.float32))


def ssd_lite() -> Path:
    """The SSD-style detector of :func:`_ssd_module` (input ``image`` float32 [1,3,320,320],
    outputs ``boxes`` [1,A,4] and ``scores`` [1,A,21]), opset 17, TorchScript exporter without
    its constant folding (BatchNormalization, Constant and Identity nodes kept: 516 nodes).

    Example:
        >>> lab = onnx_lab.open(ssd_lite())
    """
    path = MODELS_DIR / f"ssd_lite_{VERSION}.onnx"
    if path.exists():
        return path
    with _build_lock("ssd_lite"):
        if path.exists():
            return path
        torch = _torch()
        torch.manual_seed(0)
        model = _ssd_module()
        x = torch.randn(1, 3, 320, 320)
        return _export(model, (x,), path, opset=17, input_names=["image"],
                       output_names=["boxes", "scores"], fold=False)


# --------------------------------------------------------------------------- BERT (transformers)
def bert_transformers() -> Path:
    """BERT-base from ``transformers`` (``BertModel(BertConfig())``, random weights, eager
    attention), inputs ``input_ids``/``attention_mask``/``token_type_ids`` int64 [batch,
    sequence], outputs ``last_hidden_state`` and ``pooler_output``, opset 17, TorchScript
    exporter. SystemExit when transformers is not installed.

    Example:
        >>> lab = onnx_lab.open(bert_transformers(), dims={"batch": 1, "sequence": 128})
    """
    path = MODELS_DIR / f"bert_transformers_{VERSION}.onnx"
    if path.exists():
        return path
    with _build_lock("bert_transformers"):
        if path.exists():
            return path
        torch = _torch()
        try:
            import transformers
        except ImportError as e:
            raise SystemExit("bert_transformers needs transformers: pip install "
                             "transformers") from e
        torch.manual_seed(0)
        config = transformers.BertConfig(attn_implementation="eager")
        bert = transformers.BertModel(config).eval()

        class ByKeyword(torch.nn.Module):  # forward's positional order differs by version
            def __init__(self) -> None:
                super().__init__()
                self.bert = bert

            def forward(self, input_ids, attention_mask, token_type_ids):
                out = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids, return_dict=True)
                return out.last_hidden_state, out.pooler_output

        model = ByKeyword()
        ids = torch.randint(0, config.vocab_size, (1, 16))
        mask = torch.ones(1, 16, dtype=torch.int64)
        types = torch.zeros(1, 16, dtype=torch.int64)
        dyn = {n: {0: "batch", 1: "sequence"} for n in ("input_ids", "attention_mask",
                                                       "token_type_ids")}
        return _export(model, (ids, mask, types), path, opset=17,
                       input_names=["input_ids", "attention_mask", "token_type_ids"],
                       output_names=["last_hidden_state", "pooler_output"], dynamic_axes=dyn)


# --------------------------------------------------------------------------- dynamo exports
def _dynamo_export(module, ids, path: Path, *, dynamic: bool, optimize: bool) -> Path:
    """torch.onnx.export(dynamo=True) with external data, into a temp folder (the ``.data`` file
    keeps the final name the ``.onnx`` file refers to), then moved into place, ``.onnx`` last."""
    import logging
    import shutil

    torch = _torch()
    tmp = path.with_name(f".tmp{os.getpid()}_{path.stem}")
    tmp.mkdir(parents=True, exist_ok=True)
    logging.getLogger("torch").setLevel(logging.ERROR)
    dims = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence")},)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module.eval(), (ids,), dynamo=True, optimize=optimize,
                                    input_names=["input_ids"], output_names=["logits"],
                                    dynamic_shapes=dims if dynamic else None, verbose=False)
    program.save(str(tmp / path.name), external_data=True)
    os.replace(tmp / (path.name + ".data"), path.with_name(path.name + ".data"))
    os.replace(tmp / path.name, path)
    shutil.rmtree(tmp, ignore_errors=True)
    return path


def _transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models are built from a config, never fetched
    try:
        import transformers
    except ImportError as e:
        raise SystemExit("this model needs transformers: pip install transformers") from e
    return transformers


def _logits_only(lm):
    """Wrap a transformers causal LM so its export has one input and one output (no cache)."""
    torch = _torch()

    class LogitsOnly(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, input_ids):
            return self.lm(input_ids=input_ids, use_cache=False, return_dict=True).logits

    return LogitsOnly()


def gpt2_dynamo(layers: int = 24) -> Path:
    """transformers' GPT-2 (``layers`` blocks, n_embd 256, 4 heads, vocab 50257, random
    weights) exported with ``torch.onnx.export(dynamo=True)``: input ``input_ids`` int64
    [batch, sequence], output ``logits``, weights in ``gpt2_dynamo_24l_v1.onnx.data``.

    Example:
        >>> lab = onnx_lab.open(gpt2_dynamo(), dims={"batch": 1, "sequence": 16})
    """
    path = MODELS_DIR / f"gpt2_dynamo_{layers}l_{VERSION}.onnx"
    if path.exists():
        return path
    with _build_lock(f"gpt2_dynamo_{layers}"):
        if path.exists():
            return path
        torch, transformers = _torch(), _transformers()
        torch.manual_seed(0)
        config = transformers.GPT2Config(n_layer=layers, n_embd=256, n_head=4, vocab_size=50257)
        lm = transformers.GPT2LMHeadModel(config)
        # batch 2: an example dim of 1 would be specialized to a constant by torch.export
        ids = torch.randint(0, 50257, (2, 8), dtype=torch.int64)
        return _dynamo_export(_logits_only(lm), ids, path, dynamic=True, optimize=True)


def llama_dynamo(layers: int = 32) -> Path:
    """A Llama-style decoder (transformers' ``LlamaForCausalLM``: RMSNorm, rotary embedding,
    grouped-query attention, SwiGLU; hidden 64, 4 heads, 2 KV heads, vocab 32000, random
    weights) exported with ``dynamo=True, optimize=False`` (every aten op's nodes kept, as a
    large export looks before onnxscript's optimizer), input ``input_ids`` int64 [1, 8],
    external data. 32 layers: ~6,000 nodes; 96: ~17,800.

    Example:
        >>> lab = onnx_lab.open(llama_dynamo(32))
    """
    path = MODELS_DIR / f"llama_dynamo_{layers}l_{VERSION}.onnx"
    if path.exists():
        return path
    with _build_lock(f"llama_dynamo_{layers}"):
        if path.exists():
            return path
        torch, transformers = _torch(), _transformers()
        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            num_hidden_layers=layers, hidden_size=64, intermediate_size=172,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=32000,
            max_position_embeddings=2048)
        lm = transformers.LlamaForCausalLM(config)
        ids = torch.randint(0, 32000, (1, 8), dtype=torch.int64)
        return _dynamo_export(_logits_only(lm), ids, path, dynamic=False, optimize=False)


_BUILDERS = {"resnet50": resnet50, "bert_base": bert_base, "gpt2": gpt2,
             "big_external": big_external, "ssd_lite": ssd_lite, "resnet50_bn": resnet50_bn,
             "bert_transformers": bert_transformers, "gpt2_dynamo": gpt2_dynamo,
             "llama_dynamo": llama_dynamo, "llama_dynamo_96": lambda: llama_dynamo(96)}


def main(argv: list[str] | None = None) -> None:
    import sys
    import time

    names = (argv if argv is not None else sys.argv[1:]) or list(_BUILDERS)
    for name in names:
        t0 = time.perf_counter()
        path = _BUILDERS[name]()
        size = path.stat().st_size
        data = path.with_name(path.name + ".data")
        if data.exists():
            size += data.stat().st_size
        print(f"{name:14s} {path.name:32s} nodes={node_count(path):5d} "
              f"size={size / 1e6:8.1f} MB  ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
