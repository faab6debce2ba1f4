# Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
"""setuptools glue for pyproject.toml: the extension is built by the project's CMake.

Only the `_batchcast` target and what it links are built, in build/pip/cmake (or in the
existing build tree PY_BATCHCAST_BUILD_DIR names, which is only brought up to date), with
ccache when it is installed. CMAKE_ARGS adds configure arguments; CMAKE_BUILD_PARALLEL_LEVEL
sets the build jobs (default: all cores).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def project_version():
    """The version the CMake project() takes: the macros in batchcast/version.h."""
    path = os.path.join(HERE, "runtime", "include", "batchcast", "version.h")
    with open(path) as f:
        parts = dict(re.findall(r"^#define BATCHCAST_VERSION_(MAJOR|MINOR|PATCH) ([0-9]+)$",
                                f.read(), re.M))
    if len(parts) != 3:
        raise RuntimeError(f"setup.py: no BATCHCAST_VERSION_MAJOR/MINOR/PATCH in {path}")
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def run(cmd):
    print("batchcast setup.py:", " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("PY_BATCHCAST_BUILD_DIR")
        if build_dir:
            if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
                raise RuntimeError(f"setup.py: PY_BATCHCAST_BUILD_DIR={build_dir} is not a "
                                   "configured CMake build tree (no CMakeCache.txt)")
        else:
            build_dir = os.path.join(HERE, "build", "pip", "cmake")
            self.configure(build_dir)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        run(["cmake", "--build", build_dir, "--target", "_batchcast", "-j", jobs])
        built = os.path.join(build_dir, "python", "batchcast")
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        so = os.path.join(built, "_batchcast" + suffix)
        if not os.path.exists(so):
            found = [f for f in os.listdir(built) if f.startswith("_batchcast")]
            raise RuntimeError(
                f"setup.py: {build_dir} built {found} but this Python ({sys.executable}) "
                f"needs _batchcast{suffix}; configure that tree with "
                f"-DPython_EXECUTABLE={sys.executable}, or leave PY_BATCHCAST_BUILD_DIR unset")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(so, dest)
        shutil.copyfile(os.path.join(built, "_version.py"),
                        os.path.join(os.path.dirname(dest), "_version.py"))

    @staticmethod
    def configure(build_dir):
        # A unity build (each target's sources compiled in batches) takes about a third less
        # time from scratch than file by file. Warnings never fail it (BATCHCAST_WERROR is
        # on in the project's CI only). -O2, not Release's -O3: the level every benchmark in
        # docs/benchmarks.md measures (make's RelWithDebInfo trees), and 8 % less compile CPU.
        cmd = ["cmake", "-S", HERE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
               "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG", "-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG",
               "-DCMAKE_UNITY_BUILD=ON",
               f"-DPython_EXECUTABLE={sys.executable}", "-DBATCHCAST_PYTHON=ON",
               "-DBATCHCAST_BUILD_TESTS=OFF", "-DBATCHCAST_BUILD_BENCHMARKS=OFF",
               "-DBATCHCAST_TORCH=OFF"]
        # pybind11 from the build environment (pyproject.toml asks for >= 2.12, the first that
        # supports numpy 2); without it (--no-build-isolation and no pybind11 module) CMake
        # finds the system's (Debian's pybind11-dev 2.10: numpy 1 only, said at import).
        try:
            import pybind11
            cmd.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        if shutil.which("ccache"):
            cmd += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        cmd += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        run(cmd)


setup(
    version=project_version(),
    packages=["batchcast"],
    package_dir={"batchcast": "bindings/python/batchcast"},
    ext_modules=[Extension("batchcast._batchcast", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join("build", "pip")}},
    zip_safe=False,
)
