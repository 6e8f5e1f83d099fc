"""No silent keywords: an unknown keyword argument is an InputError naming its close matches,
at every door (onnx_lab.f, lab.f, the steps), and help() shows what each method takes."""
from __future__ import annotations

import inspect
import pydoc

import pytest

import onnx_lab
from onnx_lab.errors import InputError, check_keywords, forwards, keyword_names, strict_keywords

# The Lab methods that pass **kw on: each shows its target's keywords and checks them.
FORWARDING = {
    "find_precision": ("metric", "atol", "min_top1", "block_size"),
    "sensitivity": ("recheck", "calibration", "depth"),
    "compare": ("atol", "layerwise", "preset"),
    "check": ("providers", "load"),
    "profile": ("runs", "warmup", "budget_s", "opt_level"),
    "profile_generation": ("prompt", "new_tokens", "io_binding"),
    "batch_sweep": ("dim", "runs", "stop_at_knee"),
    "compare_backends": ("batch_sizes", "preset"),
    "report": ("title", "profile", "against", "max_nodes"),
    "explore": ("page_size", "tab", "height"),
}


@pytest.fixture(scope="module")
def lab():
    return onnx_lab.open("sample:convnet")


def test_check_keywords_names_the_typo_and_its_close_match():
    with pytest.raises(InputError) as e:
        check_keywords("f()", ["min_topl", "seed"], ["min_top1", "max_kl", "seed"])
    msg = str(e.value)
    assert "'min_topl'" in msg and "did you mean 'min_top1'" in msg and "'seed'" not in \
        msg.split("It takes")[0]
    assert "It takes: min_top1, max_kl, seed." in msg
    check_keywords("f()", ["seed"], ["seed"])  # known keywords pass
    check_keywords("f()", [], [])


def test_strict_keywords_keeps_the_signature_and_raises_input_error():
    def f(a, b=1, *, c=2):
        return a + b + c

    g = strict_keywords(f)
    assert inspect.signature(g) == inspect.signature(f) and keyword_names(g) == ["a", "b", "c"]
    assert g(1, c=3) == 5
    with pytest.raises(InputError, match="did you mean 'c'"):
        g(1, cc=3)


def test_forwards_merges_the_target_signature_lazily():
    class Thing:
        @forwards("onnx_lab.analysis.compat:check", drop=("model",))
        def check(self, extra: int = 0, **kw):
            return extra, kw

    t = Thing()
    assert list(inspect.signature(t.check).parameters) == ["extra", "providers", "load"]
    assert t.check(1, load=False) == (1, {"load": False})
    with pytest.raises(InputError, match="did you mean 'providers'"):
        t.check(provider="cpu")


@pytest.mark.parametrize("method, names", sorted(FORWARDING.items()))
def test_lab_methods_show_and_check_their_keywords(lab, method, names):
    bound = getattr(lab, method)
    params = inspect.signature(bound).parameters
    assert set(names) <= set(params), sorted(params)
    assert "kw" not in params and "kwargs" not in params and "sections" not in params
    text = pydoc.render_doc(bound, renderer=pydoc.plaintext)
    assert all(n in text for n in names)
    with pytest.raises(InputError, match=f"did you mean '{names[0]}'"):
        bound(**{names[0] + "x": 1})  # rejected before anything runs


def test_find_precision_int4_typo_raises_with_the_close_match(lab):
    with pytest.raises(InputError, match="did you mean 'min_top1'"):
        lab.find_precision("int4", min_topl=0.9)
    assert len(lab.history) == 1  # nothing ran


def test_find_precision_rejects_the_keywords_of_another_target(lab):
    # min_top1 is a keyword of the int4 search only: for fp16 it is an error, not ignored.
    with pytest.raises(InputError, match=r"find_precision\('fp16'\) got an unknown keyword "
                                         r"'min_top1'"):
        lab.find_precision("fp16", min_top1=0.9)


def test_find_weight_only_and_verify_extract_swallow_nothing():
    from onnx_lab.numerics.verify import verify_extract
    from onnx_lab.numerics.weight_only import find_weight_only

    for fn in (find_weight_only, verify_extract):
        assert inspect.Parameter.VAR_KEYWORD not in {
            p.kind for p in inspect.signature(fn).parameters.values()}
    with pytest.raises(InputError, match="did you mean 'min_top1'"):
        find_weight_only("sample:tiny_llm", "int4", min_topl=0.9)


def test_extract_verification_options_it_cannot_use_are_an_error(lab):
    with pytest.raises(InputError, match=r"extract\(verify=\{...\}\) got an unknown keyword "
                                         r"'intermediates'"):
        lab.extract(nodes=["/stem/conv/Conv"], verify={"intermediates": True})
    sub = lab.extract(nodes=["/stem/conv/Conv"], verify={"atol": 1e-4})
    assert sub.history.verify_passed.iloc[0]


def test_module_profile_checks_its_keywords():
    with pytest.raises(InputError, match="did you mean 'warmup'"):
        onnx_lab.profile("sample:convnet", warmp=1)
