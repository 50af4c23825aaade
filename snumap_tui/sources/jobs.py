"""Which batch job or service a process belongs to, from its cgroup path.

/proc/PID/cgroup (cgroups(7)): ``hierarchy-ID:controllers:path`` per line; ``0::path`` is the
unified (v2) hierarchy. Batch systems put every job in its own cgroup:
- Slurm (cgroup/v1 plugin): ``/slurm/uid_1000/job_1234/step_0/task_0``; (cgroup/v2):
  ``/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0``.
- PBS Pro: v1 ``/pbspro/1234.server`` or ``/pbs.service/jobid/1234.server``; v2
  ``/pbs_jobs.service/jobid/1234.server`` or a scope ``pbs-1234.server.scope``.
- systemd: the innermost ``*.service`` / ``*.scope`` unit of the path.
"""

from __future__ import annotations

import re

_SLURM = re.compile(r"/job_(\d+)(?:/|$)")
_PBS = (re.compile(r"/pbs[^/]*/jobid/([^/]+)"),
        re.compile(r"/pbspro[^/]*/(\d+[^/]*)"),
        re.compile(r"/pbs-(\d+[^/]*?)\.scope(?:/|$)"))
_UNIT = re.compile(r"([^/]+\.(?:service|scope))(?:/|$)")


def parse_cgroup(text: str) -> dict[str, str]:
    """/proc/PID/cgroup -> {controllers (or "" for v2): path}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out[parts[1]] = parts[2]
    return out


def main_cgroup(groups: dict[str, str]) -> str | None:
    """The cgroup to show: the v2 path, else the most telling v1 one (cpuset, then others)."""
    v2 = groups.get("")
    if v2 and v2 != "/":
        return v2
    for key in ("cpuset", "cpu,cpuacct", "memory", "freezer", "name=systemd"):
        p = groups.get(key)
        if p and p != "/":
            return p
    for p in groups.values():
        if p and p != "/":
            return p
    return v2 or (next(iter(groups.values())) if groups else None)


def detect_job(groups: dict[str, str]) -> str | None:
    """"slurm:1234", "pbs:1234.server", "systemd:ssh.service", or None."""
    paths = list(groups.values())
    for p in paths:
        m = _SLURM.search(p)
        if m and ("slurm" in p):
            return f"slurm:{m.group(1)}"
    for p in paths:
        for rx in _PBS:
            m = rx.search(p)
            if m:
                return f"pbs:{m.group(1)}"
    main = main_cgroup(groups)
    if main:
        units = _UNIT.findall(main)
        if units:
            return f"systemd:{units[-1]}"
    return None
