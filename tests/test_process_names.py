"""How processes are named and listed: the COMMAND column (the program and its script by
name, not an interpreter's path; still there at 50 columns), `top --batch` listing the
processes the live view lists (no kernel threads), and a recording naming a process by its
main thread even when only its other threads ran."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snumap_tui.cli import main
from snumap_tui.trace.tasks import TaskTable
from snumap_tui.ui.app import MIN_W, TopApp
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.hostinfo import HostInfo
from snumap_tui.ui.process_table import HEAD_ROWS, ProcessTable
from snumap_tui.ui.processes import command_label
from snumap_tui.ui.table_lines import MIN_COMMAND, task_columns, widths

PY = sys.executable
PF_KTHREAD = 0x00200000


def test_command_label() -> None:
    assert command_label("/home/u/venv/bin/python3 /tmp/x/train.py --lr 1", "python3") == \
        "python3 train.py --lr 1"
    assert command_label("/usr/bin/python3 -u /srv/app/serve.py", "python3") == \
        "python3 -u serve.py"
    assert command_label("python3 -m http.server 8000", "python3") == \
        "python3 -m http.server 8000"
    assert command_label("/bin/bash /opt/jobs/run.sh a/b", "bash") == "bash run.sh a/b"
    assert command_label("/opt/app/bin/solver --mesh /data/big.h5", "solver") == \
        "solver --mesh /data/big.h5"             # not an interpreter: its arguments as given
    assert command_label(None, "kworker/0:1") == "kworker/0:1"
    assert command_label("", "kthreadd") == "kthreadd"


def test_command_column_at_every_width() -> None:
    """COMMAND is the last column and keeps MIN_COMMAND columns down to the narrowest
    terminal the views accept; the row never runs past the terminal's edge."""
    for w in range(MIN_W, 260):
        cols = task_columns(w)
        ws = widths(cols, w)
        assert cols[-1].label == "COMMAND", w
        assert ws[-1] >= MIN_COMMAND, (w, [c.label for c in cols], ws)
        assert sum(ws) + len(ws) == w, w


def test_the_live_view_at_50_columns_shows_commands() -> None:
    topo = synthetic_topology(2, 2, 2, 4, 2)

    async def body() -> None:
        app = TopApp(topo, host=lambda: HostInfo("h", "k", "cpu"))
        async with app.run_test(size=(MIN_W, 30)) as pilot:
            for s in range(2):
                app.push_frame(demo_frame(topo, s))
            await pilot.press("3")
            await pilot.pause()
            table = app.query_one("#proc-table", ProcessTable)
            assert [c.label for c in table.cols][-1] == "COMMAND"
            head = "".join(s.text for s in table.render_line(HEAD_ROWS - 1))
            assert "COMMAND" in head, head
            row = "".join(s.text for s in table.render_line(HEAD_ROWS))
            command = table.get_row_at(0)[-1]
            assert command[:8] in row, (row, command)

    asyncio.run(body())


def _kernel_thread(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return bool(int(stat[stat.rfind(b")") + 2:].split()[6]) & PF_KTHREAD)


def _batch_rows(capsys: pytest.CaptureFixture[str], *extra: str) -> list[list[str]]:
    assert main(["top", "--batch", "--count", "1", "--interval", "200ms", *extra]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["PID", "USER"])
    return [ln.split() for ln in lines[head + 1:] if ln.strip()]


def test_batch_lists_no_kernel_threads(capsys: pytest.CaptureFixture[str]) -> None:
    """As the live view starts (htop's K hides them): a list of idle kernel threads after
    the few busy processes said nothing."""
    if not _kernel_thread(2):
        pytest.skip("no kernel thread visible here (pid 2 is not kthreadd)")
    rows = _batch_rows(capsys, "--tasks", "1000")
    assert rows
    kernel = [r for r in rows if _kernel_thread(int(r[0]))]
    assert not kernel, kernel[:5]


def test_batch_names_a_script_not_its_interpreter_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "named.py"
    script.write_text("import time\ntime.sleep(30)\n")
    p = subprocess.Popen([PY, str(script)])
    try:
        time.sleep(0.3)
        rows = _batch_rows(capsys, "-p", str(p.pid))
    finally:
        p.kill()
        p.wait()
    row = next(r for r in rows if r[0] == str(p.pid))
    assert row[-2:] == [Path(PY).name, script.name], row


# ---- the name a recording gives a process --------------------------------------------------

def test_the_main_thread_names_the_process(tmp_path: Path) -> None:
    """tid 11 of process 10 seen first: the process's main thread is asked too."""
    for tid, name in ((10, "process_api"), (11, "tokio-rt-worker")):
        d = tmp_path / str(tid)
        d.mkdir()
        (d / "status").write_text(f"Name:\t{name}\nTgid:\t10\nPPid:\t1\n")
    tasks = TaskTable(tmp_path)
    tasks.lookup_live([11])
    names = {i.tid: (i.pid, i.comm) for i in tasks.take_infos()}
    assert names == {11: (10, "tokio-rt-worker"), 10: (10, "process_api")}


# The main thread (renamed "mainproc") sleeps; a worker thread (renamed "busyworker") burns.
WORKERS = r"""
import ctypes, threading, time
prctl = ctypes.CDLL(None).prctl
prctl(15, b"mainproc", 0, 0, 0)
def burn():
    prctl(15, b"busyworker", 0, 0, 0)
    end = time.monotonic() + 8
    while time.monotonic() < end:
        pass
threading.Thread(target=burn, daemon=True).start()
time.sleep(8)
"""


def test_a_recording_names_a_process_by_its_main_thread(tmp_path: Path) -> None:
    p = subprocess.Popen([PY, "-c", WORKERS])
    try:
        time.sleep(0.5)
        rec = tmp_path / "sw.rec"
        r = subprocess.run([PY, "-m", "snumap_tui.cli", "record", "-o", str(rec), "--duration",
                            "1"], capture_output=True, text=True, check=False, timeout=60)
    finally:
        p.kill()
        p.wait()
    assert r.returncode == 0, r.stderr
    out = subprocess.run([PY, "-m", "snumap_tui.cli", "report", "--json", str(rec)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    report = json.loads(out)
    procs = {q["pid"]: q for q in report["processes"]}
    assert procs[p.pid]["comm"] == "mainproc", procs[p.pid]
