"""Where `snumap top`'s CPU goes: each part's thread CPU time per second of a running top.

`snumap top` runs in tmux (160x50, its own socket, a 1 s refresh) inside this script's child
mode, which wraps the parts of a frame with a thread-CPU clock (time.thread_time_ns) before
the command starts: the sampler's sweep (and each source's read within it), the derivation of
a Frame, the app's handling of a new frame (and its parts), Textual's screen update (the
compositor) and its writes, and the collector's passes (gc.callbacks). After a settling time
the parent resets the sums, waits, and reads them with the process's own CPU time over the
same window (/proc/PID/task/*/schedstat). "rest" is what no wrapped part holds: the asyncio
loop, Textual's message pump, the input and writer threads. The wrappers cost a little
themselves, so the parts add up to slightly more than top alone spends.

Runs on this machine, on the 16-PU fake full node and on the 384-PU fake tree of
bench/top_cpu.py.

    .venv/bin/python bench/top_parts.py [--seconds 40] [--no-write]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

from _report import table, write_section

TMUX = ["tmux", "-L", "topparts"]
SETTLE_S = 8.0

# (label, module, class or None, attribute, level): level 0 parts add up to the whole;
# level 1 parts are inside the level 0 part above them.
PARTS = [
    ("sampler: sweep", "snumap_tui.model.sampler", "Sampler", "_sweep", 0),
    ("sampler: derive", "snumap_tui.model.sampler", "Sampler", "_derive", 0),
    ("counters from readings", "snumap_tui.model.derive", None, "counters", 1),
    ("process rows", "snumap_tui.model.taskrows", "TaskTimeline", "rows", 1),
    ("app: new frame", "snumap_tui.ui.app", "TopApp", "on_frame_ready", 0),
    ("tree rows", "snumap_tui.ui.topology_view", "TopologyTable", "set_frame", 1),
    ("busiest processes", "snumap_tui.ui.app", "TopApp", "_draw_busiest", 1),
    ("history line", "snumap_tui.ui.app", "TopApp", "_draw_spark", 1),
    ("Textual: screen update (compositor)", "textual.screen", "Screen", "_on_timer_update", 0),
    ("Textual: display (segments to text)", "textual.app", "App", "_display", 0),
    ("Textual: writer thread", "textual.drivers._writer_thread", "WriterThread", "write", 0),
]


# ---- child: top with its parts timed ----------------------------------------------------------

def child(out: str, argv: list[str]) -> int:
    import gc
    import importlib
    import pkgutil

    acc: dict[str, list[int]] = {}

    def wrap(owner: Any, attr: str, label: str) -> None:
        f = getattr(owner, attr)

        @functools.wraps(f)
        def timed(*a: Any, **k: Any) -> Any:
            t = time.thread_time_ns()
            try:
                return f(*a, **k)
            finally:
                c = acc.setdefault(label, [0, 0])
                c[0] += time.thread_time_ns() - t
                c[1] += 1
        setattr(owner, attr, timed)

    for label, mod, cls, attr, _ in PARTS:
        m = importlib.import_module(mod)
        wrap(getattr(m, cls) if cls else m, attr, label)
    from snumap_tui import sources

    for info in pkgutil.iter_modules(sources.__path__):
        m = importlib.import_module(f"snumap_tui.sources.{info.name}")
        for name, c in list(vars(m).items()):
            if isinstance(c, type) and c.__module__ == m.__name__ and "read" in vars(c) \
                    and name.endswith("Source"):
                wrap(c, "read", f"read: {name.removesuffix('Source').lower()}")
    started: dict[str, int] = {}

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started["t"] = time.thread_time_ns()
            return
        c = acc.setdefault(f"gc: generation {info['generation']}", [0, 0])
        c[0] += time.thread_time_ns() - started.get("t", time.thread_time_ns())
        c[1] += 1
    gc.callbacks.append(on_gc)
    t0 = [time.monotonic()]

    def reset(*_: object) -> None:
        acc.clear()
        t0[0] = time.monotonic()

    def dump(*_: object) -> None:
        Path(out).write_text(json.dumps({"wall": time.monotonic() - t0[0], "parts": acc}))
    signal.signal(signal.SIGUSR2, reset)
    signal.signal(signal.SIGUSR1, dump)
    from snumap_tui import cli

    return cli.main(["top", "--interval", "1", *argv])


# ---- parent -----------------------------------------------------------------------------------

def cpu_ns(pid: int) -> int:
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def measure(label: str, extra: list[str], seconds: float, tmp: Path) -> dict[str, Any]:
    out = tmp / f"{len(list(tmp.iterdir()))}.json"
    cmd = " ".join([sys.executable, str(Path(__file__).resolve()), "--child", str(out), *extra])
    shell = f"cd {REPO} && unset COLUMNS LINES && export TERM=xterm-256color && exec {cmd}"
    subprocess.run([*TMUX, "new-session", "-d", "-s", "t", "-x", "160", "-y", "50", shell],
                   check=True, timeout=10)
    try:
        pid = int(subprocess.run([*TMUX, "list-panes", "-t", "t", "-F", "#{pane_pid}"],
                                 check=True, capture_output=True, text=True,
                                 timeout=10).stdout.split()[0])
        time.sleep(SETTLE_S)
        os.kill(pid, signal.SIGUSR2)
        c0, w0 = cpu_ns(pid), time.monotonic()
        time.sleep(seconds)
        c1, w1 = cpu_ns(pid), time.monotonic()
        os.kill(pid, signal.SIGUSR1)
        for _ in range(50):
            if out.exists():
                break
            time.sleep(0.1)
        got = json.loads(out.read_text())
    finally:
        subprocess.run([*TMUX, "kill-server"], check=False, timeout=10)
    got["total_ms_s"] = (c1 - c0) / 1e6 / (w1 - w0)
    got["label"] = label
    return got


def rows_of(run: dict[str, Any]) -> list[list[object]]:
    wall = run["wall"]
    parts = run["parts"]
    rows: list[list[object]] = []
    top_sum = 0.0

    def row(name: str, ns: int, n: int, indent: str = "") -> list[object]:
        ms = ns / 1e6 / wall
        return [indent + name, f"{ms:.2f}", f"{ms / 10:.3f} %", n, f"{ns / 1e3 / max(n, 1):.0f}"]

    for label, *_, lv in PARTS:
        if label not in parts:
            continue
        ns, n = parts[label]
        if lv == 0:
            top_sum += ns / 1e6 / wall
        rows.append(row(label, ns, n, "" if lv == 0 else "  · "))
        if label == "sampler: sweep":
            reads = sorted(((k, v) for k, v in parts.items() if k.startswith("read: ")),
                           key=lambda kv: -kv[1][0])
            rows += [row(k, v[0], v[1], "  · ") for k, v in reads]
    for k, (ns, n) in sorted(parts.items()):
        if k.startswith("gc: "):
            top_sum += ns / 1e6 / wall
            rows.append(row(k, ns, n))
    total = run["total_ms_s"]
    rows.append(["rest (asyncio loop, message pump, input thread)",
                 f"{max(0.0, total - top_sum):.2f}", f"{max(0.0, total - top_sum) / 10:.3f} %",
                 "", ""])
    rows.append(["**the whole process**", f"{total:.2f}", f"{total / 10:.3f} %", "", ""])
    return rows


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3:])
    ap = argparse.ArgumentParser(description="where snumap top's CPU goes, part by part")
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    from top_cpu import fake_384, fake_tree

    with tempfile.TemporaryDirectory(prefix="snumap-topparts-") as d:
        tmp = Path(d)
        runs = [measure("this machine", [], args.seconds, tmp)]
        for label, make in (
                # bench/observer.py d's full node: the device host's shape, every PU busy
                ("16-PU fake full node", lambda: fake_tree(tmp, 16, nodes=1, packages=1,
                                                          job=True, others=70)),
                ("384-PU fake tree", lambda: fake_384(tmp))):
            root, stop, ticker = make()
            try:
                runs.append(measure(label, ["--fsroot", str(root)], args.seconds, tmp))
            finally:
                stop.set()
                ticker.join(timeout=5)
    body = (f"`snumap top` at a 1 s refresh in tmux 160x50 (the tree view), {args.seconds:.0f} s "
            f"after {SETTLE_S:.0f} s of settling, each part's thread CPU time "
            "(time.thread_time_ns around it) per second of wall time, as ms and as % of one "
            "core; per call in µs. Indented parts are inside the part above them. The whole "
            "process is its threads' run time (schedstat) over the same window; the wrappers "
            "themselves cost a little. The fake-tree runs read bench/top_cpu.py's fake trees "
            "(the 16-PU full node of bench/observer.py d: a 16-thread program on every PU "
            "beside 70 idle processes), advanced every 0.25 s by this script.\n\n")
    for run in runs:
        body += f"**{run['label']}**\n\n" + table(
            ["part", "ms per s", "of one core", "calls", "µs a call"], rows_of(run)) + "\n"
    print(body)
    if not args.no_write:
        write_section("top_parts", "snumap top: where its CPU goes", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
