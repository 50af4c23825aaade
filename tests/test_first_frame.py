"""`snumap top`'s first frame before Textual loads (commands/first_frame.py): real sweeps on
this machine, drawn on a real pseudo-terminal."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import termios
from pathlib import Path

from snumap_tui.commands.first_frame import ALT_SCREEN, draw, first_frame, frame_lines
from snumap_tui.model.sampler import Sampler
from snumap_tui.topology.model import Topology


def _sampler() -> Sampler:
    import argparse

    from snumap_tui.commands.common import topology_from_args

    topo: Topology = topology_from_args(argparse.Namespace(topology=None, fsroot=None,
                                                           synthetic=None))
    s = Sampler(topo, Path("/"), 1.0)
    s.sweep()
    return s


def test_first_frame_has_utilisation_and_draws_on_a_terminal() -> None:
    s = _sampler()
    try:
        frame = first_frame(s)
        assert frame is not None
        assert frame.get("util_pct", frame.topology.root.id) is not None
        lines = frame_lines(frame, "live", 60, 12)
        assert len(lines) <= 11 and all(len(ln) <= 60 for ln in lines)
        assert any("Machine" in ln and "%" in ln for ln in lines)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        with os.fdopen(slave, "w") as tty:
            assert draw(frame, "live", tty)
            data = ""
            for _ in range(50):                 # bounded: the frame is a few hundred bytes
                data += os.read(master, 65536).decode()
                if "starting the live view" in data:
                    break
        os.close(master)
        assert data.startswith(ALT_SCREEN) and "Machine" in data
        assert not draw(frame, "live", io.StringIO())      # not a terminal: nothing
    finally:
        s.close()
