"""`--freq`: CPU frequency through cpufreq, restored afterwards.

A frequency is pinned by writing it to ``scaling_max_freq`` and ``scaling_min_freq`` of every
CPU (in the order that keeps min <= max at each step), or, where the ``userspace`` governor
is the one in use, to ``scaling_setspeed``. What was there before is saved first -- in memory
and in the study's ``freq-restore.json`` -- and written back by ``restore()``: at the end, on
Ctrl-C, SIGTERM or an exception (the runner's ``finally``), and, after a SIGKILL, by the next
`snumap scale` on that study before it does anything else.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError

SYSFS = Path("/sys/devices/system/cpu")
FILES = ("scaling_governor", "scaling_min_freq", "scaling_max_freq", "scaling_setspeed")


def parse_freq(text: str) -> str:
    """A --freq item checked: ``max``, ``min``, ``1.2GHz``, ``2000MHz`` or kHz digits."""
    t = text.strip()
    if t in ("max", "min") or re.fullmatch(r"\d+(\.\d+)?\s*(GHz|MHz|kHz|ghz|mhz|khz)?", t):
        return t
    raise SnumapError(f"--freq {text}: give max, min, or a frequency such as 1.2GHz, 2000MHz")


def to_khz(text: str, lo: int, hi: int) -> int:
    if text == "max":
        return hi
    if text == "min":
        return lo
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([GMk]Hz)?", text, re.IGNORECASE)
    assert m is not None
    unit = (m.group(2) or "kHz").lower()
    khz = round(float(m.group(1)) * {"ghz": 1e6, "mhz": 1e3, "khz": 1}[unit])
    if not lo <= khz <= hi:
        raise SnumapError(f"--freq {text}: outside what the CPUs run at "
                          f"({lo / 1e6:.2f}-{hi / 1e6:.2f} GHz)")
    return khz


class CpuFreq:
    """The cpufreq files of a machine (ROOT: its /sys/devices/system/cpu, a fake tree in
    tests)."""

    def __init__(self, root: Path = SYSFS, restore_file: Path | None = None) -> None:
        self.root = Path(root)
        self.restore_file = restore_file
        self.saved: dict[str, dict[str, str]] = {}

    def cpus(self) -> list[Path]:
        try:
            return sorted((p / "cpufreq" for p in self.root.glob("cpu[0-9]*")
                           if (p / "cpufreq").is_dir()), key=lambda p: int(p.parent.name[3:]))
        except OSError:
            return []

    def unavailable(self) -> str | None:
        """Why frequencies cannot be set here (None when they can)."""
        cpus = self.cpus()
        if not cpus:
            return f"no cpufreq on this machine ({self.root}/cpu*/cpufreq missing)"
        for c in cpus:
            for f in ("scaling_min_freq", "scaling_max_freq"):
                if not os.access(c / f, os.W_OK):
                    return f"{c / f} is not writable" + \
                        (" (run as root)" if os.geteuid() != 0 else "")
        return None

    def limits(self) -> tuple[int, int]:
        c = self.cpus()[0]
        return (int(_read(c / "cpuinfo_min_freq")), int(_read(c / "cpuinfo_max_freq")))

    def check(self, freqs: list[str]) -> None:
        why = self.unavailable()
        if why:
            raise SnumapError(f"--freq: cannot set the CPU frequency: {why}")
        lo, hi = self.limits()
        for f in freqs:
            to_khz(f, lo, hi)

    def set(self, text: str) -> int:
        """Pin every CPU to TEXT; returns the kHz written."""
        lo, hi = self.limits()
        khz = to_khz(text, lo, hi)
        if not self.saved:
            self._save()
        for c in self.cpus():
            gov = _read(c / "scaling_governor") if (c / "scaling_governor").exists() else ""
            if gov == "userspace" and (c / "scaling_setspeed").exists():
                _write(c / "scaling_setspeed", str(khz))
                continue
            cur_max = int(_read(c / "scaling_max_freq"))
            order = ("scaling_max_freq", "scaling_min_freq") if khz > cur_max else \
                ("scaling_min_freq", "scaling_max_freq")
            for name in order:
                _write(c / name, str(khz))
        return khz

    def _save(self) -> None:
        for c in self.cpus():
            self.saved[str(c)] = {f: _read(c / f) for f in FILES if (c / f).exists()
                                  and _read(c / f) not in ("", "<unsupported>")}
        if self.restore_file is not None:
            from snumap_tui.study.manifest import write_atomic

            write_atomic(self.restore_file, json.dumps(self.saved, indent=1))

    def restore(self) -> None:
        """Write back what was there before the first set() (idempotent)."""
        restore_values(self.saved)
        self.saved = {}
        if self.restore_file is not None:
            try:
                os.unlink(self.restore_file)
            except FileNotFoundError:
                pass

    def __enter__(self) -> CpuFreq:  # noqa: PYI034 - py3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def restore_values(saved: dict[str, dict[str, str]]) -> None:
    for c, vals in saved.items():
        cdir = Path(c)
        if "scaling_governor" in vals:
            _write(cdir / "scaling_governor", vals["scaling_governor"])
        lo, hi = vals.get("scaling_min_freq"), vals.get("scaling_max_freq")
        if lo is not None and hi is not None:
            cur_max = int(_read(cdir / "scaling_max_freq"))
            # min <= max at every step: raise max first when the old max is above the current
            order = [("scaling_max_freq", hi), ("scaling_min_freq", lo)] if int(hi) >= cur_max \
                else [("scaling_min_freq", lo), ("scaling_max_freq", hi)]
            for name, v in order:
                _write(cdir / name, v)
        if vals.get("scaling_governor") == "userspace" and "scaling_setspeed" in vals:
            _write(cdir / "scaling_setspeed", vals["scaling_setspeed"])


def restore_leftover(path: Path) -> bool:
    """After a study killed while it held the frequencies: put them back from PATH."""
    if not path.exists():
        return False
    from snumap_tui.study.manifest import read_json

    saved = read_json(path)
    if isinstance(saved, dict):
        restore_values({str(k): {str(a): str(b) for a, b in v.items()}
                        for k, v in saved.items() if isinstance(v, dict)
                        and Path(str(k)).name == "cpufreq"})
    os.unlink(path)
    return True


def _read(p: Path) -> str:
    return p.read_text().strip()


def _write(p: Path, value: str) -> None:
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def describe(actuator: Any) -> dict[str, Any]:
    return {"how": "cpufreq scaling_min_freq/scaling_max_freq (userspace: scaling_setspeed)",
            "root": str(actuator.root)}
