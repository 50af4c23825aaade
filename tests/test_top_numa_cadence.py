"""The selected process's numa_maps (a page walk per read) is read when it is selected, then
every refresh_s, not at every sweep of `snumap top`."""

from __future__ import annotations

from pathlib import Path

from fakefs import FakeRoot

from snumap_tui.sources._io import read_text
from snumap_tui.sources.tasks import TasksSource


def test_numa_maps_read_on_selection_then_every_refresh(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path, cpus=16, nodes=4, packages=2, caches=False)
    reads: list[str] = []
    now = [100.0]

    def reader(path: Path) -> str:
        if path.name == "numa_maps":
            reads.append(path.parent.name)
        return read_text(path)

    src = TasksSource(fake.root, reader=reader, refresh_s=5.0, clock=lambda: now[0])
    src.want_numa(4300)
    for _ in range(4):                               # 4 sweeps within refresh_s: one read
        fake.advance(1.0, busy={15: 1.0})
        procs = src.read()["processes"]
        assert procs[4300]["numa_pages"] == {3: 300, 0: 40}
        now[0] += 1.0
    assert reads == ["4300"]
    now[0] += 2.0                                    # 6 s after the first read: read again
    src.read()
    assert reads == ["4300", "4300"]
    src.want_numa(4200)                              # a new selection: read at once
    assert src.read()["processes"][4200]["numa_pages"] is not None
    assert reads[-1] == "4200"
