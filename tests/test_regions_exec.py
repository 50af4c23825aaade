"""Regions of programs the command execs later: a shell's (``sh -c './a; ./b'``), under
``--system-wide -- CMD``, behind wrappers (time, env). On the eBPF path each new program's
process is held at its exec until the program is probed, so its first parallel region is
seen; wrappers without OpenMP get no warning. Real gcc -fopenmp programs, recorded as a user
would (helpers from test_regions_programs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.test_regions_programs import _by_name, _compile, _record, needs_uprobes

# One parallel region at once (the first thing main does), then REST more at another line:
# a probe attached after the program started misses the first.
PROG = r"""
#include <omp.h>
static volatile double sink;
static void spin(double ms) {
    double t0 = omp_get_wtime();
    while ((omp_get_wtime() - t0) * 1e3 < ms) sink += 1.0;
}
int main(void) {
    #pragma omp parallel num_threads(2)
    { spin(%(first)d); }
    for (int i = 0; i < %(rest)d; i++) {
        #pragma omp parallel num_threads(2)
        { spin(2); }
    }
    return 0;
}
"""


def _programs(tmp: Path) -> tuple[Path, Path]:
    a = _compile(["gcc", "-g", "-O1", "-fopenmp"], PROG % {"first": 5, "rest": 2}, tmp / "pa")
    b = _compile(["gcc", "-g", "-O1", "-fopenmp"], PROG % {"first": 5, "rest": 3}, tmp / "pb")
    return a, b


def _check(report: dict, err: str, progs: tuple[Path, ...]) -> None:
    regs = _by_name(report)
    for prog, rest in zip(progs, (2, 3)):
        src = f"{prog.name}.c"
        first = [g for n, g in regs.items() if n.startswith("main._omp_fn.0") and src in n]
        loop = [g for n, g in regs.items() if n.startswith("main._omp_fn.1") and src in n]
        assert first and first[0]["count"] == 1, (src, sorted(regs), err)
        assert loop and loop[0]["count"] == rest, (src, sorted(regs), err)
        assert len(first[0]["threads"]) == 2
    assert "is stripped" not in err, err


@needs_uprobes
def test_programs_a_shell_starts_have_their_first_region(tmp_path: Path) -> None:
    a, b = _programs(tmp_path)
    report, err = _record(tmp_path, "sh", ["sh", "-c", f"{a}; {b}"])
    _check(report, err, (a, b))
    assert "held at its exec" in err


@needs_uprobes
def test_system_wide_with_a_command_has_the_command_regions(tmp_path: Path) -> None:
    a, b = _programs(tmp_path)
    report, err = _record(tmp_path, "wide", ["sh", "-c", f"{a}; {b}"], "--system-wide")
    _check(report, err, (a, b))


@pytest.mark.parametrize("wrapper", [["env"], ["time", "-p"]])
@needs_uprobes
def test_wrappers_get_no_stripped_warning(tmp_path: Path, wrapper: list[str]) -> None:
    """env and time are stripped and use no OpenMP: nothing to say about them; the program
    they run has its regions, named (its maps read while it was held at its exec)."""
    if shutil.which(wrapper[0]) is None:
        pytest.skip(f"{wrapper[0]} is not installed")
    a, _b = _programs(tmp_path)
    report, err = _record(tmp_path, wrapper[0], [*wrapper, str(a)])
    assert "is stripped" not in err, err
    names = sorted(_by_name(report))
    parallel = [n for n in names if _by_name(report)[n]["role"] == "parallel"]
    assert parallel and all(n.startswith("main._omp_fn.") for n in parallel), names
