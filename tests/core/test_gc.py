"""core._gc.paused: the collector is off inside, back as it was after (errors too)."""

import gc

import pytest

from onnx_lab.core._gc import paused


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if was:  # as it was before, whatever the test did
        gc.enable()
    else:
        gc.disable()


def test_paused_turns_the_collector_off_and_back_on():
    with paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_reenable_only_at_the_outermost():
    with paused():
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_inside_still_reenables():
    with pytest.raises(ValueError):
        with paused():
            raise ValueError("boom")
    assert gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled():
    gc.disable()
    with paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_as_a_decorator_each_call_pauses():
    @paused()
    def f():
        return gc.isenabled()

    assert f() is False and f() is False
    assert gc.isenabled()
