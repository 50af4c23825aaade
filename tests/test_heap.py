"""heap.LongLived: the collector's permanent generation is one state for the process; the
last holder to go hands it back, not the first."""

from __future__ import annotations

import gc

from snumap_tui.heap import LongLived


def test_the_last_holder_thaws() -> None:
    gc.unfreeze()
    view, recorder = LongLived(), LongLived()
    view.settle()
    view.settle()                               # once per holder
    assert gc.get_freeze_count() > 0
    recorder.settle()
    view.release()
    assert gc.get_freeze_count() > 0            # the recorder still counts on it
    recorder.release()
    recorder.release()                          # a second release does nothing
    assert gc.get_freeze_count() == 0
    assert not view.settled and not recorder.settled
