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


class _Node:
    """A tracked object with a reference cycle, like onnx_ir's nodes and values."""

    def __init__(self) -> None:
        self.me = self


def test_what_a_block_built_joins_the_oldest_generation():
    with paused():
        made = _Node()
    young = gc.get_objects(generation=0) + gc.get_objects(generation=1)
    assert not any(o is made for o in young)
    assert any(o is made for o in gc.get_objects(generation=2))


def test_cycles_made_inside_are_still_collected_by_a_full_collection():
    import weakref

    with paused():
        ref = weakref.ref(_Node())
    assert ref() is not None  # a cycle: only the collector frees it
    gc.collect()
    assert ref() is None


def test_objects_the_process_froze_stay_frozen():
    # Frozen objects can still be freed by reference counting while the test runs (other
    # threads, pytest-xdist's channel), so the freeze count may drop a little; what must
    # hold is that paused() did not unfreeze them: a frozen object is in no generation.
    kept = _Node()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with paused():
            _Node()
        assert not any(o is kept for o in gc.get_objects())
        assert gc.get_freeze_count() > frozen // 2
    finally:
        gc.unfreeze()


def test_dropped_cycles_are_freed_without_an_explicit_collection():
    # What paused() moves to the oldest generation counts towards the next full
    # collection, as Python's own promotions do: a dropped model is freed in time.
    import weakref

    with paused():
        ref = weakref.ref(_Node())
    budget = 2 * len(gc.get_objects())  # far more than the quarter that makes one due
    made = 0
    while ref() is not None and made < budget:
        with paused():
            keep = [[i] for i in range(50_000)]  # tracked objects, built and dropped
        del keep
        made += 50_000
    assert ref() is None
