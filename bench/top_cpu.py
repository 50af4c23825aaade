"""CPU cost of `snumap top` next to htop, btop and glances, and its time to first frame.

Every tool runs in its own tmux session (120x40, TERM=xterm-256color) at a 1 s refresh, all at
the same time, for --seconds (60 by default); the CPU time each process used (utime + stime
from /proc/PID/stat, all its threads) over that window is reported as % of one core. A second
`snumap top` runs on a generated 384-PU, 8-node fake /sys + /proc tree whose counters this
script advances every 0.25 s. Time to first frame: from spawning `snumap top` in tmux until
the pane shows the machine's row with a number (median of 3).

    .venv/bin/python bench/top_cpu.py [--seconds 60]

glances is installed with pip into a temporary virtualenv; when that fails it is skipped and
the table says so. Writes its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

from _report import table, write_section

HZ = os.sysconf("SC_CLK_TCK")
PEER_FF: dict[str, float] = {}      # peer -> median seconds to its first frame
SNUMAP = f"{sys.executable} -m snumap_tui.cli top --interval 1"
FLOOR_1 = "floor: Textual app, 1 row repainted a second, no data"
FLOOR_40 = "floor: Textual app, 40 rows repainted a second, no data"
FLOOR_TOP = ("floor: a minimal top in Python on Textual (reads what htop reads, "
             "6 rows repainted a second)")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=False, capture_output=True, text=True,
                          timeout=10).stdout


def spawn(cmd: str, env: dict[str, str] | None = None, keys: str = "") -> str:
    """Start ``cmd`` in a new 120x40 tmux session; ``exec`` so the pane's pid is the tool's.
    ``keys`` are typed into it once it has drawn (``3``: snumap top's processes view)."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    exports = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    # COLUMNS/LINES (set by some shells and by pytest-textual-snapshot) would fix Textual's
    # size at theirs instead of the pane's.
    # PYTHONDONTWRITEBYTECODE (set in some shells and CI) would make every start compile
    # snumap's modules again: an installed snumap has its bytecode (main() compiles it first).
    shell = (f"cd {REPO} && unset COLUMNS LINES PYTHONDONTWRITEBYTECODE && "
             f"export TERM=xterm-256color {exports} && exec {cmd}")
    # Twice: a tmux server another user of the machine is just shutting down ("server exited
    # unexpectedly") refuses the first session.
    for attempt in (1, 2):
        done = subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "120", "-y", "40",
                               shell], check=attempt == 2, timeout=10, capture_output=True)
        if done.returncode == 0:
            break
        time.sleep(0.5)
    if keys:
        wait_for(name, "Machine")
        tmux("send-keys", "-t", name, keys)
    return name


def wait_for(name: str, marker: str, timeout: float = 30.0) -> None:
    """Until the pane shows ``marker`` with a number on its row (the first frame is drawn)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        row = next((ln for ln in tmux("capture-pane", "-p", "-t", name).splitlines()
                    if marker in ln), "")
        if "%" in row:
            return
        time.sleep(0.05)


def pane_pid(name: str) -> int:
    return int(tmux("display-message", "-p", "-t", name, "#{pane_pid}").strip())


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process (all its threads), proc(5) fields 14 and 15."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def kill(name: str) -> None:
    tmux("kill-session", "-t", name)


def first_frame_s(cmd: str, marker: str = "Machine", env: dict[str, str] | None = None
                  ) -> float:
    """Seconds from spawning until the row holding ``marker`` shows a percentage (snumap: the
    tree's Machine row; htop: its CPU meter; btop: its cpu box)."""
    t0 = time.monotonic()
    name = spawn(cmd, env)
    try:
        while time.monotonic() - t0 < 30:
            screen = tmux("capture-pane", "-p", "-t", name)
            row = next((ln for ln in screen.splitlines() if marker in ln), "")
            if "%" in row:
                return time.monotonic() - t0
            time.sleep(0.01)
        return float("nan")
    finally:
        kill(name)


def glances_cmd(tmp: Path) -> str | None:
    venv = tmp / "glances-venv"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120,
                       capture_output=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "glances"], check=True,
                       timeout=300, capture_output=True)
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"glances skipped: {exc}", file=sys.stderr)
        return None
    return f"{venv / 'bin' / 'glances'} -t 1"


def fake_tree(tmp: Path, cpus: int, nodes: int, packages: int, *, job: bool = False,
              others: int = 0) -> tuple[Path, threading.Event, threading.Thread]:
    """A fake /sys + /proc tree of that shape, its counters advanced every 0.25 s by a thread
    of this script. By default a quarter of its PUs is busy, the busy block moving on each
    tick; ``job``: a program with a thread on every PU keeps them all busy (a full node), and
    ``others`` idle single-thread processes share the process list with it."""
    from fakefs import FakeProcess, FakeRoot, FakeThread

    # A full node holds its job and idle daemons only (FakeRoot's own processes would be
    # billed every PU they sit on).
    fr = FakeRoot(tmp / f"fake{cpus}", cpus=cpus, nodes=nodes, packages=packages,
                  processes=not job)
    every = list(range(cpus))
    if job:
        fr.processes.append(FakeProcess(
            9000, "stencil", ["./stencil", "2000", "2000"], 1000,
            "/system.slice/slurmstepd.scope/job_77/step_0/user/task_0", every,
            [FakeThread(9000 + c, "stencil", c) for c in every]))
    fr.processes += [FakeProcess(20000 + i, f"daemon{i}", [f"/usr/sbin/daemon{i}"], 0,
                                 "/system.slice/daemons.service", every,
                                 [FakeThread(20000 + i, f"daemon{i}", i % cpus,
                                             share=0.0)])
                     for i in range(others)]
    stop = threading.Event()
    busy = max(1, cpus // 4)

    def tick() -> None:
        k = 0
        while not stop.wait(0.25):
            k += 1
            first = (k * 7) % cpus
            fr.advance(0.25, busy={c: 1.0 for c in every} if job else
                       {c: 1.0 for c in range(first, min(cpus, first + busy))})

    t = threading.Thread(target=tick, daemon=True)
    t.start()
    return fr.root, stop, t


def fake_384(tmp: Path) -> tuple[Path, threading.Event, threading.Thread]:
    """A 2-socket, 8-node, 384-PU fake tree (see fake_tree)."""
    return fake_tree(tmp, 384, nodes=8, packages=2)


def main() -> int:
    ap = argparse.ArgumentParser(description="CPU cost of snumap top vs htop, btop, glances")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--only-snumap", action="store_true",
                    help="only snumap top's two views (quick check; does not write the section)")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is needed", file=sys.stderr)
        return 2
    # The bytecode an installed package has (pip compiles it; an editable install on its
    # first run), so that the first frames are not timing the compiler.
    import compileall

    compileall.compile_dir(str(REPO / "snumap_tui"), quiet=1)
    with tempfile.TemporaryDirectory(prefix="snumap-bench-") as d:
        tmp = Path(d)
        (tmp / "btop").mkdir()
        (tmp / "btop" / "btop.conf").write_text("update_ms = 1000\n")
        root384, stop384, ticker = fake_384(tmp)
        try:
            used, wall, tools, ff, ff384 = measure(args, tmp, root384)
        finally:
            stop384.set()
            ticker.join()        # before the tree is deleted
    return report(args, used, wall, tools, ff, ff384)


def measure(args: argparse.Namespace, tmp: Path, root384: Path
            ) -> tuple[dict[str, float], float, dict[str, tuple[str, dict[str, str], str]],
                       float, float]:
    """Start every tool, let them run for --seconds, and return the CPU seconds each used."""
    ff = ff384 = float("nan")
    # label -> (command, environment, keys typed once it has drawn)
    tools: dict[str, tuple[str, dict[str, str], str]] = {
        "snumap top": (SNUMAP, {}, ""),
        "snumap top, processes view": (SNUMAP, {}, "3"),
    }
    if not args.only_snumap:
        tools["snumap top, 384-PU fake tree"] = (f"{SNUMAP} --fsroot {root384}", {}, "")
        if shutil.which("htop"):
            tools["htop"] = ("htop -d 10", {}, "")
        if shutil.which("btop"):
            tools["btop"] = ("btop", {"XDG_CONFIG_HOME": str(tmp)}, "")
        gl = glances_cmd(tmp)
        if gl:
            tools["glances"] = (gl, {}, "")
        floor = f"{sys.executable} {REPO / 'bench' / 'textual_floor.py'}"
        tools[FLOOR_1] = (f"{floor} --lines 1", {}, "")
        tools[FLOOR_40] = (f"{floor} --lines 40", {}, "")
        tools[FLOOR_TOP] = (f"{floor} --lines 6 --read-proc", {}, "")
        # Time to first frame first, while the machine is otherwise quiet; htop and btop in
        # the same run (htop's CPU meter row "0[", btop's CPU meter in its cpu box).
        ff = statistics.median(first_frame_s(SNUMAP) for _ in range(3))
        ff384 = statistics.median(first_frame_s(tools["snumap top, 384-PU fake tree"][0])
                                  for _ in range(3))
        for peer, marker in (("htop", "0["), ("btop", "│CPU ")):
            if peer in tools:
                cmd, env, _ = tools[peer]
                PEER_FF[peer] = statistics.median(first_frame_s(cmd, marker, env)
                                                  for _ in range(3))
    sessions = {label: spawn(cmd, env, keys) for label, (cmd, env, keys) in tools.items()}
    try:
        time.sleep(3.0)                         # start-up is not steady state
        pids = {label: pane_pid(s) for label, s in sessions.items()}
        t0 = time.monotonic()
        start = {label: cpu_ticks(p) for label, p in pids.items()}
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        used = {label: (cpu_ticks(p) - start[label]) / HZ for label, p in pids.items()}
    finally:
        for s in sessions.values():
            kill(s)
    return used, wall, tools, ff, ff384


def report(args: argparse.Namespace, used: dict[str, float], wall: float,
           tools: dict[str, tuple[str, dict[str, str], str]], ff: float, ff384: float) -> int:
    """Print the table (and write the section, for a full run)."""
    pct = {label: 100 * u / wall for label, u in used.items()}
    base = pct.get("htop") or 0.0
    rows = []
    for label in tools:
        ratio = "1" if label == "htop" else (f"{pct[label] / base:.2f}" if base else "n/a")
        rows.append([label, f"{pct[label]:.2f} %", ratio])
    if args.only_snumap:
        print("\n".join(f"{r[0]}: {r[1]}" for r in rows))
        return 0
    if "glances" not in tools:
        rows.append(["glances", "skipped (pip install failed)", ""])
    load = os.getloadavg()
    peers = "".join(f", {p} {t:.2f} s" for p, t in PEER_FF.items())
    body = (f"CPU time of each process over {wall:.0f} s at a 1 s refresh, all running at once "
            "in tmux (120x40, xterm-256color), as % of one core; ratio = tool / htop. "
            f"Load average when the run ended: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
            "(the machine is shared).\n\n"
            + table(["tool", "CPU (% of one core)", "ratio to htop"], rows)
            + "\nTime from start to first frame (median of 3): `snumap top` "
            f"{ff:.2f} s on this machine, {ff384:.2f} s on the 384-PU fake tree{peers}.\n\n"
            "Targets (issue 15): default view <= 1.0 x htop, processes view <= 1.2 x htop, "
            "first frame <= 0.25 s; <= 3 % of a core at 384 PUs.\n\n"
            "The floor rows are `bench/textual_floor.py`: a Textual app with snumap's quiet "
            "driver that repaints 1, 40 or 6 rows of its screen once a second from Strips it "
            "made (Textual's cheapest way to draw); the first two read nothing, the third "
            "also reads what htop's default screen needs (/proc/stat, /proc/meminfo, "
            "/proc/loadavg, every process's stat and statm) and shows a few numbers from it "
            "-- the least a live top in Python on Textual does. snumap top's default view "
            "repaints 14-24 rows a second on this machine at 160x50 (the tree's rows whose "
            "figures changed, the busiest processes, the history line; counted at Textual's "
            "compositor on 2026-11-29), its process list read every frame while it is "
            "shown.\n")
    print(body)
    write_section("top_cpu", "snumap top: CPU cost next to htop, btop and glances", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
