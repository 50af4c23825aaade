"""What a study runs: the configurations (threads × ranks × placement × input × frequency)
parsed from `snumap scale`'s options, and each placement's CPUs computed on the topology.

Placements, for N threads, on the topology's tree (hwloc's logical PU order is a depth-first
order, so neighbours in it share a core, then a cache, then a package):

- ``compact``: the first N PUs in logical order -- a core's PUs, then the next core of the
  same cache, then of the same package; OMP_PROC_BIND=close, one place per PU.
- ``spread``: hwloc_distrib's division (what ``hwloc-distrib --single N`` prints): N split
  among the packages (then NUMA nodes, caches, cores) in proportion to their PUs, recursively,
  the first PU of each share; OMP_PROC_BIND=spread, one place per PU.
- ``cores``: the first N cores in logical order, each place a whole core (all its PUs).
- ``pus``: the first N PUs by OS number (what ``taskset -c 0-(N-1)`` gives; on machines that
  number hyperthreads apart this is one PU per core, on others two).
- ``numa``: N threads spread over the NUMA nodes; each place is a whole NUMA node.
- ``none``: no affinity, no OMP_PLACES (the default without --places).
"""

from __future__ import annotations

import itertools
import math
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from snumap_tui.errors import SnumapError
from snumap_tui.native.perf_pmu import parse_cpulist
from snumap_tui.topology.render import format_cpulist as cpulist

if TYPE_CHECKING:  # pragma: no cover
    from snumap_tui.topology.model import Topology, TopoObject

PLACES = ("compact", "spread", "cores", "pus", "numa", "none")
LAUNCHERS = {"mpirun": "-np", "mpiexec": "-np", "mpiexec.hydra": "-np", "orterun": "-np",
             "srun": "-n"}
INPUT = "{input}"
RANKS = "{ranks}"
__all__ = ["Config", "Placement", "cpulist", "parse_cpulist", "placement"]


@dataclass(frozen=True)
class Config:
    """One configuration of the study (a run is a configuration and a repeat number)."""

    threads: int
    places: str = "none"
    ranks: int | None = None
    input: str | None = None
    input_args: str | None = None
    input_value: float | None = None
    freq: str | None = None

    @property
    def key(self) -> str:
        """A file-name-safe name, unique within a study: ``t2-compact-in_small-f_max``."""
        parts = [f"t{self.threads}"]
        if self.ranks is not None:
            parts.append(f"r{self.ranks}")
        parts.append(self.places)
        if self.input is not None:
            parts.append("in_" + _safe(self.input))
        if self.freq is not None:
            parts.append("f_" + _safe(self.freq))
        return "-".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        kw: dict[str, Any] = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**kw)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "_", text)[:40] or "_"


# ---- option parsing ---------------------------------------------------------------------------

def parse_counts(text: str, option: str, limit: int, unit: str, cores: int) -> list[int]:
    """``1,2,4`` / ``pow2`` / ``all`` (up to LIMIT PUs) / ``pow2:cores`` / ``all:cores``."""
    word, _, over = text.strip().partition(":")
    if word in ("pow2", "all"):
        top = {"": limit, "pus": limit, "cores": cores}.get(over)
        if top is None:
            raise SnumapError(f"{option} {text}: after ':' give pus or cores")
        if word == "all":
            return list(range(1, top + 1))
        out, n = [], 1
        while n <= top:
            out.append(n)
            n *= 2
        return out
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SnumapError(f"{option} {text}: give numbers (1,2,4), pow2 or all") from None
    if not vals or min(vals) < 1:
        raise SnumapError(f"{option} {text}: counts must be 1 or more")
    return sorted(set(vals))


def parse_inputs(items: list[str]) -> list[tuple[str, str, float | None]]:
    """``NAME=ARGS`` items: (name, args, numeric value or None). The value is ARGS when it is
    one number, else NAME when NAME is a number (models fit time against it)."""
    out: list[tuple[str, str, float | None]] = []
    for item in items:
        name, eq, args = item.partition("=")
        if not eq or not name.strip():
            raise SnumapError(f"--input {item}: give NAME=ARGS (e.g. small='-n 1000')")
        if name in (n for n, _, _ in out):
            raise SnumapError(f"--input {name}: given twice")
        try:
            words = shlex.split(args)
        except ValueError as exc:
            raise SnumapError(f"--input {item}: {exc}") from None
        value = _number(words[0]) if len(words) == 1 else None
        if value is None:
            value = _number(name)
        out.append((name, args, value))
    return out


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def substitute(cmd: list[str], cfg: Config) -> list[str]:
    """CMD with ``{input}`` replaced (a word that is exactly ``{input}`` becomes the input's
    words, one inside a word its text) and ``{ranks}`` likewise; with ranks and no
    ``{ranks}``, the launcher's -np/-n inserted after it."""
    out: list[str] = []
    for w in cmd:
        if cfg.input_args is not None and w == INPUT:
            out.extend(shlex.split(cfg.input_args))
            continue
        if cfg.input_args is not None:
            w = w.replace(INPUT, cfg.input_args)
        if cfg.ranks is not None:
            w = w.replace(RANKS, str(cfg.ranks))
        out.append(w)
    if cfg.ranks is not None and not any(RANKS in w for w in cmd):
        flag = LAUNCHERS[os.path.basename(cmd[0])]
        out[1:1] = [flag, str(cfg.ranks)]
    return out


def check_command(cmd: list[str], inputs: list[Any], ranks: list[int] | None) -> None:
    if not cmd:
        raise SnumapError("no command: give it after --, e.g. snumap scale -o study -- ./app")
    if inputs and not any(INPUT in w for w in cmd):
        raise SnumapError("--input: the command has no {input} to put the arguments in")
    if not inputs and any(INPUT in w for w in cmd):
        raise SnumapError("the command has {input} but no --input NAME=ARGS was given")
    if ranks and not any(RANKS in w for w in cmd) and \
            os.path.basename(cmd[0]) not in LAUNCHERS:
        raise SnumapError("--ranks: the command starts with no MPI launcher "
                          f"({', '.join(sorted(LAUNCHERS))}) and has no {{ranks}}")


def build_configs(threads: list[int], places: list[str], ranks: list[int] | None,
                  inputs: list[tuple[str, str, float | None]], freqs: list[str] | None
                  ) -> list[Config]:
    """The cartesian product, in a fixed order (inputs, freqs, places, ranks, threads)."""
    out = []
    ins: list[tuple[str | None, str | None, float | None]] = list(inputs) or [(None, None, None)]
    rks: list[int | None] = list(ranks) if ranks else [None]
    frs: list[str | None] = list(freqs) if freqs else [None]
    for (inp, fr, pl, rk, th) in itertools.product(ins, frs, places, rks, threads):
        name, args, value = inp
        out.append(Config(threads=th, places=pl, ranks=rk, input=name, input_args=args,
                          input_value=value, freq=fr))
    return out


# ---- placements -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Placement:
    """Where a configuration runs: its CPUs (OS indexes) and its OpenMP places."""

    cpus: tuple[int, ...]
    places: tuple[tuple[int, ...], ...]
    bind: str | None

    def env(self) -> dict[str, str]:
        if not self.places:
            return {}
        return {"OMP_PLACES": ",".join("{" + ",".join(map(str, p)) + "}" for p in self.places),
                "OMP_PROC_BIND": self.bind or "close"}


def placement(topo: Topology, kind: str, n: int) -> Placement:
    """The placement KIND of N threads (or processes) on TOPO; SnumapError when it has fewer
    PUs (or cores, NUMA nodes) than that asks."""
    if kind == "none":
        return Placement((), (), None)
    pus = topo.pus
    if n > len(pus):
        raise SnumapError(f"{n} threads but the machine has {len(pus)} PUs "
                          "(--oversubscribe to run them anyway)")
    if kind == "compact":
        places = [(int(p.os_index or 0),) for p in pus[:n]]
        return _done(places, "close")
    if kind == "pus":
        places = [(int(i),) for i in sorted(topo.pu_os_indexes)[:n]]
        return _done(places, "close")
    if kind == "cores":
        cores = topo.by_type("Core") or pus
        if n > len(cores):
            raise SnumapError(f"--places cores: {n} threads but the machine has {len(cores)} "
                              "cores")
        return _done([tuple(sorted(c.cpuset)) for c in cores[:n]], "close")
    if kind == "numa":
        nodes = [nd for nd in topo.numa_nodes if nd.cpuset] or [topo.root]
        groups = distrib(topo, nodes, min(n, len(nodes)), merge=False)
        return _done([tuple(sorted(g)) for g in groups], "spread")
    if kind == "spread":
        groups = distrib(topo, [topo.root], n)
        return _done([(min(g, key=lambda c: _logical(topo, c)),) for g in groups], "spread")
    raise SnumapError(f"--places {kind}: choose from {', '.join(PLACES)}")


def _done(places: Sequence[tuple[int, ...]], bind: str) -> Placement:
    cpus = tuple(sorted({c for p in places for c in p}))
    return Placement(cpus, tuple(places), bind)


def _logical(topo: Topology, os_index: int) -> int:
    return topo.pu(os_index).logical_index


def _cpu_children(topo: Topology, obj: TopoObject) -> list[TopoObject]:
    return [c for c in topo.children_of(obj) if c.cpuset and c.type not in ("NUMANode",
                                                                              "MemCache")]


def distrib(topo: Topology, roots: list[TopoObject], n: int, merge: bool = True
            ) -> list[frozenset[int]]:
    """hwloc_distrib(): N cpusets, each root given a share of N proportional to its PUs (at
    least what rounding gives it), split further among its children while a share holds more
    than one; a root given nothing is merged into the previous set (unless not MERGE)."""
    sets: list[frozenset[int]] = []
    tot = sum(len(r.cpuset) for r in roots)
    given_w = 0
    for r in roots:
        w = len(r.cpuset)
        if not w:
            continue
        chunk = ((given_w + w) * n + tot - 1) // tot - (given_w * n + tot - 1) // tot
        kids = _cpu_children(topo, r)
        if not kids or chunk <= 1:
            if chunk:
                sets.extend([r.cpuset] * chunk)
            elif sets and merge:
                sets[-1] = sets[-1] | r.cpuset
        else:
            sets.extend(distrib(topo, kids, chunk, merge))
        given_w += w
    return sets
