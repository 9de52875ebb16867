"""ctest setup.route_choice: scripts/setup_route.py picks the install route Gradescope's
setup.sh takes, from /etc/os-release and apt's candidate versions. The candidates below are
the real ones of each release's archive (Packages indices read on 2026-11-26)."""
import os
import subprocess
import sys
import unittest
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT / "scripts"))
import setup_route as sr  # noqa: E402

COMMON = {p: "1.0-1" for p in sr.WHEEL_PACKAGES}
DEBIAN12 = dict(COMMON, cmake="3.25.1-1", python3="3.11.2-1+b1", **{
    "libtorch-dev": "1.13.1+dfsg-4", "libgloo-dev": "0.0~git20220518.5b14351-3",
    "libopenblas0-openmp": "0.3.21+ds-4", "libgtest-dev": "1.12.1-0.2", "libcli11-dev": "2.3.2+ds-1",
    "nlohmann-json3-dev": "3.11.2-2", "libsentencepiece-dev": "0.1.97-3",
    "libgnuplot-iostream-dev": "0~20140302.gitc8919a0+dfsg-4", "gnuplot-nox": "5.4.4+dfsg1-2"})
# Ubuntu 22.04: LibTorch 1.8.1 (universe), too old for the kit.
# Its python3 is 3.10, older than the wheel's 3.11; jammy-updates has python3.11-venv.
JAMMY = dict(DEBIAN12, cmake="3.22.1-1ubuntu1.22.04.2", python3="3.10.6-1~22.04.1",
             **{"libtorch-dev": "1.8.1-4", "python3.11-venv": "3.11.0~rc1-1~22.04.1"})
# Ubuntu 24.04: no libtorch-dev at all; python3 3.12.
NOBLE = dict(DEBIAN12, cmake="3.28.3-1build7", python3="3.12.3-0ubuntu2", **{"libtorch-dev": None})
OS = {
    "debian12": {"ID": "debian", "VERSION_ID": "12", "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)"},
    "jammy": {"ID": "ubuntu", "VERSION_ID": "22.04", "PRETTY_NAME": "Ubuntu 22.04.5 LTS"},
    "noble": {"ID": "ubuntu", "VERSION_ID": "24.04", "PRETTY_NAME": "Ubuntu 24.04.3 LTS"},
}


def choose(os_name, cands, **kw):
    return sr.choose(OS[os_name], cands, cmake_candidate=cands.get("cmake"), **kw)


class Choose(unittest.TestCase):
    def test_debian_12_takes_the_packages(self):
        r = choose("debian12", DEBIAN12)
        self.assertEqual(r.name, "packages")
        self.assertIn("1.13.1", r.reason)
        self.assertEqual(r.apt, [])

    def test_ubuntu_22_04_libtorch_too_old_takes_the_wheel(self):
        r = choose("jammy", JAMMY)
        self.assertEqual(r.name, "wheel")
        self.assertIn("1.8.1", r.reason)
        self.assertIn("older than the 1.13", r.reason)
        self.assertIn("cmake", r.apt)
        self.assertNotIn("libtorch-dev", r.apt)
        # python3 3.10 is too old for the wheel: its venv is made with python3.11.
        self.assertEqual(r.python, "python3.11")
        self.assertIn("python3.11-venv", r.apt)

    def test_ubuntu_22_04_without_python_3_11_is_a_clear_error(self):
        with self.assertRaisesRegex(sr.NoRoute, "needs Python 3.11 or later.*python3 3.10.6"):
            choose("jammy", dict(JAMMY, **{"python3.11-venv": None}))

    def test_ubuntu_24_04_without_libtorch_takes_the_wheel(self):
        r = choose("noble", NOBLE)
        self.assertEqual(r.name, "wheel")
        self.assertIn("no LibTorch", r.reason)
        self.assertIn("Ubuntu 24.04", r.reason)
        self.assertEqual(r.python, "python3")
        self.assertIn("python3-venv", r.apt)

    def test_a_newer_libtorch_with_every_package_takes_the_packages(self):
        r = choose("debian12", dict(DEBIAN12, **{"libtorch-dev": "2.6.0+dfsg-7"}))
        self.assertEqual(r.name, "packages")

    def test_an_epoch_does_not_fool_the_version(self):
        self.assertEqual(sr.upstream_version("1:1.8.1-4"), (1, 8, 1))
        self.assertEqual(choose("jammy", dict(JAMMY, **{"libtorch-dev": "1:1.8.1-4"})).name, "wheel")

    def test_a_missing_kit_package_takes_the_wheel_and_names_it(self):
        r = choose("debian12", dict(DEBIAN12, **{"libgloo-dev": None}))
        self.assertEqual(r.name, "wheel")
        self.assertIn("libgloo-dev", r.reason)

    def test_forced_routes(self):
        self.assertEqual(choose("debian12", DEBIAN12, forced="wheel").name, "wheel")
        self.assertEqual(choose("debian12", DEBIAN12, forced="packages").name, "packages")
        with self.assertRaisesRegex(sr.NoRoute, "no libtorch-dev.*unset KIT_SETUP_ROUTE"):
            choose("noble", NOBLE, forced="packages")
        with self.assertRaisesRegex(sr.NoRoute, "KIT_SETUP_ROUTE=conda is not a route"):
            choose("debian12", DEBIAN12, forced="conda")

    def test_no_apt_is_a_clear_error(self):
        with self.assertRaisesRegex(sr.NoRoute, "no apt-get.*Debian or Ubuntu base image"):
            sr.choose({"PRETTY_NAME": "Alpine Linux v3.20"}, {}, have_apt=False)

    def test_no_venv_either_is_a_clear_error(self):
        with self.assertRaisesRegex(sr.NoRoute, "needs Python 3.11 or later with its venv module"):
            choose("noble", dict(NOBLE, **{"python3-venv": None}))

    def test_no_cmake_either_is_a_clear_error(self):
        with self.assertRaisesRegex(sr.NoRoute, "needs CMake"):
            choose("noble", dict(NOBLE, cmake=None))

    def test_cmake_too_old_is_a_clear_error(self):
        with self.assertRaisesRegex(sr.NoRoute, "CMake is 3.16.3-1ubuntu1; the kit needs 3.20"):
            choose("jammy", dict(JAMMY, cmake="3.16.3-1ubuntu1"))


class Parse(unittest.TestCase):
    def test_apt_policy(self):
        text = """libtorch-dev:
  Installed: (none)
  Candidate: 1.8.1-4
  Version table:
     1.8.1-4 500
        500 http://archive.ubuntu.com/ubuntu jammy/universe amd64 Packages
libgloo-dev:amd64:
  Installed: (none)
  Candidate: (none)
  Version table:
gnuplot-nox:
  Installed: 5.4.2+dfsg2-2
  Candidate: 5.4.2+dfsg2-2
"""
        self.assertEqual(sr.parse_apt_policy(text),
                         {"libtorch-dev": "1.8.1-4", "libgloo-dev": None, "gnuplot-nox": "5.4.2+dfsg2-2"})

    def test_os_release(self):
        text = 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n'
        self.assertEqual(sr.parse_os_release(text),
                         {"PRETTY_NAME": "Ubuntu 22.04.5 LTS", "ID": "ubuntu", "VERSION_ID": "22.04"})


class OnThisMachine(unittest.TestCase):
    """The script as setup.sh runs it, on this (Debian 12) machine."""

    def run_script(self, **env):
        return subprocess.run([sys.executable, str(KIT / "scripts" / "setup_route.py")],
                              capture_output=True, text=True, env=dict(os.environ, **env), timeout=60)

    def test_prints_a_route_and_its_reason_or_why_there_is_none(self):
        # Any machine (a student's may have no apt at all): a route with its reason, or exit 1
        # with one error line; never a traceback.
        r = self.run_script()
        if r.returncode == 0:
            self.assertRegex(r.stdout, r"(?m)^route: (packages|wheel)$")
            self.assertRegex(r.stdout, r"(?m)^reason: .+")
        else:
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertRegex(r.stderr, r"^error: [^\n]+\n$")

    def test_a_bad_forced_route_exits_1_with_the_message(self):
        r = self.run_script(KIT_SETUP_ROUTE="conda")
        self.assertEqual(r.returncode, 1)
        self.assertIn("KIT_SETUP_ROUTE=conda is not a route", r.stderr)


if __name__ == "__main__":
    unittest.main()
