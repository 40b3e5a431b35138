"""`pip install` of the package from the repository works and installs an importable, dependency-free
package. Built offline (--no-build-isolation), so the interpreter needs setuptools and wheel; the test
uses this interpreter or, failing that, the system one, and is skipped (saying why) with neither."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

PACKAGE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _can_build(python: str) -> bool:
    return subprocess.run([python, "-c", "import setuptools, wheel, pip"], capture_output=True).returncode == 0


class PackagingTest(unittest.TestCase):
    def test_pip_installs_an_importable_package_without_dependencies(self):
        python = next((p for p in (sys.executable, "/usr/bin/python3") if os.path.exists(p) and _can_build(p)), None)
        if python is None:
            raise unittest.SkipTest("no interpreter with pip, setuptools and wheel to build the package offline")
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")  # a copy: building writes build/ and *.egg-info next to the sources
            shutil.copytree(PACKAGE_DIR, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build",
                                                                             "*.egg-info"))
            target = os.path.join(tmp, "site")
            r = subprocess.run([python, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                                "--disable-pip-version-check", "--target", target, src], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            env["PYTHONPATH"] = target
            r = subprocess.run([python, "-c", "import ajet_swarm, sys; print(ajet_swarm.__version__, "
                                              "ajet_swarm.SwarmClient.__module__)"],
                               capture_output=True, text=True, env=env, cwd=tmp)
            self.assertEqual(r.stdout.split(), ["0.1.0", "ajet_swarm.client"], r.stderr)
            self.assertTrue(os.path.exists(os.path.join(target, "bin", "ajet-swarm-client")))


if __name__ == "__main__":
    unittest.main()
