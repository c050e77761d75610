"""Builds the extension module posenc._posenc with CMake for `pip install .` (pyproject.toml).

Only what the package needs: the library and the module target posenc_python, configured
Release with the CLI, the tests and the install rules off, in build/pip/cmake/ (a build folder
of its own: a second `pip install .` recompiles only what changed). setuptools' own staging
(lib, bdist, egg-info) goes under build/pip/ too, so the source tree gets nothing else.

Environment:
  POSENC_PIP_BUILD_DIR        the folder instead of build/pip (absolute, or relative to here)
  POSENC_PIP_CMAKE_DIR        an existing, configured CMake build folder of this source tree
                              (e.g. build/release) to build the module target in, instead of
                              configuring one: it is built there as that folder's configuration
                              says (its build type, its interpreter) and never reconfigured.
                              `make test`'s pip_install test uses its own release build
                              this way, so that the library is not compiled a second time.
  CMAKE_BUILD_PARALLEL_LEVEL  compile jobs; default: the CPUs this process may run on
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
BUILD = ROOT / os.environ.get("POSENC_PIP_BUILD_DIR", "build/pip")


def _version():
    # One version for the C++ package and the Python one: project(posenc VERSION x.y.z).
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*posenc\s+VERSION\s+([0-9.]+)", text)
    if not m:
        raise RuntimeError("CMakeLists.txt: no `project(posenc VERSION x.y.z)` line")
    return m.group(1)


def _jobs():
    level = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL")
    if level:
        return level
    try:
        return str(len(os.sched_getaffinity(0)))
    except AttributeError:
        return str(os.cpu_count() or 1)


def _run(cmd):
    print("posenc setup.py:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


class CMakeExtension(Extension):
    """An extension CMake builds (target posenc_python, python/CMakeLists.txt)."""

    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if shutil.which("cmake") is None:
            raise RuntimeError("cmake not found: scripts/install-deps installs the build tools")
        existing = os.environ.get("POSENC_PIP_CMAKE_DIR")
        if existing:
            cmake_dir = Path(existing).resolve()
            if not (cmake_dir / "CMakeCache.txt").is_file():
                raise RuntimeError(
                    f"POSENC_PIP_CMAKE_DIR={existing}: no CMakeCache.txt there (it must be a "
                    "configured build folder of this source tree, e.g. build/release)"
                )
            cache = (cmake_dir / "CMakeCache.txt").read_text()
            home = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache, re.M)
            if not home or Path(home.group(1)).resolve() != ROOT:
                raise RuntimeError(
                    f"POSENC_PIP_CMAKE_DIR={existing} was configured from "
                    f"{home.group(1) if home else 'an unknown source tree'}, not {ROOT}"
                )
            self._build_and_copy(ext, cmake_dir)
            return
        cmake_dir = BUILD / "cmake"
        configure = ["cmake", "-S", str(ROOT), "-B", str(cmake_dir)]
        # A folder configured before keeps its generator (CMake refuses to switch).
        if not (cmake_dir / "CMakeCache.txt").exists() and shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        configure += [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DPOSENC_BUILD_CLI=OFF",
            "-DPOSENC_BUILD_TESTS=OFF",
            "-DPOSENC_BUILD_PYTHON=ON",
            "-DPOSENC_INSTALL=OFF",
            # The interpreter running this build (a venv's python), so that the module's
            # suffix and headers are its own.
            f"-DPython_EXECUTABLE={sys.executable}",
        ]
        _run(configure)
        self._build_and_copy(ext, cmake_dir)

    def _build_and_copy(self, ext, cmake_dir):
        _run(["cmake", "--build", str(cmake_dir), "--target", "posenc_python", "-j", _jobs()])
        # python/CMakeLists.txt writes the module to <build>/python/posenc/_posenc<EXT_SUFFIX>.
        name = os.path.basename(self.get_ext_filename(ext.name))
        built = cmake_dir / "python" / "posenc" / name
        if not built.is_file():
            found = sorted(p.name for p in built.parent.glob("_posenc*"))
            raise RuntimeError(f"CMake built no {built} (found: {found or 'nothing'})")
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(built, dest)


BUILD.mkdir(parents=True, exist_ok=True)
setup(
    version=_version(),
    ext_modules=[CMakeExtension("posenc._posenc")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(BUILD)}, "egg_info": {"egg_base": str(BUILD)}},
)
