"""hwloc run on a file others wrote, in a forked child: a crash or a hang stays there.

hwloc (and the libxml2 it parses XML with) is C: no Python signal handler runs while it works,
and some crafted files crash it -- an hwloc XML whose cache lacks ``complete_cpuset`` makes the
system's hwloc 2.9 (lstopo too) segfault. Screening the text (topology/build.py refuses DTD
subsets and entities) cannot know every such path, so an XML file or a gathered ``--fsroot``
tree is loaded in a child forked for it; the parent gets the topology as snumap JSON (checked
again by ``Topology.from_json``), the child's one-line SnumapError, or a line saying that hwloc
crashed or took longer than a bound. Ctrl-C in the parent stops the child.
"""

from __future__ import annotations

import faulthandler
import os
import select
import signal
import time
from collections.abc import Callable

from snumap_tui.errors import SnumapError

TIMEOUT_S = 120.0         # a gathered tree of thousands of PUs loads in seconds
MAX_OUTPUT = 256 << 20    # the JSON of the largest machine is a few MB


def in_child(fn: Callable[[], str], what: str, timeout_s: float = TIMEOUT_S) -> str:
    """``fn()`` (text) computed in a forked child; SnumapError (one line) for its error, a
    crash (killed by a signal), a hang past ``timeout_s`` or an exception."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:                                          # the child: never returns
        code = 1
        try:
            os.close(rd)
            faulthandler.disable()     # a crash is reported by the parent, in one line
            try:
                out = b"ok\n" + fn().encode("utf-8", "surrogatepass")
            except SnumapError as e:
                out = b"error\n" + str(e).encode("utf-8", "replace")
            except BaseException as e:  # noqa: BLE001 - handed to the parent as one line
                out = f"error\n{what}: {type(e).__name__}: {str(e)[:200]}".encode(
                    "utf-8", "replace")
            view = memoryview(out)
            while view:
                view = view[os.write(wr, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(wr)
    chunks: list[bytes] = []
    size = 0
    status: int | None = None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SnumapError(f"{what}: hwloc did not finish within {timeout_s:.0f} s")
            ready, _, _ = select.select([rd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(rd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_OUTPUT:
                raise SnumapError(f"{what}: the topology is larger than "
                                  f"{MAX_OUTPUT >> 20} MiB")
            chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(rd)
        if status is None:                                # an error or Ctrl-C: stop the child
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig
        raise SnumapError(f"{what}: hwloc crashed reading it ({name}); it is not a valid "
                          "hwloc input")
    kind, _, body = b"".join(chunks).partition(b"\n")
    if kind == b"ok":
        return body.decode("utf-8", "surrogatepass")
    if kind == b"error":
        raise SnumapError(body.decode("utf-8", "replace"))
    raise SnumapError(f"{what}: hwloc's reader ended without an answer "
                      f"(exit status {os.WEXITSTATUS(status) if os.WIFEXITED(status) else '?'})")
