"""What an administrator does so that ordinary users record exact scheduling events.

eBPF (the libbpf backend) needs CAP_BPF + CAP_PERFMON; file capabilities are the way to give
them without root, but a capability on the shared /usr/bin/python3 would hand them to every
Python program on the node. The recipe is a dedicated copy of the interpreter that only a
group may execute, carrying the two capabilities (a venv made with it runs snumap with them);
the broader alternative lets every user open tracepoints through perf (the sysctl, plus read
access to tracefs for the event ids). README.md, "On a cluster, without root", has the
commands.
"""

from __future__ import annotations

import os

from snumap_tui.sources.privileges import has_caps

CAP_PYTHON = "/usr/local/libexec/snumap/python3"
ADMIN_FIX = (f"for exact scheduling events without root, an admin gives a dedicated python3 "
             f"copy that only a trusted group may run CAP_BPF and CAP_PERFMON (setcap "
             f"cap_bpf,cap_perfmon+ep {CAP_PYTHON}; make the venv with it), or lets every user "
             f"use perf tracepoints (sysctl kernel.perf_event_paranoid=-1, tracefs readable); "
             f"see README \"On a cluster, without root\"")


def admin_fix(backend: str, euid: int | None = None, caps_missing: str | None = "?") -> \
        str | None:
    """The line to print when BACKEND was chosen for want of privileges, else None."""
    euid = os.geteuid() if euid is None else euid
    if caps_missing == "?":
        caps_missing = has_caps(("CAP_BPF", "CAP_PERFMON"), alternative="CAP_SYS_ADMIN")
    if backend in ("libbpf", "bcc") or euid == 0 or not caps_missing:
        return None
    return ADMIN_FIX
