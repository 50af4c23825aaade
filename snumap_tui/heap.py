"""Long-lived objects out of the cyclic collector's way.

A full collection walks every object the collector tracks. In a monitor or a recorder most
of them are made at start-up and live until the end: the modules of Textual, Rich and numpy,
the topology, the widgets, the aggregator. Walking them again at each full collection costs
a pause of tens of milliseconds (58 ms in `snumap top` on the 384-PU fake tree, once in a
40 s window), and in the recorder that pause falls while the measured program runs.
``LongLived.settle()``, once the steady state is reached, collects what start-up left over
and moves the survivors to the collector's permanent generation (gc.freeze); later
collections walk only what was made since. Reference counting still frees frozen objects as
usual. ``release()`` hands them back to the collector once no holder is settled any more
(gc.freeze is one state for the whole process: a view that ends must not thaw what a
recorder in the same process still counts on).
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_holders = 0


class LongLived:
    """One user of the frozen heap: ``settle()`` at most once, ``release()`` at its end."""

    def __init__(self) -> None:
        self.settled = False

    def settle(self) -> None:
        """Collect start-up's garbage, then freeze what is alive now (once)."""
        global _holders
        if self.settled:
            return
        self.settled = True
        with _lock:
            _holders += 1
            gc.collect()
            gc.freeze()

    def release(self) -> None:
        """This user is done; the last one to go hands the frozen objects back."""
        global _holders
        if not self.settled:
            return
        self.settled = False
        with _lock:
            _holders -= 1
            if _holders == 0:
                gc.unfreeze()


__all__ = ["LongLived"]
