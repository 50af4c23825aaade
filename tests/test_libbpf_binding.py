"""The ctypes binding to libbpf (native/libbpf.py) against the real library and kernel: open,
configure (.rodata globals, map sizes, autoload), load, attach (tp_btf, uprobe/uretprobe with a
pid filter), maps, libbpf's ring buffer with a Python callback, and one-line errors."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from snumap_tui.native import libbpf as L

from snumap_tui.sources.privileges import has_caps

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent

needs_bpf = pytest.mark.skipif(
    has_caps(("CAP_BPF", "CAP_PERFMON"), alternative="CAP_SYS_ADMIN") is not None
    or not Path("/sys/kernel/btf/vmlinux").exists(),
    reason="needs CAP_BPF + CAP_PERFMON (or root) and kernel BTF")
needs_clang = pytest.mark.skipif(shutil.which("clang") is None, reason="needs clang")


def build(src: Path, out: Path) -> Path:
    """Compile a test program the way scripts/build_bpf.py compiles the shipped ones."""
    subprocess.run(["clang", "-target", "bpfel", "-O2", "-g", "-D__TARGET_ARCH_x86", "-Wall",
                    "-I", str(REPO / "bpf"), "-c", str(src), "-o", str(out)], check=True)
    return out


def libc_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split(None, 5)[-1]
        if "/libc.so" in path or "/libc-" in path:
            return path.strip()
    raise AssertionError("no libc mapped")


CHILD = ("import os, sys\n"
         "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
         "sys.stdin.readline()\n"
         "for _ in range(500): os.getppid()\n"
         "sys.stdout.write('done\\n'); sys.stdout.flush()\n")


def test_version_check_refuses_old_libbpf() -> None:
    with pytest.raises(L.BpfError, match="needs 1.0 or newer"):
        L.check_version((0, 8), "libbpf.so.0")
    L.check_version((1, 0), "libbpf.so.1")


def test_missing_library_is_one_line() -> None:
    code = ("from snumap_tui.native import libbpf as L\n"
            "try:\n    L.lib()\nexcept L.BpfError as e:\n    print('ERR', e.errno, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, L.LIBRARY_ENV: "/nonexistent/libbpf.so.1"},
                         timeout=60, check=False)
    assert out.stdout.startswith("ERR 2 cannot load libbpf (/nonexistent/libbpf.so.1)")
    assert out.stdout.count("\n") == 1 and not out.stderr


def test_library_is_the_systems() -> None:
    assert L.version().startswith("v1.")
    path = L.library_path()
    assert path is not None and "libbpf.so.1" in path


@needs_bpf
@needs_clang
def test_uprobe_pid_filter_maps_ring_buffer_and_globals(tmp_path: Path) -> None:
    obj_path = build(HERE / "bpf" / "uprobe_count.bpf.c", tmp_path / "up.bpf.o")
    kids = [subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for k in kids:
            assert k.stdout is not None and k.stdout.readline() == "ready\n"
        probed, other = kids
        with L.BpfObject.open(obj_path) as obj:
            assert obj.global_offsets() == {"snumap_test_tag": (0, 8)}
            obj.set_global("snumap_test_tag", struct.pack("<Q", 0x5E1A))
            obj.map("records").set_max_entries(1 << 17)
            obj.load()
            assert obj.map("records").max_entries == 1 << 17
            libc = libc_of(probed.pid)
            obj.program("on_entry").attach_uprobe(libc, "getppid", pid=probed.pid)
            obj.program("on_return").attach_uprobe(libc, "getppid", pid=probed.pid,
                                                   retprobe=True)
            got: list[bytes] = []
            ring = L.RingBuffer(obj.map("records"), got.append)
            for k in kids:
                assert k.stdin is not None
                k.stdin.write("go\n")
                k.stdin.flush()
            for k in kids:
                assert k.stdout is not None and k.stdout.readline() == "done\n"
            for _ in range(50):
                if ring.poll(100) == 0 and len(got) >= 1000:
                    break
            ring.free()
            key = struct.pack("<I", probed.pid)
            calls = obj.map("calls").lookup(key)
            rets = obj.map("returns").lookup(key)
            assert calls is not None and rets is not None
            n_calls, n_rets = struct.unpack("<Q", calls)[0], struct.unpack("<Q", rets)[0]
            # Exactly the probed process's 500 calls (the kernel filters by pid), whatever
            # the interpreter's own calls add.
            assert 500 <= n_calls < 520 and n_rets == n_calls
            assert obj.map("calls").lookup(struct.pack("<I", other.pid)) is None
            keys = {struct.unpack("<I", k)[0] for k in obj.map("calls").all_keys()}
            assert keys == {probed.pid}
            recs = [struct.unpack("<QII", r) for r in got]
            assert len(recs) == n_calls + n_rets
            assert {r[0] for r in recs} == {0x5E1A} and {r[1] for r in recs} == {probed.pid}
            assert sum(r[2] for r in recs) == n_rets
            assert obj.map("calls").delete(key) and not obj.map("calls").delete(key)
    finally:
        for k in kids:
            k.kill()
            k.wait()


@needs_bpf
def test_tp_btf_program_loads_attaches_and_closes() -> None:
    from snumap_tui.trace.libbpf import SWITCHED_IN, kernel_has_tracepoint

    obj = L.BpfObject.open(REPO / "bpf" / "sched.bpf.o")
    try:
        obj.set_global("snumap_system_wide", struct.pack("<I", 1))
        obj.program("sched_switch_pre518").set_autoload(False)
        has_exit = kernel_has_tracepoint(SWITCHED_IN)
        if not has_exit:
            obj.program(SWITCHED_IN).set_autoload(False)
        obj.load()
        links = obj.attach_all()
        # sched_switch, sched_exit_tp (Linux >= 6.16), task_rename, the wakeups, migrate,
        # fork, exec, exit
        assert len(links) == 8 + has_exit
        assert all(lk.attached for lk in links)
        off = {"sched_switch_pre518"} | (set() if has_exit else {SWITCHED_IN})
        assert all((p.fd < 0) == (p.name in off) for p in obj.programs())
        time.sleep(0.05)
        lost = obj.map("lost").lookup(b"\0" * 4)
        assert lost is not None and len(lost) == 8 * L.num_possible_cpus()
    finally:
        obj.close()
    assert all(not lk.attached for lk in links)
    obj.close()   # twice is harmless


@needs_bpf
def test_errors_name_the_cause(tmp_path: Path) -> None:
    with pytest.raises(L.BpfError, match=r"opening BPF object .*nothing\.o: .*errno 2"):
        L.BpfObject.open(tmp_path / "nothing.o")
    with L.BpfObject.open(REPO / "bpf" / "sched.bpf.o") as obj:
        with pytest.raises(KeyError):
            obj.map("no_such_map")
        with pytest.raises(ValueError, match="4 bytes"):
            obj.set_global("snumap_system_wide", b"\1")
        obj.program("sched_switch_pre518").set_autoload(False)
        obj.load()
        with pytest.raises(ValueError, match="fixed once the object is loaded"):
            obj.set_global("snumap_system_wide", b"\1\0\0\0")
        with pytest.raises(ValueError, match="the map wants 4"):
            obj.map("tracked").lookup(b"\0")


@needs_bpf
@needs_clang
def test_uprobe_on_missing_symbol_and_verifier_refusal(tmp_path: Path) -> None:
    obj_path = build(HERE / "bpf" / "uprobe_count.bpf.c", tmp_path / "up.bpf.o")
    with L.BpfObject.open(obj_path) as obj:
        obj.load()
        with pytest.raises(L.BpfError) as e:
            obj.program("on_entry").attach_uprobe(sys.executable, "no_such_function_i14")
        assert "attaching on_entry as uprobe" in str(e.value) and "\n" not in str(e.value)
        assert "failed to find symbol 'no_such_function_i14'" in str(e.value)
    bad = tmp_path / "bad.bpf.c"
    bad.write_text('#include "kernel_types.h"\n#include <bpf/bpf_helpers.h>\n'
                   'char LICENSE[] SEC("license") = "GPL";\n'
                   'struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 8);\n'
                   '  __type(key, __u32); __type(value, __u64); } m SEC(".maps");\n'
                   'SEC("tp_btf/sched_switch") int bad(void *ctx) {\n'
                   '  __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&m, &k);\n'
                   '  return *v; }\n')
    with L.BpfObject.open(build(bad, tmp_path / "bad.bpf.o")) as obj, \
            pytest.raises(L.BpfError) as e:
        obj.load()
    msg = str(e.value)
    assert msg.startswith("loading bad.bpf.o: ") and "\n" not in msg
    assert e.value.errno == 13 and "verifier" in msg
    assert msg.endswith("[prog bad: R0 invalid mem access 'map_value_or_null']")


def test_unprivileged_load_says_what_is_missing() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root to drop to another user")
    # pytest's tmp_path lies under a directory only root may enter.
    d = Path(tempfile.mkdtemp(prefix="snumap-libbpf-"))
    d.chmod(0o755)
    obj = d / "sched.bpf.o"
    shutil.copy(REPO / "bpf" / "sched.bpf.o", obj)
    obj.chmod(0o644)
    code = ("import sys\n"
            "from snumap_tui.native import libbpf as L\n"
            "o = L.BpfObject.open(sys.argv[1])\n"
            "try:\n    o.load()\nexcept L.BpfError as e:\n    print(e.errno, e)\n")
    out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          "--inh-caps=-all", sys.executable, "-c", code, str(obj),
                          str(REPO / "native")], capture_output=True, text=True, timeout=60, check=False)
    assert out.stdout.startswith("1 loading sched.bpf.o: not permitted: needs root, or "
                                 "CAP_BPF + CAP_PERFMON"), out
    assert out.stdout.count("\n") == 1
    shutil.rmtree(d)


def test_the_switch_program_loaded_is_the_kernels() -> None:
    """5.18 and later pass prev_state to sched_switch: the program taking it is kept, the
    one re-reading prev->__state is not loaded (and the other way round before 5.18)."""
    from snumap_tui.trace.libbpf import unused_switch_program

    assert unused_switch_program("6.18.44-fc-v769") == "sched_switch_pre518"
    assert unused_switch_program("5.18.0") == "sched_switch_pre518"
    assert unused_switch_program("5.17.15-generic") == "sched_switch"
    assert unused_switch_program("5.8.0") == "sched_switch"


@needs_bpf
def test_the_tracer_runs_the_switch_program_with_prev_state() -> None:
    import json
    import platform

    from snumap_tui.trace.libbpf import LibbpfTracer, kernel_release_tuple

    if shutil.which("bpftool") is None:
        pytest.skip("needs bpftool to list the loaded programs")
    t = LibbpfTracer()
    t.start(None)
    try:
        ids = {p["name"] for p in json.loads(subprocess.run(
            ["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
            check=True).stdout) if p.get("type") == "tracing"}
    finally:
        t.stop()
    want = "sched_switch" if kernel_release_tuple(platform.release()) >= (5, 18) \
        else "sched_switch_pre518"
    other = ({"sched_switch", "sched_switch_pre518"} - {want}).pop()
    shown = {n[:15] for n in ids}       # an older bpftool shows the kernel's 15 characters
    assert want[:15] in shown
    assert other[:15] not in shown
