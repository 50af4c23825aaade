"""The package list as a rule, not a hand list (the rest of the metadata is in pyproject.toml).

Every package under snumap_tui/, and native/ and bpf/ (which live at the top of the
repository) with every package under them, shipped inside snumap_tui: as snumap_tui.native and
snumap_tui.bpf, never as top-level `native` or `bpf` modules. pyproject.toml alone cannot say
this: its package discovery names a package after its directory, and package-dir is only read
for packages already listed. tests/test_wheel.py checks that every package directory ends up
in the built wheel."""

from setuptools import find_packages, setup

# directory at the top of the repository -> the package it ships as
MAPPED = {"native": "snumap_tui.native", "bpf": "snumap_tui.bpf"}

packages = find_packages(include=["snumap_tui", "snumap_tui.*"])
for top, name in MAPPED.items():
    packages += [name + p[len(top):] for p in find_packages(include=[top, f"{top}.*"])]

setup(packages=packages, package_dir={name: top for top, name in MAPPED.items()})
