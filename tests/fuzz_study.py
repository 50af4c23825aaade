"""Fuzzing study directories (issue 30): ``manifest.json``, the run files ``runs/ID.json`` and
the frequency restore files of a `snumap scale` study, crafted as another user would craft
them. Every case must end in data or one ``snumap:`` line, within CASE_SECONDS and the
harness's memory limit -- never a traceback or a hang.

Seeds are synthetic studies (study/synth.py: with counters and memory figures, two
placements, numeric inputs, repeats) and, where this machine can record, a real one of
`true`, so every field a run writes is there. A case
changes one file of a copy of a seed:

- one to three fields, chosen evenly among every place in the file, dropped or swapped for
  another type or an extreme (0, -1, 2^64, 1e308, ``NaN``, ``Infinity``, ``1e999``, a string,
  a list, a map, 3,000-deep nesting, a lone surrogate, 70,000 characters);
- a structure-aware JSON edit (tests/fuzz_inputs.py: a random walk to one value, changed as
  above or flooded), or a textual edit (a cut, a number swapped for a JSON constant, an odd
  byte);
- nesting 100,000 deep, a 17 MB file, an empty one;
- the file replaced by a FIFO, a symbolic link (to /dev/zero, to another file, dangling), a
  directory, or removed.

Then each reader: `scale report` (text, ``--json``, ``--metric ipc``), the view's content
(headless: the diagrams, tables and model lines `scale view` draws), `scale export`
(json, csv, parquet), ``--extrap``, and a resume (the study opened to be run, a restore file
applied on a fake sysfs tree, the manifest rebuilt, the pending runs found: everything
`snumap scale -o` does before its first run); ``--plot`` and `scale view --screenshot` (the
terminal UI drawn headless) every PLOT_EVERY cases (each takes a second or two).

    .venv/bin/python tests/fuzz_study.py --seconds 30 --seed 5
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import fuzz_harness as H
import fuzz_inputs as I

TARGETS = ("manifest", "run files", "restore files")
PLOT_EVERY = 15
SEED_STUDIES = {
    "figures": {"threads": [1, 2, 4], "serial": {"work": 0.1, "serial": 0.9}, "repeats": 2,
                "places": ["compact", "spread"], "figures": True},
    "inputs": {"threads": [1, 2, 4, 8], "serial": {"r": 0.3}, "repeats": 1,
               "sizes": [100.0, 200.0, 400.0]},
}


def make_seeds(work: Path) -> dict[str, Path]:
    """The synthetic studies, and one real study (`snumap scale -o S --threads 1,2 -- true`:
    every key a real run writes) where this machine can record."""
    import subprocess

    from snumap_tui.study.synth import make_study

    out = {}
    for name, kw in SEED_STUDIES.items():
        d = work / f"seed-{name}"
        make_study(d, **kw)       # type: ignore[arg-type]
        out[name] = d
    real = work / "seed-real"
    p = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "scale", "-o", str(real),
                        "--threads", "1,2", "--", "true"], capture_output=True, text=True,
                       timeout=120, check=False, cwd=REPO)
    if p.returncode == 0:
        out["real"] = real
    else:
        print(f"no real seed study: {p.stderr.strip().splitlines()[-1:]}")
    return out


def restore_record(root: Path) -> dict[str, Any]:
    """A restore file as a killed study leaves it (this host, this boot, a pid that is gone),
    for the fake sysfs tree ROOT."""
    import socket

    from snumap_tui.study.freq import RESTORE_FORMAT, boot_id

    return {"format": RESTORE_FORMAT, "host": socket.gethostname(), "boot_id": boot_id(),
            "pid": 2**22 + 7, "cpus": {c.parent.name: {"scaling_governor": "performance",
                                                       "scaling_min_freq": "800000",
                                                       "scaling_max_freq": "3000000"}
                                       for c in sorted(root.glob("cpu*/cpufreq"))}}


def fake_sysfs(root: Path) -> Path:
    for i in range(2):
        d = root / f"cpu{i}" / "cpufreq"
        d.mkdir(parents=True)
        for name, v in (("cpuinfo_min_freq", "800000"), ("cpuinfo_max_freq", "3000000"),
                        ("scaling_min_freq", "800000"), ("scaling_max_freq", "3000000"),
                        ("scaling_governor", "powersave")):
            (d / name).write_text(v)
    return root


# ---- cases -------------------------------------------------------------------------------------
def replace_file(f: Path, r: random.Random, other: Path) -> str:
    """F replaced by something that is not a JSON file snumap wrote."""
    what = r.choice(["fifo", "link /dev/zero", "link elsewhere", "dangling link", "dir",
                     "gone", "huge", "empty", "deep"])
    if f.is_dir() and not f.is_symlink():
        shutil.rmtree(f)
    elif f.exists() or f.is_symlink():
        f.unlink()
    if what == "fifo":
        os.mkfifo(f)
    elif what == "link /dev/zero":
        f.symlink_to("/dev/zero")
    elif what == "link elsewhere":
        f.symlink_to(other)
    elif what == "dangling link":
        f.symlink_to(f.parent / "nowhere")
    elif what == "dir":
        f.mkdir()
    elif what == "huge":
        f.write_bytes(b" " * (17 << 20))
    elif what == "empty":
        f.write_bytes(b"")
    elif what == "deep":
        f.write_text("[" * 100_000 + "]" * 100_000)
    return what


# What a field may be swapped for: other types, extremes, JSON that is no number.
SWAPS: list[Any] = [None, True, 0, -1, 1.5, 1e308, -1e308, 2**64, "", "abc", "0", [], {},
                    [1, "x"], {"a": 1}, I.Raw("NaN"), I.Raw("Infinity"), I.Raw("-Infinity"),
                    I.Raw("1e999"), I.Raw("[" * 3000 + "]" * 3000), "\udcff", "x" * 70_000]


def nodes(v: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in V (the paths to its values, containers included)."""
    out = [path]
    if isinstance(v, dict):
        for k, x in v.items():
            out += nodes(x, (*path, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += nodes(x, (*path, i))
    return out


def path_edit(v: Any, r: random.Random) -> tuple[Any, str]:
    """One place of V, chosen evenly among all, dropped or swapped for another type or an
    extreme (every field a reader uses is as likely as any other)."""
    path = r.choice(nodes(v)[1:] or [()])
    if not path:
        return r.choice(SWAPS), "whole value swapped"
    parent = v
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    if r.random() < 0.2:
        del parent[key]
        return v, f"dropped {'.'.join(map(str, path))[:80]}"
    parent[key] = r.choice(SWAPS)
    return v, f"swapped {'.'.join(map(str, path))[:80]}"


def edit_file(f: Path, value: Any, r: random.Random) -> str:
    p = r.random()
    if p < 0.5:
        labels = []
        for _ in range(r.choice([1, 1, 2, 3])):
            value, what = path_edit(value, r)
            labels.append(what)
        text = I.dumps(value)
        label = "; ".join(labels)
    elif p < 0.8:
        text = I.dumps(I.mutate_json(value, r))
        label = "json edit"
    else:
        text = I.text_edit(json.dumps(value, indent=1), r)
        label = "text edit"
    if f.is_symlink() or (f.exists() and not f.is_file()):
        f.unlink()
    f.write_bytes(text.encode("utf-8", "surrogatepass"))
    return label


def make_case(seed: Path, case: Path, sysfs: Path, r: random.Random) -> tuple[str, str]:
    """CASE: a copy of SEED with one file changed; (target, what was done)."""
    if case.exists():
        shutil.rmtree(case)
    shutil.copytree(seed, case, symlinks=True)
    target = r.choices(TARGETS, weights=[4, 5, 2])[0]
    if target == "manifest":
        f = case / "manifest.json"
    elif target == "run files":
        f = r.choice(sorted((case / "runs").glob("*.json")))
    else:
        f = case / "freq-restore.json"
        f.write_text(json.dumps(restore_record(sysfs)))
        f.chmod(0o600)
    p = r.random()
    if p < 0.15:
        what = replace_file(f, r, seed / "manifest.json")
    elif p < 0.2:
        what = "untouched"
    else:
        what = edit_file(f, json.loads(f.read_text()), r)
        if target == "restore files":
            f.chmod(0o600)
    return target, f"{f.relative_to(case)}: {what}"


# ---- readers -----------------------------------------------------------------------------------
def view_content(study: Path) -> None:
    """What `scale view` draws, without a terminal: every region's diagram and table, and
    the model lines."""
    from snumap_tui.study import load
    from snumap_tui.study.plots import regions_of
    from snumap_tui.ui.scale_view import ScaleViewApp, diagram, model_lines, table

    data = load(study)
    rows = data.aggregated()
    lines = model_lines(data.report(None))
    for region in regions_of(rows):
        diagram(rows, region)
        table(rows, region)
    ScaleViewApp(rows, lines, title=str(study))


def resume(study: Path, seed_manifest: dict[str, Any], sysfs: Path) -> None:
    """What `snumap scale -o STUDY` does before its first run."""
    from snumap_tui.study import manifest as M
    from snumap_tui.study.freq import restore_leftover
    from snumap_tui.study.runner import Launch

    st, _resumed = M.create_or_resume(study, json.loads(json.dumps(seed_manifest)))
    Launch.of(seed_manifest)
    with M.flocked(st.dir / ".lock", f"study {st.dir}"):
        restore_leftover(st.dir, sysfs)
        st.save(keys=None)
        st.pending()


def operations(study: Path, out: Path, seed_manifest: dict[str, Any], sysfs: Path,
               plot: bool) -> list[tuple[str, Callable[[], str | None]]]:
    s = str(study)
    ops: list[tuple[str, Callable[[], str | None]]] = [
        ("report", lambda: H.cli(["scale", "report", s])),
        ("report --json", lambda: H.cli(["scale", "report", s, "--json"])),
        ("report --metric ipc", lambda: H.cli(["scale", "report", s, "--metric", "ipc"])),
        ("view", lambda: view_content(study)),
        ("export json", lambda: H.cli(["scale", "export", s, "--format", "json", "-o",
                                       str(out / "o.json"), "--force"])),
        ("export csv", lambda: H.cli(["scale", "export", s, "--format", "csv", "-o",
                                      str(out / "o.csv"), "--force"])),
        ("export parquet", lambda: H.cli(["scale", "export", s, "--format", "parquet", "-o",
                                          str(out / "o.parquet"), "--force"])),
        ("--extrap", lambda: H.cli(["scale", "report", s, "--extrap", str(out / "x.txt"),
                                    "--force"])),
        ("resume", lambda: resume(study, seed_manifest, sysfs)),
    ]
    if plot:
        ops.append(("--plot", lambda: H.cli(["scale", "report", s, "--plot",
                                             str(out / "plots"), "--force"])))
        ops.append(("view --screenshot", lambda: H.cli(["scale", "view", s, "--screenshot",
                                                        str(out / "v.svg"), "--force"])))
    return ops


def fuzz_studies(seconds: float, seed: int, work: Path, tallies: dict[str, H.Tally]) -> None:
    r = random.Random(seed)
    seeds = make_seeds(work)
    manifests = {k: json.loads((v / "manifest.json").read_text()) for k, v in seeds.items()}
    sysfs = fake_sysfs(work / "sys")
    out = work / "out"
    out.mkdir()
    base = H._rss_mib()
    for t in TARGETS:
        tallies.setdefault(t, H.Tally()).base_rss_mib = base
    names = sorted(seeds)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        name = r.choice(names)
        case = work / "case"
        target, what = make_case(seeds[name], case, sysfs, r)
        t = tallies[target]
        t.cases += 1
        n += 1
        for op, fn in operations(case, out, manifests[name], sysfs, n % PLOT_EVERY == 0):
            H.run_one(t, op, fn, f"{target} case {t.cases} ({name}: {what})")
        t.peak_rss_mib = max(t.peak_rss_mib, H._rss_mib())


def main(argv: list[str] | None = None) -> int:
    return H.targets_main(H.targets_parser(__doc__, 30, 5), argv, "snumap-fuzz-study", 15,
                          lambda args, work, tallies: fuzz_studies(args.seconds, args.seed,
                                                                   work, tallies))


if __name__ == "__main__":
    sys.exit(main())
