"""The observer stays small and out of the program's way (issue 29, items 1, 2, 6).

- a handful of threads (<= 4) in record, top and the exporter on a 384-PU fake node with
  ``os.cpu_count()`` faked to 384 (nothing sized by the PU count);
- the command is released only once the recorder is steady: the recording's own
  "recorder steady" info, its first sample and the command's exec event say so;
- the recorder's CPU time per recorded second of an idle recording is kept in the file,
  bounded, and printed by report (text and JSON) and record's last line;
- the numeric libraries' pools are pinned to one thread in snumap, and the traced command
  gets the user's values back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fakefs import FakeRoot

from snumap_tui import store, threadpools
from snumap_tui.analysis.recorder_cost import COST, STEADY, cost_line, recorder_cost
from snumap_tui.trace.events import EXEC

REPO = Path(__file__).resolve().parents[1]
SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
MAX_THREADS = 4

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="record needs root (tracing)")


def _fake_env(tmp: Path) -> dict[str, str]:
    """The environment of a snumap whose os.cpu_count() says 384 (a sitecustomize)."""
    site = tmp / "site384"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import os\nos.cpu_count = lambda: 384\n"
        "if hasattr(os, 'process_cpu_count'):\n    os.process_cpu_count = lambda: 384\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO), env.get("PYTHONPATH", "")])
    for k in threadpools.PINNED:
        env.pop(k, None)            # as a user's shell has them: snumap must pin its own
    return env


@pytest.fixture(scope="module")
def node384(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return FakeRoot(tmp_path_factory.mktemp("node384"), cpus=384, nodes=8, packages=2).root


def _peak_threads(p: subprocess.Popen[str], seconds: float) -> int:
    """The most threads P had, polled every 20 ms for SECONDS or until it ends."""
    peak = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end and p.poll() is None:
        try:
            peak = max(peak, len(os.listdir(f"/proc/{p.pid}/task")))
        except OSError:
            break
        time.sleep(0.02)
    return peak


def test_the_fake_cpu_count_reaches_snumap(tmp_path: Path) -> None:
    env = _fake_env(tmp_path)
    out = subprocess.run([sys.executable, "-c", "import os; print(os.cpu_count())"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "384"


def test_exporter_threads_on_384_pus(tmp_path: Path, node384: Path) -> None:
    tf = tmp_path / "tf"
    tf.mkdir()
    p = subprocess.Popen([*SNUMAP, "exporter", "--fsroot", str(node384), "--textfile",
                          str(tf), "--interval", "0.1s"], env=_fake_env(tmp_path),
                         stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        peak = _peak_threads(p, 4.0)
        assert (tf / "snumap.prom").exists(), "the exporter never wrote"
        assert p.poll() is None, p.stderr.read() if p.stderr else ""
    finally:
        p.terminate()
        p.wait(10)
    assert 1 <= peak <= MAX_THREADS, peak


def test_exporter_served_and_scraped_threads_on_384_pus(tmp_path: Path, node384: Path) -> None:
    """Serving /metrics: the server thread and one handler while Prometheus scrapes."""
    import socket
    import urllib.request

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    p = subprocess.Popen([*SNUMAP, "exporter", "--fsroot", str(node384), "--listen",
                          f"127.0.0.1:{port}", "--interval", "0.1s"], env=_fake_env(tmp_path),
                         stderr=subprocess.PIPE, text=True, cwd=REPO)
    peak, got = 0, b""
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and not got:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    got = r.read()
            except OSError:
                time.sleep(0.2)
        peak = max(_peak_threads(p, 1.0), len(os.listdir(f"/proc/{p.pid}/task")))
        for _ in range(3):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                r.read()
            peak = max(peak, len(os.listdir(f"/proc/{p.pid}/task")))
    finally:
        p.terminate()
        p.wait(10)
    assert b"snumap_exporter_sweeps_total" in got
    assert 1 <= peak <= MAX_THREADS, peak


def test_top_batch_threads_on_384_pus(tmp_path: Path, node384: Path) -> None:
    p = subprocess.Popen([*SNUMAP, "top", "--batch", "--fsroot", str(node384), "--interval",
                          "0.2s", "--count", "6"], env=_fake_env(tmp_path),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    peak = _peak_threads(p, 30.0)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "Machine" in out or "PU" in out
    assert 1 <= peak <= MAX_THREADS, peak


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_top_app_threads_on_384_pus(tmp_path: Path, node384: Path) -> None:
    """The Textual app (driver threads and all) in a real terminal, on its own tmux socket."""
    sock = f"snumap-test-{uuid.uuid4().hex[:8]}"
    env = _fake_env(tmp_path)
    exports = " ".join(f"{k}='{v}'" for k, v in env.items() if k in ("PYTHONPATH",))
    cmd = (f"cd {REPO} && unset COLUMNS LINES && export TERM=xterm-256color {exports} && "
           f"exec {sys.executable} -m snumap_tui.cli top --fsroot {node384} --interval 0.2s")
    tmux = ["tmux", "-L", sock]
    try:
        subprocess.run([*tmux, "new-session", "-d", "-s", "t", "-x", "120", "-y", "40", cmd],
                       check=True, timeout=10, env={k: v for k, v in os.environ.items()
                                                    if k != "TMUX"})
        pid = int(subprocess.run([*tmux, "list-panes", "-t", "t", "-F", "#{pane_pid}"],
                                 capture_output=True, text=True, check=True).stdout.split()[0])
        peak, drawn = 0, False
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                peak = max(peak, len(os.listdir(f"/proc/{pid}/task")))
            except OSError:
                break
            if not drawn:
                screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "t"],
                                        capture_output=True, text=True, check=False).stdout
                if "Machine" in screen and "PU" in screen:
                    drawn, end = True, time.monotonic() + 3   # a few redraws more
            time.sleep(0.05)
        assert drawn, "top never drew the 384-PU machine"
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)
    assert 1 <= peak <= MAX_THREADS, peak


@needs_root
def test_record_threads_on_384_pus_and_steady_before_the_command(tmp_path: Path,
                                                                   node384: Path) -> None:
    out = tmp_path / "r.rec"
    p = subprocess.Popen([*SNUMAP, "record", "-o", str(out), "--fsroot", str(node384),
                          "--", "sh", "-c", "sleep 2"], env=_fake_env(tmp_path),
                         stderr=subprocess.PIPE, text=True, cwd=REPO)
    peak = _peak_threads(p, 60.0)
    err = p.communicate(timeout=60)[1]
    assert p.returncode == 0, err
    assert 1 <= peak <= MAX_THREADS, peak
    rec = store.open(out)
    cost = next(i for i in rec.infos if i["what"] == COST)
    assert 1 <= cost["threads"] <= MAX_THREADS
    _assert_steady_first(rec)


def _assert_steady_first(rec: store.Recording) -> None:
    """The recorder's last set-up step ends before the command's first instruction."""
    steady = next(i for i in rec.infos if i["what"] == STEADY)
    names = [n for n, _ in steady["steps"]]
    assert names[-3:] == ["first sample", "warm-up", "heap frozen"], names
    assert all(t <= steady["t_ns"] for _, t in steady["steps"])
    assert int(rec.sample_times[0]) < steady["t_ns"]     # the first /proc sweep, before
    ev = rec.events()
    pid = next(int(e["pid"]) for e in ev[ev["kind"] == EXEC])
    first = ev[(ev["pid"] == pid) & (ev["kind"] == EXEC)]
    assert len(first) and int(first["t_ns"].min()) > steady["t_ns"]
    start = [t for t, text in rec.markers if text.startswith("command start")]
    assert start and start[0] >= steady["t_ns"]


@needs_root
def test_idle_recording_keeps_and_bounds_its_own_cost(tmp_path: Path) -> None:
    out = tmp_path / "idle.rec"
    done = subprocess.run([*SNUMAP, "record", "-o", str(out), "--interval", "100ms", "--",
                           "sleep", "5"], capture_output=True, text=True, cwd=REPO,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "recorder " in last and "% of a core" in last and "threads" in last, last
    rec = store.open(out)
    _assert_steady_first(rec)
    # Every task of the node once, in the first sample (before the command); then only the
    # traced tree's, one row per process.
    tasks = [smp.readings["tasks"] for smp in rec.samples() if "tasks" in smp.readings]
    assert len(tasks) > 40 and tasks[0].get("partial") is None
    assert all(t.get("partial") is not None and t.get("folded") for t in tasks[1:])
    c = recorder_cost(rec.infos)
    assert c is not None
    assert 4.9 < c["recorded_s"] < 6.0
    assert c["cpu_s"] > 0 and c["rss_peak_bytes"] > 10 << 20 and c["lost"] == 0
    # Generous (an idle recorder here takes ~2-6 % of one core: the 100 ms sampler, the
    # 10 ms drains), yet a busy-waiting thread or a pool spinning after each call (a core,
    # or ~50 %) breaks it; a sweep of every task is caught by the rows above.
    assert c["cpu_pct"] < 12.0, c
    assert c["threads"] <= MAX_THREADS
    assert any(k.startswith("main: sampling") for k in c["cpu_by_s"])
    assert any("snumap-drain" in k for k in c["cpu_by_s"])
    text = subprocess.run([*SNUMAP, "report", str(out)], capture_output=True, text=True,
                          check=True, cwd=REPO).stdout
    assert "Recorder (its own cost" in text and "% of one core" in text
    js = json.loads(subprocess.run([*SNUMAP, "report", "--json", str(out)],
                                   capture_output=True, text=True, check=True,
                                   cwd=REPO).stdout)
    assert js["recorder"]["cpu_pct"] == pytest.approx(c["cpu_pct"])
    assert js["recorder"]["steady_ns"] == c["steady_ns"]


@needs_root
def test_blas_variables_pinned_here_and_not_leaked_to_the_command(tmp_path: Path) -> None:
    seen = tmp_path / "env.txt"
    env = _fake_env(tmp_path)
    env["OMP_NUM_THREADS"] = "7"           # the user's, for their program
    code = ("import json, os, sys; open(sys.argv[1], 'w').write(json.dumps({k: "
            f"os.environ.get(k) for k in {threadpools.PINNED!r}}}))")
    done = subprocess.run([*SNUMAP, "record", "-o", str(tmp_path / "e.rec"), "--regions",
                           "none", "--", sys.executable, "-c", code, str(seen)], env=env,
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    got = json.loads(seen.read_text())
    assert got["OMP_NUM_THREADS"] == "7"
    assert all(got[k] is None for k in threadpools.PINNED if k != "OMP_NUM_THREADS"), got


def test_pin_keeps_the_users_values_for_the_programs_snumap_starts() -> None:
    code = ("import os\nos.environ['OMP_NUM_THREADS'] = '9'\n"
            "os.environ.pop('OPENBLAS_NUM_THREADS', None)\n"
            "from snumap_tui import cli, threadpools\n"
            "import numpy\n"
            "u = threadpools.user_environ()\n"
            "print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['OMP_NUM_THREADS'], "
            "u.get('OPENBLAS_NUM_THREADS'), u['OMP_NUM_THREADS'])\n"
            "print(len(os.listdir('/proc/self/task')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout.split("\n")
    assert out[0].split() == ["1", "1", "None", "9"]
    assert int(out[1]) == 1          # numpy loaded, and no BLAS pool beside the main thread


def test_old_recordings_have_no_recorder_section() -> None:
    assert recorder_cost([{"what": "clock end", "t_ns": 5}]) is None
    assert cost_line(None) == ""


def test_a_recording_of_a_command_reads_one_row_per_process(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """Its own threads from the switch events, not from /proc/PID/task: a process of four
    threads is one row (its CPU time), with its thread count."""
    from snumap_tui.model.taskrows import derive_tasks
    from snumap_tui.sources.tasks import TasksSource

    code = ("import threading, time\n"
            "for _ in range(3): threading.Thread(target=time.sleep, args=(30,)).start()\n"
            "print('ready', flush=True)\ntime.sleep(30)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        src = TasksSource(Path("/"))
        src.per_thread = False
        src.set_cadence(float("inf"), {p.pid})
        monkeypatch.setattr(TasksSource, "_thread_rows",
                            lambda *_a: pytest.fail("task/ read"))   # never, folded
        full = src.read()
        part = src.read()
        assert full["folded"] and part["folded"] and part["partial"] == [p.pid]
        assert "partial" not in full and len(full["processes"]) > 1   # the node, once
        tids = [int(t) for t, q in zip(part["threads"]["tid"], part["threads"]["pid"])
                if int(q) == p.pid]
        assert tids == [p.pid]
        assert part["processes"][p.pid]["nthreads"] == 4
        rows = derive_tasks(full, part, 0.1)
        row = next(r for r in rows if r.pid == p.pid)
        assert row.nthreads == 4
    finally:
        p.kill()
        p.wait()


def test_a_crafted_recorder_cost_is_refused_by_its_schema(tmp_path: Path) -> None:
    from snumap_tui.store import Writer

    path = tmp_path / "c.rec"
    w = Writer(path, {"topology": None})
    w.add_info(10, STEADY, {"steps": [["sources", 5], ["warm-up", 9]]})
    w.add_info(20, COST, {"recorded_ns": 10, "cpu_ns": -5, "cpu_by": {"main: x": 1}})
    w.add_info(30, COST, {"recorded_ns": 10, "cpu_ns": 1, "threads": 3, "cpu_by": {"x": "y"}})
    w.close()
    rec = store.open(path)
    assert [i["what"] for i in rec.infos] == [STEADY]
    assert sum("info" in d for d in rec.damaged) == 2, rec.damaged
    assert recorder_cost(rec.infos) == {"steady_ns": 10,
                                        "setup_steps": [["sources", 5], ["warm-up", 9]]}


def test_the_benchmark_driver_says_a_missing_part_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(REPO / "bench"))
    import observer

    monkeypatch.setitem(observer.OTHERS, "zz", "observer_not_written")
    assert observer.main(["zz"]) == 2
    assert capsys.readouterr().out.strip() == \
        "observer zz: bench/observer_not_written.py is not there (yet)"
    assert observer.main(["nope"]) == 2
    assert observer.program_seconds("threads 16\n1.2345\n") == pytest.approx(1.2345)


def test_a_guest_ring_is_drained_by_the_hosts_thread_at_its_own_pace() -> None:
    """The region probes' ring rides on the scheduling tracer's drain thread: no thread of
    its own, drained every 10 ms while the host's own (empty) rings back off; what is left
    at its stop is drained there, and the host no longer touches it."""
    import threading

    import numpy as np

    from snumap_tui.recording.runtime import Drainer

    class Ring:
        def __init__(self, records: int = 0) -> None:
            self.calls = 0
            self.records = records

        def drain(self) -> np.ndarray:
            self.calls += 1
            n, self.records = min(self.records, 3), max(0, self.records - 3)
            return np.zeros(n, dtype=np.uint64)

        def drain_capped(self) -> bool:
            return False

    before = threading.active_count()
    host_ring, guest_ring = Ring(), Ring(records=4)
    host = Drainer(host_ring, idle_s=0.08)
    guest = Drainer(guest_ring, idle_s=Drainer.DRAIN_S, host=host)
    try:
        assert host.threaded and not guest.threaded
        assert threading.active_count() == before + 1
        time.sleep(0.5)
        got = sum(len(r) for r in guest.take())
        assert got == 4
        # ~50 wakes in 0.5 s for the guest; the host's own empty rings backed off to 80 ms
        assert guest_ring.calls >= 20 and host_ring.calls <= guest_ring.calls // 3
        guest_ring.records = 2
        left = sum(len(r) for r in guest.stop())
        calls = guest_ring.calls
        time.sleep(0.1)
        assert left == 2 and guest_ring.calls == calls     # stopped: the host lets go
    finally:
        host.stop()
    assert threading.active_count() == before


def test_the_report_says_what_each_set_up_step_took_not_a_raw_timestamp() -> None:
    """Seen in a first-day try: "Steady at 4650101169327 ns (monotonic)" meant nothing."""
    from snumap_tui.analysis.recorder_cost import format_recorder_cost

    steps = [["sources", 4_675_109_223_118], ["tracer", 4_675_250_074_606],
             ["region probes", 4_675_698_448_595], ["warm-up", 4_675_737_353_751]]
    text = " ".join(x.strip() for x in format_recorder_cost(
        {"recorder": {"steady_ns": 4_675_737_560_007, "setup_steps": steps}}))
    assert "(monotonic)" not in text and "4675737560007" not in text
    assert "Set-up after sources, until steady (0.628 s): tracer 0.141 s, region probes " \
        "0.448 s, warm-up 0.039 s." in text
