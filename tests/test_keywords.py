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
    "edit": ("height",),
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


def test_find_precision_int4_takes_the_documented_tokens_keyword():
    # docs/precision.md and Lab.find_precision's docstring give tokens= for the int4 search;
    # the Lab dropped it ("got an unknown keyword 'tokens' (did you mean 'new_tokens' ...)"),
    # so valid ids were refused unless passed as feeds
    import onnx_lab

    lab = onnx_lab.open("sample:tiny_llm")
    plan = lab.find_precision("int4", tokens=[1, 2, 255, 7], max_trials=2, progress=False)
    assert plan.tokens == [1, 2, 255, 7]
    with pytest.raises(InputError, match=r"\[0, 256\)"):
        onnx_lab.open("sample:tiny_llm").find_precision("int4", tokens=[1, 2, 256],
                                                        progress=False)
    with pytest.raises(InputError, match="not both"):
        onnx_lab.open("sample:tiny_llm").find_precision("int4", [1, 2], tokens=[1, 2],
                                                        progress=False)
    with pytest.raises(InputError, match="unknown keyword 'tokens'"):
        onnx_lab.open("sample:tiny_llm").find_precision("fp16", tokens=[1, 2])


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


# Every public function of the package (onnx_lab.__all__) with a misspelt keyword, and the
# keyword its close match names: onnx_lab.compare(..., tolerence=...) was Python's TypeError.
_MODULE_TYPOS = {
    "open": ("dim", "dims"), "merge": ("prefix_1", "prefix1"), "repro": ("overwite", "overwrite"),
    "to_fp16": ("keep_io_type", "keep_io_types"), "to_int8_dynamic": ("reduce_rang", "reduce_range"),
    "to_int8_static": ("feed", "feeds"), "profile": ("warmp", "warmup"),
    "compare": ("layer_wise", "layerwise"), "compare_llm": ("token", "tokens"),
    "compare_torch": ("preest", "preset"), "diff": ("bb", "b"),
    "profile_generation": ("new_token", "new_tokens"), "write_report": ("titel", "title"),
    "write_diff_report": ("titel", "title"), "audit": ("worker", "workers"),
}


@pytest.mark.parametrize("name", sorted(_MODULE_TYPOS))
def test_every_module_function_refuses_a_misspelt_keyword(name):
    typo, near = _MODULE_TYPOS[name]
    fn = getattr(onnx_lab, name)
    with pytest.raises(InputError, match=f"did you mean '{near}'"):
        fn(**{typo: 1})
    assert near in inspect.signature(fn).parameters  # help() still shows the real signature


def test_module_function_typos_cover_all_public_functions():
    public = {n for n in onnx_lab.__all__ if callable(getattr(onnx_lab, n))
              and not isinstance(getattr(onnx_lab, n), type)}
    assert public == set(_MODULE_TYPOS)


def _explicit_methods():
    out = []
    for name, fn in vars(onnx_lab.Lab).items():
        if name.startswith("_") or not callable(fn) or isinstance(fn, property):
            continue
        sig = inspect.signature(fn)
        if not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
            out.append(name)
    return sorted(out)


@pytest.mark.parametrize("method", _explicit_methods())
def test_every_lab_method_refuses_a_misspelt_keyword(lab, method):
    # Methods with explicit signatures: Python's TypeError becomes the same InputError.
    with pytest.raises(InputError, match=r"unknown keyword 'verifyy'"):
        getattr(lab, method)(verifyy=True)


def test_apply_with_an_unknown_parameter_names_its_close_match(lab):
    from onnx_lab.errors import PassError

    with pytest.raises(InputError, match=r"no parameter 'dimz' \(did you mean 'dims'\?\)"):
        lab.apply("fix_dims", verify=False, dimz={"batch": 1})
    with pytest.raises(PassError):  # still the PassError it always was
        lab.apply("fuse_conv_bn", alpha=1)
    assert len(lab.history) == 1


def test_results_render_refuses_a_misspelt_keyword(lab):
    c = lab.compare(lab)
    with pytest.raises(InputError, match="did you mean 'around'"):
        c.render(aroun="x")
    with pytest.raises(InputError, match="did you mean 'max_nodes'"):
        lab.diff(lab).render(max_node=3)


def test_edit_methods_are_the_registrys_edit_passes(lab):
    import warnings

    from onnx_lab.lab import _EditStep
    from onnx_lab.transforms import available

    table = available()
    edits = set(table.loc[table.kind == "edit", "name"])
    methods = {n for n, v in vars(onnx_lab.Lab).items() if isinstance(v, _EditStep)}
    assert methods == edits
    for name in sorted(methods):  # the signature and doc are the pass's own
        params = list(table.loc[table.name == name, "parameters"].iloc[0])
        sig = list(inspect.signature(getattr(lab, name)).parameters)
        assert sig == params + ["verify"], name
        assert getattr(onnx_lab.Lab, name).__doc__.startswith(
            table.loc[table.name == name, "summary"].iloc[0])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = lab.set_attribute("/stem/conv/Conv", name="group", value=1, verify=False)
    assert r.name == "set_attribute" and r.modified
    assert any(issubclass(x.category, DeprecationWarning) and "attribute=" in str(x.message)
               for x in w)
    lab.undo()


def test_deprecated_names_warn_with_the_new_call(lab, tmp_path):
    with pytest.warns(DeprecationWarning, match="lab.version_history"):
        assert lab.versions is lab.version_history
    from onnx_lab.errors import InputError as Err

    c = lab.compare(lab)  # no divergence: the call warns, then says there is nothing to write
    with pytest.warns(DeprecationWarning, match=r"comparison.repro\(folder\)"), \
            pytest.raises(Err, match="no divergence"):
        lab.repro(c, tmp_path / "r")
