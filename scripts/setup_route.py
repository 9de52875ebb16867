#!/usr/bin/env python3
"""Which way to install the kit's dependencies on this machine (Gradescope's setup.sh asks).

  packages  the distribution's own packages, by scripts/install_deps.sh: LibTorch from
            libtorch-dev. Taken where that LibTorch is one the kit supports (1.13 or later;
            Debian 12 is the tested one) and every other package of install_deps.sh exists.
  wheel     the user-space route: LibTorch from PyTorch's torch wheel in a venv, the rest
            downloaded by CMake at pinned versions (cmake/FetchDeps.cmake), Gloo's headers
            included; only a compiler, CMake, git and Python's venv come from apt. Taken where
            the distribution's LibTorch is too old (Ubuntu 22.04: 1.8.1) or absent (Ubuntu
            24.04 has none).

  python3 scripts/setup_route.py            prints "route: ...", "reason: ...", and for the
                                            wheel route the apt packages it needs and the
                                            Python its venv is made with
  KIT_SETUP_ROUTE=packages|wheel            forces a route (the reason says so)

Reads /etc/os-release and `apt-cache policy`; the decision itself (choose) is a pure
function, unit-tested in tests/setup/test_setup_route.py.
"""
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

MIN_LIBTORCH = (1, 13)   # compat.h's oldest; 1.8 lacks the c10d API the kit calls
TESTED = "Debian 12 (libtorch-dev 1.13)"
# Every package of scripts/install_deps.sh besides the common tools (keep in step).
KIT_PACKAGES = ["libtorch-dev", "libgloo-dev", "libopenblas0-openmp", "libgtest-dev", "libcli11-dev",
                "nlohmann-json3-dev", "libsentencepiece-dev", "libgnuplot-iostream-dev", "gnuplot-nox"]
# What the wheel route takes from apt: the build tools and Python's venv. gnuplot draws the
# figures; zip/unzip for the packaging tests.
WHEEL_PACKAGES = ["build-essential", "cmake", "pkg-config", "git", "python3", "python3-venv",
                  "ca-certificates", "gnuplot-nox", "zip", "unzip"]
MIN_CMAKE = (3, 20)  # ctest --test-dir (the README's test commands)
# The oldest Python the pinned wheel (autograder_setup.sh's KIT_TORCH_SPEC, torch 2.15) has
# builds for. Ubuntu 22.04's python3 is 3.10; its jammy-updates has python3.11-venv.
MIN_PYTHON = (3, 11)


@dataclass
class Route:
    name: str                 # "packages" or "wheel"
    reason: str
    apt: list = field(default_factory=list)   # apt packages the route installs itself
    python: str = "python3"                    # the interpreter the wheel's venv is made with


class NoRoute(Exception):
    """Neither route can work here; the message says why and what to do."""


def upstream_version(debian_version):
    """'1.13.1+dfsg-4' -> (1, 13, 1); an epoch ('1:2.0-1') is dropped. None for no version."""
    if not debian_version:
        return None
    v = debian_version.split(":", 1)[-1]
    m = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", v)
    return tuple(int(x or 0) for x in m.groups()) if m else None


def parse_os_release(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'^([A-Z_]+)=(.*)$', line.strip())
        if m:
            out[m.group(1)] = m.group(2).strip().strip('"').strip("'")
    return out


def parse_apt_policy(text):
    """`apt-cache policy P1 P2 ...` -> {package: candidate version or None}."""
    out, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^(\S+):$", line)
        if m:
            current = m.group(1).split(":")[0]   # libfoo:amd64 -> libfoo
            out[current] = None
            continue
        m = re.match(r"^\s+Candidate:\s*(\S+)", line)
        if m and current:
            out[current] = None if m.group(1) == "(none)" else m.group(1)
    return out


def choose(os_release, candidates, *, have_apt=True, cmake_candidate=None, forced=None):
    """The route for a machine described by its os-release fields and the candidate versions
    apt offers (package -> version or None). Raises NoRoute when neither can work."""
    name = os_release.get("PRETTY_NAME") or os_release.get("ID", "this system")
    if forced not in (None, "", "packages", "wheel"):
        raise NoRoute(f"KIT_SETUP_ROUTE={forced} is not a route: use packages or wheel (or leave it unset)")
    if not have_apt:
        raise NoRoute(f"{name} has no apt-get: both routes install their build tools with apt. "
                      f"Use a Debian or Ubuntu base image (Gradescope's are Ubuntu), or install a "
                      f"compiler, CMake >= 3.20, git and python3-venv yourself and follow README.md's "
                      f"user-space route.")
    cmake_v = upstream_version(cmake_candidate)
    if cmake_v is not None and cmake_v[:2] < MIN_CMAKE:
        raise NoRoute(f"{name}'s CMake is {cmake_candidate}; the kit needs {'.'.join(map(str, MIN_CMAKE))} "
                      f"or later. Use a newer base image, or install CMake from pip (pip install cmake).")
    wheel_apt = [p for p in WHEEL_PACKAGES if candidates.get(p) is not None]
    missing_wheel = [p for p in WHEEL_PACKAGES if candidates.get(p) is None]
    if forced == "wheel":
        python, py_apt = wheel_python(name, candidates)
        return Route("wheel", "KIT_SETUP_ROUTE=wheel", wheel_apt + py_apt, python)
    torch = upstream_version(candidates.get("libtorch-dev"))
    missing = [p for p in KIT_PACKAGES if candidates.get(p) is None]
    if forced == "packages":
        if missing:
            raise NoRoute(f"KIT_SETUP_ROUTE=packages, but {name} has no {', '.join(missing)}: "
                          f"unset KIT_SETUP_ROUTE to take the wheel route")
        return Route("packages", "KIT_SETUP_ROUTE=packages")
    if torch is not None and torch[:2] >= MIN_LIBTORCH and not missing:
        return Route("packages", f"{name} packages LibTorch {candidates['libtorch-dev']} and every other "
                                 f"package the kit needs (tested: {TESTED})")
    if torch is None:
        why = f"{name} packages no LibTorch (libtorch-dev)"
    elif torch[:2] < MIN_LIBTORCH:
        why = (f"{name}'s LibTorch is {candidates['libtorch-dev']}, older than the "
               f"{'.'.join(map(str, MIN_LIBTORCH))} the kit needs")
    else:
        why = f"{name} has no {', '.join(missing)}"
    if missing_wheel and "cmake" in missing_wheel:
        raise NoRoute(f"{why}, and the wheel route needs CMake, which {name} does not package "
                      f"either. Use a Debian 12 or Ubuntu 22.04/24.04 base image.")
    python, py_apt = wheel_python(name, candidates)
    return Route("wheel", f"{why}: LibTorch from the torch wheel in a venv ({python})",
                 wheel_apt + py_apt, python)


def wheel_python(name, candidates):
    """The interpreter for the wheel's venv and the apt packages it needs: python3 when it
    is new enough, else python3.11 where the distribution packages it."""
    py = upstream_version(candidates.get("python3"))
    if py is not None and py[:2] >= MIN_PYTHON and candidates.get("python3-venv"):
        return "python3", []
    for minor in range(MIN_PYTHON[1], MIN_PYTHON[1] + 4):
        if candidates.get(f"python3.{minor}-venv"):
            return f"python3.{minor}", [f"python3.{minor}", f"python3.{minor}-venv"]
    have = candidates.get("python3") or "none"
    raise NoRoute(f"the torch wheel needs Python {'.'.join(map(str, MIN_PYTHON))} or later with its "
                  f"venv module; {name} packages python3 {have} and no python3.1x-venv that is new "
                  f"enough. Use Ubuntu 24.04 or Debian 12, or set KIT_TORCH_SPEC to a torch release "
                  f"that supports this Python.")


def main():
    try:
        os_release = parse_os_release(open("/etc/os-release").read())
    except OSError:
        os_release = {}
    have_apt = subprocess.run(["sh", "-c", "command -v apt-get && command -v apt-cache"],
                              capture_output=True).returncode == 0
    candidates = {}
    cmake_candidate = None
    if have_apt:
        pkgs = sorted(set(KIT_PACKAGES + WHEEL_PACKAGES
                          + [f"python3.{m}-venv" for m in range(MIN_PYTHON[1], MIN_PYTHON[1] + 4)]))
        out = subprocess.run(["apt-cache", "policy"] + pkgs, capture_output=True, text=True).stdout
        candidates = parse_apt_policy(out)
        candidates.update({p: None for p in pkgs if p not in candidates})   # unknown to apt
        cmake_candidate = candidates.get("cmake")
    try:
        route = choose(os_release, candidates, have_apt=have_apt, cmake_candidate=cmake_candidate,
                       forced=os.environ.get("KIT_SETUP_ROUTE"))
    except NoRoute as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"route: {route.name}")
    print(f"reason: {route.reason}")
    if route.name == "wheel":
        print("apt: " + " ".join(route.apt))
        print(f"python: {route.python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
