"""snumap as a user gets it: the built wheel, not the editable checkout.

The wheel is built offline from a copy of the sources (tests/wheelhouse.py, as
tests/test_user_install.py does), installed with ``pip install --no-index --find-links`` into a
fresh virtualenv with only the extras ``bash scripts/setup.sh run`` installs (read from the
script), and every subcommand runs once on real data from that venv's ``snumap``: topo, probe,
top --batch, record of an OpenMP program compiled here (its regions in the report), replay
--screenshot, report (text and JSON), export in every format, merge of two nodes' recordings
the exporter (one scrape) and a two-run `scale` study (report with models, plots, Extra-P
file, view screenshot). The commands and their trimmed output are written to
``transcript.txt`` in the test's tmp dir.

Cost: 65 s on the 2-CPU VM at a load of 6.6 (wheelhouse 8 s, venv and install 29 s, the 18
commands 27 s); it needs root (uprobes for the regions, a UTS namespace for the second node's
name).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import wheelhouse
from tests.test_regions_programs import OMP_SRC, _compile, needs_uprobes

REPO = Path(__file__).resolve().parents[1]
# Directories at the top of the repository that ship inside snumap_tui (setup.py's MAPPED).
MAPPED = {"native": "snumap_tui/native", "bpf": "snumap_tui/bpf"}


def setup_run_extras() -> tuple[str, ...]:
    """The extras `setup.sh run` installs everywhere (gpu only where the NVIDIA driver is)."""
    text = (REPO / "scripts" / "setup.sh").read_text()
    found = re.search(r'^run_extras="([a-z,]+)"$', text, re.MULTILINE)
    assert found, "scripts/setup.sh has no run_extras= line"
    return tuple(found.group(1).split(","))


def test_readme_setup_and_pyproject_agree_on_the_install() -> None:
    """README's first commands are setup.sh's two; its cluster installs name setup.sh run's
    extras (and hwloc, the library root would have installed); each is a pyproject extra."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    readme = (REPO / "README.md").read_text()
    first = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in first.splitlines()] == [
        "bash scripts/setup.sh run", "bash scripts/setup.sh test"]
    cluster = readme.split("## On a cluster, without root", 1)[1].split("\n## ", 1)[0]
    installs = re.findall(r"pip install '\./snumap\[([a-z,]+)\]'", cluster)
    assert len(installs) == 2
    for extras in installs:
        assert sorted(extras.split(",")) == sorted({*setup_run_extras(), "hwloc"})
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert {*setup_run_extras(), "hwloc", "gpu"} <= set(
        pyproject["project"]["optional-dependencies"])


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    wheelhouse.build(out, REPO, setup_run_extras())
    return out


def test_every_package_directory_is_in_the_wheel(wheels: Path) -> None:
    """Every module of snumap_tui/, native/ and bpf/ (with their subpackages) and their data
    files are in the wheel, native/ and bpf/ inside snumap_tui; nothing else at its top."""
    (whl,) = wheels.glob("snumap-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    want = set()
    for top, dest in (("snumap_tui", "snumap_tui"), *MAPPED.items()):
        for f in (REPO / top).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts and \
                    (f.suffix in (".py", ".tcss") or top == "bpf"):
                want.add(f"{dest}/{f.relative_to(REPO / top).as_posix()}")
    assert {"snumap_tui/exporter/__init__.py", "snumap_tui/native/hwloc.py",
            "snumap_tui/bpf/sched.bpf.o", "snumap_tui/ui/top.tcss"} <= want
    assert sorted(want - names) == []
    tops = {n.split("/")[0] for n in names}
    assert tops == {"snumap_tui", whl.name.split("-py3")[0] + ".dist-info"}


class User:
    """Runs the venv's commands in a scratch directory, as a user would (the venv's bin/
    first on PATH, no PYTHONPATH), and keeps a transcript."""

    def __init__(self, venv: Path, cwd: Path) -> None:
        self.venv, self.cwd = venv, cwd
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
        self.env.update(PATH=f"{venv}/bin:{os.environ.get('PATH', '/usr/bin:/bin')}",
                        COLUMNS="100")
        self.transcript: list[str] = []

    def shown(self, args: list[str]) -> str:
        text = shlex.join(args)
        return text.replace(f"{self.venv}/bin/", "").replace(f"{self.cwd}/", "")

    def log(self, args: list[str], rc: int | None, secs: float, out: str, err: str) -> None:
        self.transcript.append(f"$ {self.shown(args)}    # exit {rc}, {secs:.1f} s")
        lines = out.splitlines()
        self.transcript += [f"  {s[:100]}" for s in lines[:8]]
        if len(lines) > 8:
            self.transcript.append(f"  ... ({len(lines) - 8} more lines)")
        self.transcript += [f"  [stderr] {s[:100]}" for s in err.splitlines()[-4:]]

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """ARGS (a snumap subcommand unless it names another program); exit 0 or the test
        fails with its stderr."""
        argv = list(args) if args[0] not in ("snumap",) else [f"{self.venv}/bin/snumap",
                                                             *args[1:]]
        t0 = time.monotonic()
        r = subprocess.run(argv, cwd=self.cwd, env=self.env, capture_output=True, text=True,
                           timeout=timeout, check=False)
        self.log(argv, r.returncode, time.monotonic() - t0, r.stdout, r.stderr)
        assert r.returncode == 0, f"{self.shown(argv)}:\n{r.stderr[-3000:]}"
        return r


@pytest.fixture(scope="module")
def user(wheels: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[User]:
    base = tmp_path_factory.mktemp("wheel-user")
    venv, work = base / "venv", base / "work"
    work.mkdir()
    u = User(venv, work)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    spec = f"snumap[{','.join(setup_run_extras())}]"
    # --no-compile: bytecode is written as the commands import their modules instead.
    u.run(str(venv / "bin" / "pip"), "install", "-q", "--no-compile", "--no-index",
          "--find-links", str(wheels), spec, timeout=300)
    u.transcript.insert(0, f"$ python -m venv venv    # with the install: "
                           f"{time.monotonic() - t0:.1f} s")
    yield u
    (base / "transcript.txt").write_text("\n".join(u.transcript) + "\n")
    print(f"\nwheel test transcript: {base / 'transcript.txt'}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CPU_SECONDS = re.compile(r'^snumap_cpu_seconds_total\{.*mode="user".*\} [0-9.e+-]+$',
                         re.MULTILINE)


def scrape(url: str, proc: subprocess.Popen[str], seconds: float = 20) -> str:
    """The first answer of URL, while PROC (the exporter) runs, that has the CPU counters
    (absent until the first sweep has two samples to count from)."""
    end = time.monotonic() + seconds
    body = ""
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body = str(r.read().decode())
        except OSError:
            pass
        if CPU_SECONDS.search(body):
            return body
        time.sleep(0.2)
    raise AssertionError(f"{url}: no CPU counters in {seconds} s: {body[:2000]}")


def exporter_once(u: User) -> None:
    """Start the exporter on a free port, scrape once, stop it with SIGTERM (exit 0)."""
    port = free_port()
    argv = [f"{u.venv}/bin/snumap", "exporter", "--listen", f"127.0.0.1:{port}",
            "--interval", "250ms"]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=u.cwd, env=u.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        body = scrape(f"http://127.0.0.1:{port}/metrics", proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    lines = body.splitlines()
    u.log([*argv, "&", "GET", f"http://127.0.0.1:{port}/metrics", "&", "kill", "-TERM"],
          proc.returncode, time.monotonic() - t0,
          "\n".join([*lines[:2], *[s for s in lines if CPU_SECONDS.match(s)][:2],
                     f"... ({len(lines)} lines)"]), out + err)
    assert proc.returncode == 0, err
    assert re.search(r'^snumap_source_up\{source="procstat"\} 1', body, re.MULTILINE)


@needs_uprobes
def test_the_built_wheel_runs_every_command(user: User) -> None:
    u = user
    where = u.run(f"{u.venv}/bin/python", "-c", "import snumap_tui; print(snumap_tui.__file__)")
    assert where.stdout.startswith(f"{u.venv}/lib/"), where.stdout  # the wheel, not the checkout

    topo = u.run("snumap", "topo")
    assert topo.stdout.startswith("Machine:") and "PU" in topo.stdout
    probe = u.run("snumap", "probe")
    assert "\nRecording\n  record traces with " in probe.stdout
    plan = json.loads(u.run("snumap", "probe", "--json").stdout)["tracer"]
    top = u.run("snumap", "top", "--batch", "--count", "1")
    assert "Machine 0" in top.stdout and "PID" in top.stdout

    prog = _compile(["gcc", "-g", "-O1", "-fopenmp"], OMP_SRC % {"iter": 2, "work": 3},
                    u.cwd / "omp")
    rec = u.run("snumap", "record", "-o", "omp.rec", "--", str(prog))
    assert f"snumap: tracing with {plan['record']['tracer']}" in rec.stderr
    assert "libgomp" in rec.stderr and "pyelftools" not in rec.stderr
    assert "capstone" not in rec.stderr      # the regions extra brought it: probes moved
    report = json.loads(u.run("snumap", "report", "omp.rec", "--json").stdout)
    regions = {g["name"]: g for g in report["regions"]}
    assert any(n.startswith("main._omp_fn.") for n in regions), sorted(regions)
    assert regions["GOMP_barrier"]["count"] == 1
    text = u.run("snumap", "report", "omp.rec").stdout
    assert "Regions (by wall time" in text and "main._omp_fn." in text

    shot = u.run("snumap", "replay", "omp.rec", "--screenshot", "omp.svg")
    assert (u.cwd / "omp.svg").read_text().lstrip().startswith("<svg"), shot.stderr

    u.run("snumap", "export", "omp.rec", "--format", "perfetto", "-o", "omp.pftrace")
    assert (u.cwd / "omp.pftrace").stat().st_size > 1000
    u.run("snumap", "export", "omp.rec", "--format", "parquet", "-o", "omp.parquet")
    pq = pytest.importorskip("pyarrow.parquet")

    intervals = pq.read_table(u.cwd / "omp.parquet" / "intervals.parquet")
    assert intervals.num_rows > 0 and "numa_node" in intervals.column_names
    u.run("snumap", "export", "omp.rec", "--format", "chrome", "-o", "omp.trace.json")
    chrome = json.loads((u.cwd / "omp.trace.json").read_text())
    assert any(e.get("name", "").startswith("main._omp_fn.") for e in chrome["traceEvents"])
    u.run("snumap", "export", "omp.rec", "--format", "csv", "-o", "omp.csv")
    csv_lines = (u.cwd / "omp.csv").read_text().splitlines()
    assert len(csv_lines) > 1 and "tid" in csv_lines[0]

    # A second node: the same machine under another host name (a UTS namespace of its own).
    u.run("unshare", "--uts", "sh", "-c", 'hostname snumap-node-b && exec "$@"', "sh",
          f"{u.venv}/bin/snumap", "record", "-o", "b.rec", "--", "sleep", "0.2")
    merged = u.run("snumap", "merge", "omp.rec", "b.rec", "-o", "job.rec")
    assert "merged 2 node(s)" in merged.stderr
    job = json.loads(u.run("snumap", "report", "job.rec", "--json").stdout)
    assert job["host"].endswith("+snumap-node-b")

    exporter_once(u)

    study = u.run("snumap", "scale", "--threads", "1,2", "--repeat", "1", "-o", "study", "--",
                  str(prog), timeout=300)
    assert "2 runs recorded" in study.stderr, study.stderr
    rep = json.loads(u.run("snumap", "scale", "report", "study", "--json", "--plot", "plots",
                           "--extrap", "study.txt").stdout)
    assert rep["runs"]["ok"] == 2 and rep["models"]["available"]
    assert any(r["region"].startswith("main._omp_fn.") for r in rep["regions"])
    assert (u.cwd / "plots" / "speedup.svg").exists() and (u.cwd / "study.txt").exists()
    u.run("snumap", "scale", "view", "study", "--screenshot", "study.svg")
    assert (u.cwd / "study.svg").read_text().lstrip().startswith("<svg")
    # From inside the project's checkout (whose snumap_tui has no native/ of its own) the
    # study's children still run this installed snumap (issue 30 item 13).
    inside = subprocess.run([f"{u.venv}/bin/snumap", "scale", "--threads", "1", "-o",
                             str(u.cwd / "study-in-checkout"), "--", "true"], cwd=REPO,
                            env=u.env, capture_output=True, text=True, timeout=120,
                            check=False)
    u.log(["(in the checkout)", "snumap", "scale", "--threads", "1", "-o", "study-in-checkout",
           "--", "true"], inside.returncode, 0.0, inside.stdout, inside.stderr)
    assert inside.returncode == 0 and "1 runs recorded" in inside.stderr, inside.stderr
