#!/usr/bin/env python3
"""Build every bpf/*.bpf.c into the CO-RE object shipped beside it (bpf/NAME.bpf.o), and keep
bpf/objects.json, the manifest that ties each object to the exact sources it was built from.

    python3 scripts/build_bpf.py            # rebuild all objects and the manifest
    python3 scripts/build_bpf.py --check    # are the objects those of the sources? (no clang)
    python3 scripts/build_bpf.py --verify   # rebuild in a temporary directory, compare bytes

Reproducible: the command is fixed (clang -target bpfel -O2 -g, the repository's path mapped
to "." so no path of the build machine ends up in the object), DWARF is stripped (the BTF that
libbpf needs stays), and the inputs are only the source, the headers it includes from bpf/ and
libbpf's bpf_*.h; the same clang and libbpf headers give the same bytes. The manifest records
the SHA-256 of those inputs, of the object, and the toolchain; tests/test_bpf_build.py fails
when a source changed without a rebuild (``--check``) and, with the recorded toolchain at
hand, when a rebuild gives other bytes (``--verify``). docs/bpf.md says how to add a program.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BPF = REPO / "bpf"
MANIFEST = BPF / "objects.json"
LIBBPF_INCLUDE = Path("/usr/include/bpf")
# x86 is the target architecture for pt_regs (uprobe arguments); programs that only use
# tp_btf arguments run on any little-endian architecture.
ARCH = "x86"
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
# A source's own compiler flags, from a line of its header comment: " * build: -mcpu=v3 (why)".
_FLAGS = re.compile(r"^ \* build: (-\S+)", re.MULTILINE)


def sources() -> list[Path]:
    return sorted(BPF.glob("*.bpf.c"))


def local_includes(src: Path, seen: set[Path] | None = None) -> list[Path]:
    """SRC and the headers it includes from bpf/ ("..." includes), recursively, sorted."""
    seen = seen if seen is not None else set()
    if src in seen or not src.exists():
        return sorted(seen)
    seen.add(src)
    for name in _INCLUDE.findall(src.read_text()):
        local_includes(BPF / name, seen)
    return sorted(seen)


def inputs_sha256(src: Path) -> str:
    """One hash over the names and contents of SRC and its local headers."""
    h = hashlib.sha256()
    for p in local_includes(src):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def file_sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def toolchain() -> dict[str, str]:
    """The clang and libbpf-header versions a build uses."""
    clang = shutil.which("clang")
    if clang is None:
        raise SystemExit("build_bpf: clang is not installed (Debian: apt-get install clang "
                         "llvm libbpf-dev)")
    first = subprocess.run([clang, "--version"], capture_output=True, text=True,
                           check=True).stdout.splitlines()[0]
    ver = LIBBPF_INCLUDE / "libbpf_version.h"
    if not ver.exists():
        raise SystemExit("build_bpf: libbpf's headers are missing (apt-get install libbpf-dev)")
    nums = dict(re.findall(r"#define LIBBPF_(MAJOR|MINOR)_VERSION (\d+)", ver.read_text()))
    return {"clang": first.strip(), "libbpf_headers": f"{nums['MAJOR']}.{nums['MINOR']}"}


def command(src: Path, out: Path) -> list[str]:
    own = _FLAGS.findall(src.read_text())
    return ["clang", "-target", "bpfel", *own, "-O2", "-g", f"-D__TARGET_ARCH_{ARCH}",
            "-Wall", "-Werror", f"-fdebug-prefix-map={REPO}=.",
            "-I", "bpf", "-c", str(src.relative_to(REPO)), "-o", str(out)]


def compile_one(src: Path, out: Path) -> None:
    """SRC -> OUT: compile, then strip DWARF (keeps .BTF and .BTF.ext, which libbpf needs)."""
    tmp = out.with_suffix(".full.o")
    subprocess.run(command(src, tmp), cwd=REPO, check=True)
    strip = shutil.which("llvm-strip") or shutil.which("llvm-strip-14")
    if strip is None:
        raise SystemExit("build_bpf: llvm-strip is not installed (apt-get install llvm)")
    subprocess.run([strip, "-g", "-o", str(out), str(tmp)], check=True)
    tmp.unlink()


def object_of(src: Path) -> Path:
    return src.with_name(src.name[: -len(".c")] + ".o")


def build() -> int:
    tools = toolchain()
    manifest: dict[str, dict[str, str]] = {}
    for src in sources():
        obj = object_of(src)
        compile_one(src, obj)
        manifest[obj.name] = {"source": src.name, "inputs_sha256": inputs_sha256(src),
                              "object_sha256": file_sha256(obj), **tools,
                              "command": " ".join(command(src, Path("OUT.o"))).replace(
                                  str(REPO), ".")}
        print(f"build_bpf: {src.name} -> {obj.name} ({obj.stat().st_size} bytes)")
    MANIFEST.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return 0


def check() -> list[str]:
    """Problems that make a checked-in object not the build of its current sources."""
    problems = []
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    for src in sources():
        obj = object_of(src)
        entry = manifest.get(obj.name)
        if entry is None or not obj.exists():
            problems.append(f"{obj.name} was never built from {src.name}")
            continue
        if entry["inputs_sha256"] != inputs_sha256(src):
            problems.append(f"{src.name} (or a header it includes) changed since "
                            f"{obj.name} was built")
        if entry["object_sha256"] != file_sha256(obj):
            problems.append(f"{obj.name} is not the object the manifest recorded")
    for name in manifest:
        if not (BPF / manifest[name]["source"]).exists():
            problems.append(f"{name} has no source any more")
    return problems


def verify() -> list[str]:
    """Rebuild into a temporary directory; differences from the checked-in objects (only
    meaningful with the toolchain the manifest recorded)."""
    tools = toolchain()
    manifest = json.loads(MANIFEST.read_text())
    problems = []
    with tempfile.TemporaryDirectory() as d:
        for src in sources():
            obj = object_of(src)
            entry = manifest.get(obj.name, {})
            if {k: entry.get(k) for k in tools} != tools:
                problems.append(f"{obj.name}: recorded toolchain {entry.get('clang')} / libbpf "
                                f"{entry.get('libbpf_headers')}, here {tools['clang']} / "
                                f"libbpf {tools['libbpf_headers']}: cannot compare bytes")
                continue
            out = Path(d) / obj.name
            compile_one(src, out)
            if out.read_bytes() != obj.read_bytes():
                problems.append(f"{obj.name}: a rebuild gives other bytes")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true", help="compare the manifest with the sources")
    g.add_argument("--verify", action="store_true", help="rebuild and compare bytes")
    a = ap.parse_args()
    try:
        if not a.check and not a.verify:
            return build()
        problems = check() if a.check else verify()
    except subprocess.CalledProcessError as exc:
        print(f"build_bpf: {exc.cmd[0]} failed (exit {exc.returncode})", file=sys.stderr)
        return 1
    for p in problems:
        print(f"build_bpf: {p}", file=sys.stderr)
    if problems and a.check:
        print("build_bpf: rebuild with `python3 scripts/build_bpf.py`", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
