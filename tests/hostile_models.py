"""Hostile models: every string field of an ONNX file carries markup, script or odd text.

A model file is attacker-controlled. These builders put the payloads below into node, tensor,
graph, input and output names, doc strings, producer name and version, the model's and every
node's metadata_props (the keys the source mapping reads: ``onnx_lab.sources``,
``pkg.torch.onnx.stack_trace``, ``namespace``, ``pkg.torch.onnx.class_hierarchy``,
``pkg.torch.onnx.name_scopes``) and attribute strings; :func:`exotic` also into op types,
domains and symbolic dims (onnxruntime cannot run it; it still opens, draws and reports).

Each script payload would set ``window.__pwned`` or call ``alert``: a page that shows these
models must never do either, and must show the text as text (:data:`READABLE`).

Example:
    >>> from hostile_models import hostile, PAYLOADS
    >>> model = hostile()          # runs in onnxruntime (Conv, BatchNormalization, Relu, Add)
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Each one is a different way out of a context: HTML text, a quoted attribute (both quotes), a
# script element, a URL, a template engine, a DOT string, a JS string, matplotlib mathtext.
PAYLOADS = [
    "<img src=x onerror=alert(1)>",
    "</script><script>window.__pwned='script'</script>",
    "\"><svg onload=alert(2)>",
    "'><img src=x onerror=window.__pwned='attr1'>",
    "javascript:window.__pwned='url'",
    "{{constructor.constructor('window.__pwned=1')()}}",
    "${window.__pwned='tpl'}",
    "back\\slash \\\" \\n \"quote\" 'single' `tick`",
    "new\nline\ttab\rcr",
    "ctrl\x01\x02\x1b\x7fend",
    "rtl\u202eevil\u200f\u200bmark",
    "<b data-pwn=1>bold</b>&amp;&lt;i&gt;",
    # TeX, which JupyterLab's MathJax typesets in HTML outputs: \\href made a link
    "$\\alpha$ cost $x^$ and $\\frac{}$ $\\href{https://example.invalid/tex}{Conv}$",
    "<!--<style>*{display:none}</style>-->]]>",
    "L" * 3000 + "<img src=x onerror=alert(3)>",
    # The JupyterLab attack: write a file through the server's REST API.
    "<img src=x onerror=\"fetch('/api/contents/PWNED.txt',{method:'PUT',headers:{'Content-"
    "Type':'application/json','X-XSRFToken':(document.cookie.match(/_xsrf=([^;]+)/)||[])[1]},"
    "body:JSON.stringify({type:'file',format:'text',content:'pwned'})})\">",
]

# Text a page must show as it is (the escaped markup appears in the page's textContent).
READABLE = ["<img src=x onerror=alert(1)>", "\"><svg onload=alert(2)>"]

# What the second wall let through (its own link, no handler): SVG animations that set an
# href to a javascript: URL (a click ran it), a form (its button navigated the page away) and
# styles that load without url( (image-set takes a plain string; a CSS escape spells url).
SECOND_WALL = {
    "animate": '<svg width="200" height="40"><a><animate attributeName="href" values="javascript:'
               'window.__pwned=1" begin="0s" fill="freeze"/><text id="t" x="5" y="20">click'
               '</text></a></svg>',
    "set": '<svg width="200" height="40"><a><set attributeName="href" to="javascript:window.'
           '__pwned=2"/><text id="t" x="5" y="20">click</text></a></svg>',
    "form": '<form><button id="t">click</button></form>',
    "image-set": '<div id="t" style="background-image:image-set(\'http://x.test/a.png\' 1x)">'
                 'click</div>',
    "css escape": '<div id="t" style="background:\\75 rl(http://x.test/b.png)">click</div>',
}

NODE_NAMES = [f"{p}#node{i}" for i, p in enumerate(PAYLOADS[:3] + PAYLOADS[-1:])]


def _name(i: int, what: str) -> str:
    return f"{PAYLOADS[i % len(PAYLOADS)]}#{what}"


def _meta(node: onnx.NodeProto, i: int) -> None:
    p = PAYLOADS[i % len(PAYLOADS)]
    q = PAYLOADS[(i + 1) % len(PAYLOADS)]
    sources = [{"path": [p, q], "classes": [q, p], "levels": [p, q], "root_class": p,
                "file": f"/{p}/model.py", "line": p, "function": q, "code": p}]
    entries = {
        "onnx_lab.sources": json.dumps(sources),
        "onnx_lab.origin": json.dumps([p, q]),
        "pkg.torch.onnx.stack_trace": f'File "/{p}/m.py", line 3, in {q}\n    {p}\n',
        "namespace": f": {p}/{q}: {p}/op: aten.{q}",
        "pkg.torch.onnx.class_hierarchy": repr(["Root" + p, q, "aten." + p]),
        "pkg.torch.onnx.name_scopes": repr(["", p, q]),
        p: q,  # a hostile key as well
    }
    for k, v in entries.items():
        e = node.metadata_props.add()
        e.key, e.value = k, v
    node.doc_string = q


def _model_strings(m: onnx.ModelProto) -> onnx.ModelProto:
    m.producer_name = PAYLOADS[0]
    m.producer_version = PAYLOADS[2]
    m.domain = PAYLOADS[3]
    m.doc_string = PAYLOADS[1]
    m.graph.doc_string = PAYLOADS[4]
    for i, (k, v) in enumerate([(PAYLOADS[0], PAYLOADS[1]), ("author", PAYLOADS[2]),
                                ("onnx_lab.sources", PAYLOADS[3])]):
        e = m.metadata_props.add()
        e.key, e.value = f"{k}#{i}", v
    return m


def hostile() -> onnx.ModelProto:
    """Conv → BatchNormalization → Relu → Add, every name and string hostile; runs in ORT
    (a fuse_conv_bn pattern to show, compare, profile and diff)."""
    rng = np.random.default_rng(0)
    x, w, b = _name(0, "input"), _name(1, "weight"), _name(2, "bias")
    t1, t2, t3, y = _name(3, "conv_out"), _name(4, "bn_out"), _name(5, "relu_out"), \
        _name(6, "output")
    bn = [_name(7 + i, k) for i, k in enumerate(("scale", "beta", "mean", "var"))]
    c = _name(12, "const")  # (the TeX payload: a name lab.nodes shows)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), w),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), b),
        numpy_helper.from_array((1 + rng.random(4)).astype(np.float32), bn[0]),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), bn[1]),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), bn[2]),
        numpy_helper.from_array((1 + rng.random(4)).astype(np.float32), bn[3]),
        numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), c),
    ]
    for i, t in enumerate(inits):
        t.doc_string = PAYLOADS[(i + 5) % len(PAYLOADS)]
    nodes = [
        helper.make_node("Conv", [x, w, b], [t1], name=NODE_NAMES[0], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", [t1, *bn], [t2], name=NODE_NAMES[1]),
        helper.make_node("Relu", [t2], [t3], name=NODE_NAMES[2]),
        helper.make_node("Add", [t3, c], [y], name=NODE_NAMES[3]),
    ]
    for i, n in enumerate(nodes):
        _meta(n, i)
    vin = helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 2, 6, 6])
    vin.doc_string = PAYLOADS[6]
    vout = helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 4, 6, 6])
    vout.doc_string = PAYLOADS[7]
    vi = [helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, 4, 6, 6]) for t in (t1, t2, t3)]
    g = helper.make_graph(nodes, PAYLOADS[5] + "#graph", [vin], [vout], inits, value_info=vi)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return _model_strings(m)


def exotic() -> onnx.ModelProto:
    """Hostile op types, domains, attribute strings and symbolic dims (onnxruntime cannot run
    it: an unknown op in an unknown domain), beside a Constant with a string value."""
    dom = PAYLOADS[2] + "#domain"
    x, y, z, s = _name(0, "in"), _name(1, "mid"), _name(2, "out"), _name(3, "str")
    nodes = [
        helper.make_node("Op" + PAYLOADS[0].replace(" ", "_"), [x], [y], name=_name(4, "custom"),
                         domain=dom, mode=PAYLOADS[1], note=PAYLOADS[8], ints=[1, 2],
                         f=0.5),
        helper.make_node("Relu", [y], [z], name=_name(5, "relu"), doc_string=PAYLOADS[9]),
        helper.make_node("Constant", [], [s], name=_name(6, "const"),
                         value=helper.make_tensor("v", TensorProto.STRING, [1],
                                                  [PAYLOADS[3].encode()])),
    ]
    for i, n in enumerate(nodes):
        _meta(n, i + 3)
    vin = helper.make_tensor_value_info(x, TensorProto.FLOAT, [PAYLOADS[0] + "#dim", 3])
    outs = [helper.make_tensor_value_info(z, TensorProto.FLOAT, None),
            helper.make_tensor_value_info(s, TensorProto.STRING, [1])]
    g = helper.make_graph(nodes, PAYLOADS[4] + "#graph", [vin], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid(dom, 1)], ir_version=8)
    return _model_strings(m)


def known_injection() -> onnx.ModelProto:
    """The case from the security issue: a non-integer ``line`` in ``onnx_lab.sources``."""
    n = helper.make_node("Relu", ["x"], ["y"], name="relu")
    e = n.metadata_props.add()
    e.key = "onnx_lab.sources"
    e.value = json.dumps([{"path": ["m"], "file": "model.py",
                           "line": "<img src=x onerror=alert(document.domain)>"}])
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
