"""``snumap top --fsroot``: the ``i`` screen never offers this machine's fixes for the other
machine (the statuses go through ``snumap probe --fsroot``'s rewording)."""

from __future__ import annotations

from pathlib import Path

from snumap_tui.commands.top import gathered_statuses
from snumap_tui.sources.base import SourceStatus
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.screens import sources_table


def test_fsroot_statuses_carry_no_local_fix(tmp_path: Path) -> None:
    (tmp_path / "sys/devices/system/node/node0").mkdir(parents=True)
    frame = demo_frame(synthetic_topology(1, 1, 1, 2, 1), 0)
    frame.sources = {
        "rapl": SourceStatus("rapl", False, "no powercap zone", "modprobe intel_rapl_msr"),
        "numa": SourceStatus("numa", False, "no numastat", "enable CONFIG_NUMA"),
        "procstat": SourceStatus("procstat", True),
    }
    out = gathered_statuses(frame, tmp_path).sources
    assert all(s.fix is None for s in out.values())
    assert "unknown for that machine" in (out["rapl"].reason or "")      # tree has no powercap
    assert "on that machine" in (out["numa"].reason or "")               # tree has the nodes
    assert out["procstat"].available
    from rich.console import Console

    c = Console(width=100, record=True, color_system=None)
    c.print(sources_table(out))
    assert "modprobe" not in c.export_text() and "fix:" not in c.export_text()
