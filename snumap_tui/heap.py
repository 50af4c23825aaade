"""Long-lived objects out of the cyclic collector's way.

A full collection walks every object the collector tracks. In a monitor or a recorder most
of them are made at start-up and live until the end: the modules of Textual, Rich and numpy,
the topology, the widgets, the aggregator. Walking them again at each full collection costs
a pause of tens of milliseconds (58 ms in `snumap top` on the 384-PU fake tree, once every
half a minute or so: a tenth of its CPU there), and in the recorder that pause falls while
the measured program runs. ``freeze_long_lived()``, once the steady state is reached,
collects what start-up left over and moves the survivors to the collector's permanent
generation (gc.freeze); later collections walk only what was made since. Reference counting
still frees frozen objects as usual; ``thaw()`` hands them back to the collector.
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Collect start-up's garbage, then freeze what is alive now (see the module docstring)."""
    gc.collect()
    gc.freeze()


def thaw() -> None:
    """What was frozen may be collected again (a view that ends while the process goes on)."""
    gc.unfreeze()


__all__ = ["freeze_long_lived", "thaw"]
