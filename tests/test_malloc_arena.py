"""The recorder's one malloc arena (native/malloc.py), checked through glibc's own account of
its heaps (malloc_info(3))."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = r"""
import ctypes, os, re, sys, tempfile, threading
sys.path.insert(0, sys.argv[1])
from snumap_tui.native.malloc import one_arena
if sys.argv[2] == "one":
    print("set", one_arena())
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
go = threading.Barrier(4)
def work():
    go.wait()
    ps = [libc.malloc(4096) for _ in range(100)]
    for p in ps:
        libc.free(p)
ts = [threading.Thread(target=work) for _ in range(4)]
for t in ts: t.start()
for t in ts: t.join()
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
path = tempfile.mktemp()
fp = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, fp)
libc.fclose(fp)
print("heaps", len(re.findall(r'<heap nr="', open(path).read())))
os.unlink(path)
"""


def _heaps(mode: str, env: dict[str, str] | None = None) -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    e = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", PROBE, root, mode], capture_output=True,
                          text=True, check=True, env=e, timeout=60).stdout


def test_one_arena_serves_every_thread() -> None:
    import ctypes

    if not hasattr(ctypes.CDLL(None), "gnu_get_libc_version"):
        pytest.skip("not glibc")
    many = _heaps("default")
    one = _heaps("one")
    assert "set True" in one and "heaps 1\n" in one, one
    assert int(many.split()[-1]) > 1, many            # glibc's default: an arena per thread


def test_the_users_malloc_arena_max_is_kept() -> None:
    out = _heaps("one", {"MALLOC_ARENA_MAX": "4"})
    assert "set False" in out
