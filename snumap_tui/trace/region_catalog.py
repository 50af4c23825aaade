"""What a region is, and which runtime entry points make one.

A region record is one row of ``REGION_DTYPE``: at ``t_ns`` thread ``tid`` (of process ``pid``)
entered (op ``BEGIN``), left (``END``) or marked (``MARK``) region ``rid``. ``rid`` indexes a
``RegionNames`` table of (name, kind, role, wait):

- kind: ``omp``, ``mpi``, ``user`` (``--probe``) or ``marker`` (SNUMAP_MARKERS);
- role: ``span`` (a parallel region as its master thread sees it: GOMP_parallel entry to
  return), ``body`` (one thread running the region's outlined function), ``call`` (a runtime
  or user function from entry to return), ``marker`` (a begin/end or mark line);
- wait: time inside is synchronisation (barriers, critical entry, MPI waits and collectives),
  drawn and counted apart from computing.

A parallel region's span and its threads' bodies carry the same name (the outlined function's
symbol and, with debug info, its file:line), so the analysis joins them by name.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import numpy as np

BEGIN, END, MARK = 1, 2, 3
OP_NAMES = {BEGIN: "begin", END: "end", MARK: "mark"}
KINDS = ("omp", "mpi", "user", "marker")
ROLES = ("span", "body", "call", "marker")

REGION_DTYPE = np.dtype([("t_ns", "<u8"), ("tid", "<i4"), ("pid", "<i4"), ("op", "u1"),
                         ("rid", "<u4")])
# A summary of one thread's calls of an aggregated region (``EntryPoint.agg``: critical
# sections, summed in the kernel instead of one record a call): ``count`` calls between the
# first's entry ``t_first`` and the last's return ``t_last``, ``sum_ns`` inside in all;
# ``wall_ns``: the region's time with any thread inside, from the recording's start up to this
# summary (a running total over every thread: the latest summary of a region holds it all).
SUM_DTYPE = np.dtype([("t_first", "<u8"), ("t_last", "<u8"), ("sum_ns", "<u8"),
                      ("wall_ns", "<u8"), ("pid", "<i4"), ("tid", "<i4"), ("rid", "<u4"),
                      ("count", "<u4")])


@dataclass(frozen=True)
class RegionName:
    name: str
    kind: str
    role: str
    wait: bool = False


class RegionNames:
    """The table rids index; grows as regions are found (append-only, so rids stay valid)."""

    def __init__(self) -> None:
        self.items: list[RegionName] = []
        self._ids: dict[RegionName, int] = {}
        self._lock = threading.Lock()     # the marker thread interns too

    def intern(self, name: str, kind: str, role: str, wait: bool = False) -> int:
        key = RegionName(name, kind, role, wait)
        rid = self._ids.get(key)
        if rid is None:
            with self._lock:
                rid = self._ids.get(key)
                if rid is None:
                    rid = self._ids[key] = len(self.items)
                    self.items.append(key)
        return rid

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, rid: int) -> RegionName:
        return self.items[rid]


def region_label(symbol: str | None, line: str | None, fallback: str = "?") -> str:
    """How a parallel region is called: its outlined function, with file:line when known."""
    name = symbol or fallback
    return f"{name} ({line})" if line else name


# ---- entry points ----------------------------------------------------------------------------

@dataclass(frozen=True)
class EntryPoint:
    """One runtime function: its region name, kind, role, whether it is a wait; ``arg``: the
    argument holding the outlined function (span openers); ``stack``: entry and return of
    different functions that open and close one span (GOMP_parallel_start/_end); ``agg``:
    calls so frequent and short (critical sections) that the eBPF path sums them per thread in
    the kernel (``SUM_DTYPE``) instead of writing a record each."""

    symbol: str
    kind: str
    role: str = "call"
    wait: bool = False
    arg: int | None = None
    on_entry: bool = True
    on_return: bool = True
    stack: str | None = None
    agg: bool = False


GNU_OMP = (
    EntryPoint("GOMP_parallel", "omp", "span", arg=0, stack="parallel"),
    EntryPoint("GOMP_parallel_start", "omp", "span", arg=0, on_return=False, stack="parallel"),
    EntryPoint("GOMP_parallel_end", "omp", "span", on_entry=False, stack="parallel"),
    EntryPoint("GOMP_barrier", "omp", wait=True),
    EntryPoint("GOMP_critical_start", "omp", wait=True, agg=True),
    EntryPoint("GOMP_critical_name_start", "omp", wait=True, agg=True),
    EntryPoint("GOMP_single_start", "omp"),
    EntryPoint("GOMP_taskwait", "omp", wait=True),
)
LLVM_OMP = (
    EntryPoint("__kmpc_fork_call", "omp", "span", arg=2, stack="parallel"),
    EntryPoint("__kmpc_barrier", "omp", wait=True),
    EntryPoint("__kmpc_critical", "omp", wait=True, agg=True),
    EntryPoint("__kmpc_critical_with_hint", "omp", wait=True, agg=True),
)
_MPI_WAITS = ("Barrier", "Wait", "Waitall", "Waitany", "Waitsome", "Recv", "Send", "Sendrecv",
              "Probe", "Bcast", "Reduce", "Allreduce", "Gather", "Gatherv", "Allgather",
              "Allgatherv", "Scatter", "Scatterv", "Alltoall", "Alltoallv", "Reduce_scatter",
              "Scan")
_MPI_OTHER = ("Init", "Init_thread", "Finalize", "Isend", "Irecv")
MPI = tuple(EntryPoint(f"MPI_{n}", "mpi", wait=True) for n in _MPI_WAITS) + \
    tuple(EntryPoint(f"MPI_{n}", "mpi") for n in _MPI_OTHER)

# Outlined parallel-region bodies: GCC names them ``main._omp_fn.0``, clang ``.omp_outlined.``
# (``.omp_outlined..1``, ``.omp_outlined._debug__`` with -g).
OUTLINED = re.compile(r"\._omp_fn\.\d+$|^\.omp_outlined\.")


def runtime_of(symbols: dict[str, int]) -> tuple[str, tuple[EntryPoint, ...]] | None:
    """Which runtime a file's symbols say it is (LLVM's libomp also exports GOMP_* for
    compatibility, so __kmpc_fork_call decides first)."""
    if "__kmpc_fork_call" in symbols:
        return "omp", LLVM_OMP
    if "GOMP_parallel" in symbols or "GOMP_parallel_start" in symbols:
        return "omp", GNU_OMP
    if "MPI_Init" in symbols or "PMPI_Init" in symbols:
        return "mpi", MPI
    return None


def mpi_symbol(symbols: dict[str, int], name: str) -> str | None:
    """``MPI_X`` when the library defines it, else ``PMPI_X`` (the profiling name: the same
    function in MPICH and Open MPI, where MPI_X is a weak alias)."""
    if name in symbols:
        return name
    p = "P" + name
    return p if p in symbols else None
