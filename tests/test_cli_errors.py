"""Bad input through the real CLI in a subprocess: one line on stderr, exit code 2, no traceback
(and nothing libxml2 or hwloc print on their own leaks through)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A small but complete topology as hwloc 3.x writes it: hwloc3.dtd and version="3.0".
XML_V3 = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc3.dtd">
<topology version="3.0">
  <object type="Machine" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003"
   allowed_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001"
   allowed_nodeset="0x00000001" gp_index="1">
    <info name="Backend" value="Linux"/>
    <object type="Package" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003"
     nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2">
      <object type="NUMANode" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003"
       nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="3"
       local_memory="1073741824"/>
      <object type="Core" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003"
       nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="4">
        <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001"
         nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="5"/>
        <object type="PU" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002"
         nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="6"/>
      </object>
    </object>
  </object>
  <support name="discovery.pu"/>
</topology>
"""


def snumap(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.pop("SNUMAP_HWLOC_LIB", None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "snumap_tui.cli", *args], capture_output=True,
                          text=True, cwd=REPO, env=full_env, timeout=60, check=False)


def assert_one_line_error(p: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("snumap: ")
    for n in needles:
        assert n in lines[0], lines[0]
    assert p.stdout == ""
    return lines[0]


def test_missing_libhwloc_names_the_package() -> None:
    p = snumap("topo", env={"SNUMAP_HWLOC_LIB": "libhwloc-not-here.so.15"})
    assert_one_line_error(p, "libhwloc15", "libhwloc-not-here.so.15")


def test_a_library_that_is_not_hwloc_is_refused() -> None:
    p = snumap("topo", env={"SNUMAP_HWLOC_LIB": "libm.so.6"})
    assert_one_line_error(p, "not an hwloc library", "libhwloc15")


def test_help_works_without_libhwloc() -> None:
    p = snumap("topo", "--help", env={"SNUMAP_HWLOC_LIB": "libhwloc-not-here.so.15"})
    assert p.returncode == 0 and "--json" in p.stdout


def test_garbage_xml(tmp_path: Path) -> None:
    f = tmp_path / "garbage.xml"
    f.write_bytes(b"garbage\x00\x01 not xml at all\n")
    line = assert_one_line_error(snumap("topo", "--topology", str(f)))
    assert line == f"snumap: not an hwloc XML topology: {f} (not XML)"


def test_html_file_is_not_an_hwloc_topology(tmp_path: Path) -> None:
    """Not hwloc's "Loading XML topology without DTD" noise: what the file is."""
    f = tmp_path / "page.html"
    f.write_text("<!DOCTYPE html>\n<!-- saved page -->\n<html><body>hi</body></html>\n")
    line = assert_one_line_error(snumap("topo", "--topology", str(f)))
    assert line == f"snumap: not an hwloc XML topology: {f} (root element <html>, not <topology>)"


def test_other_xml_is_not_an_hwloc_topology(tmp_path: Path) -> None:
    f = tmp_path / "pom.xml"
    f.write_text('<?xml version="1.0"?>\n<project><name>x</name></project>\n')
    line = assert_one_line_error(snumap("topo", "--topology", str(f)))
    assert line.endswith("(root element <project>, not <topology>)") and "DTD" not in line


def test_xml_root_element() -> None:
    from snumap_tui.topology.build import first_c_error, xml_root_element

    assert xml_root_element(XML_V3) == "topology"
    assert xml_root_element("\ufeff<?xml version='1.0'?><!-- a <b> --><x:doc/>") == "x:doc"
    assert xml_root_element('<!DOCTYPE t [<!ELEMENT t ANY>]>\n<t/>') == "t"
    assert xml_root_element("plain text") == ""
    assert xml_root_element("<!-- a comment longer than the head") is None
    assert first_c_error(["f.xml: Loading XML topology without DTD",
                          "f.xml: unrecognized object type string Bogus"]) == \
        "f.xml: unrecognized object type string Bogus"


def test_truncated_v2_xml(tmp_path: Path) -> None:
    f = tmp_path / "cut.xml"
    f.write_text(XML_V3.replace("hwloc3.dtd", "hwloc2.dtd").replace('version="3.0"',
                                                                      'version="2.0"')[:700])
    assert_one_line_error(snumap("topo", "--topology", str(f)), "hwloc rejected")


def test_xml_from_hwloc3(tmp_path: Path) -> None:
    f = tmp_path / "v3.xml"
    f.write_text(XML_V3)
    assert_one_line_error(snumap("topo", "--topology", str(f)), "hwloc XML format 3", "2.x")


def test_the_same_file_as_v2_loads(tmp_path: Path) -> None:
    """Control for the test above: only the version makes the v3 file unacceptable."""
    f = tmp_path / "v2.xml"
    f.write_text(XML_V3.replace("hwloc3.dtd", "hwloc2.dtd").replace('version="3.0"',
                                                                      'version="2.0"'))
    p = snumap("topo", "--topology", str(f))
    assert p.returncode == 0, p.stderr
    assert "2 PU" in p.stdout and p.stderr == ""


def test_missing_xml(tmp_path: Path) -> None:
    assert_one_line_error(snumap("topo", "--topology", str(tmp_path / "nope.xml")),
                          "no such file")


def test_a_directory_as_xml(tmp_path: Path) -> None:
    assert_one_line_error(snumap("topo", "--topology", str(tmp_path)), "is a directory")


def test_unreadable_file() -> None:
    """A file whose read fails even for root: /proc/self/mem at offset 0 gives EIO."""
    assert_one_line_error(snumap("topo", "--topology", "/proc/self/mem"), "cannot read")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_file_without_read_permission(tmp_path: Path) -> None:
    f = tmp_path / "secret.xml"
    f.write_text(XML_V3)
    f.chmod(0)
    assert_one_line_error(snumap("topo", "--topology", str(f)), "cannot read")


def test_missing_fsroot(tmp_path: Path) -> None:
    assert_one_line_error(snumap("topo", "--fsroot", str(tmp_path / "gone")), "fsroot",
                          "no such directory")


def test_fsroot_that_is_not_a_gathered_tree(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    assert_one_line_error(snumap("topo", "--fsroot", str(tmp_path)), "not a gathered")


def test_bad_synthetic_description() -> None:
    assert_one_line_error(snumap("topo", "--synthetic", "pack:2 frobnicator:3"),
                          "synthetic", "frobnicator")


def test_two_machines_at_once(tmp_path: Path) -> None:
    assert_one_line_error(snumap("topo", "--synthetic", "pack:2", "--fsroot", str(tmp_path)),
                          "give only one")
