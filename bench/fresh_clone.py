"""The README's two commands, timed from a fresh clone of the committed HEAD.

Clones this repository into a temporary folder (with ../shared beside it, as CI has it), then
runs `bash scripts/setup.sh run topo` (the set-up, then a snumap command that prints and exits:
`snumap top` itself waits for a key) and `bash scripts/setup.sh test` (the set-up for the tests,
then the whole suite), each timed, and pytest's closing counts read from the output. The Debian
packages are the machine's: on a machine that already has them the set-up is the virtualenv and
the editable install only. Writes the `fresh_clone` section of docs/benchmarks.md.

    python3 bench/fresh_clone.py
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from _report import table, write_section


def timed(cmd: list[str], cwd: Path, log: Path) -> tuple[float, int, str]:
    """(seconds, exit status, the output's last 4 kB) of CMD in CWD; the whole output to LOG."""
    t0 = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, check=False).returncode
    return time.monotonic() - t0, rc, log.read_text()[-4096:]


def main() -> int:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout.strip()
    shared = REPO.parent / "shared"
    with tempfile.TemporaryDirectory(prefix="snumap-fresh-") as d:
        base = Path(d)
        # A clone others may enter, as a checkout normally is: the tests run the clone's
        # interpreter as an unprivileged user (tempfile's 0700 made that test fail).
        base.chmod(0o755)
        clone = base / "snumap"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        if shared.is_dir():
            (base / "shared").symlink_to(shared)
        run_s, run_rc, run_tail = timed(["bash", "scripts/setup.sh", "run", "topo"], clone,
                                        base / "run.log")
        test_s, test_rc, test_tail = timed(["bash", "scripts/setup.sh", "test"], clone,
                                           base / "test.log")
        failed = [ln for ln in (base / "test.log").read_text().splitlines()
                  if ln.startswith("FAILED ")]
    summary = re.findall(r"=+ (.*(?:passed|failed).*) in [\d.]+s", test_tail)
    topo = [ln for ln in run_tail.splitlines() if ln.startswith("Machine:")]
    rows = [["bash scripts/setup.sh run topo", f"{run_s:.0f}", str(run_rc),
             f"prints `{topo[0][:60]}`" if topo else (run_tail.strip().splitlines() or [""])[-1]],
            ["bash scripts/setup.sh test", f"{test_s:.0f}", str(test_rc),
             (summary[-1] if summary else "no pytest summary")
             + "".join(f"; {ln}" for ln in failed)]]
    body = (f"A fresh `git clone` of {head} into a temporary folder, with shared/ beside it; the "
            "machine's Debian packages already installed, so the set-up is the virtualenv and "
            "the editable install. `setup.sh run topo` stands for the README's first command "
            "(`setup.sh run` starts `snumap top`, which waits for a key; checked by hand in "
            "tmux).\n\n"
            + table(["command", "seconds", "exit", "result"], rows))
    print(body)
    write_section("fresh_clone", "The README's commands from a fresh clone", body)
    return 0 if run_rc == 0 and test_rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
