"""Builds the pdshm Python package and its C extension, pdshm._pdshm.

Installed use (Debian's python3-setuptools, no PyPI):

    pip install ./python --no-build-isolation

compiles against an INSTALLED libpdshm found with pkg-config (pdshm.pc; set
PKG_CONFIG_PATH when it lives under a non-standard prefix, whose libdir the
module then records as its rpath).

Development against a source tree, without installing the library:

    cd python && PDSHM_BUILD_TREE=.. /usr/bin/python3 setup.py build_ext --inplace

takes the header from $PDSHM_BUILD_TREE/include and the library from
$PDSHM_BUILD_TREE/lib/.libs (libtool's output of `make`), and records an rpath
to that directory, so `PYTHONPATH=python /usr/bin/python3 -c 'import pdshm'`
works without LD_LIBRARY_PATH.

pdshm.mpi's extension, pdshm._pdshm_mpi (libpdshm-mpi through mpi4py's C
API), is built by configure and make only: a package built here has none,
and pdshm.mpi.Job raises ImportError saying so.
"""
import os
import shlex
import subprocess
import sys
from glob import glob

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def pkg_config(*args):
    """The words pkg-config prints for pdshm, or exits with why it failed."""
    try:
        out = subprocess.run(["pkg-config", *args, "pdshm"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit("pdshm: pkg-config cannot find an installed libpdshm (%s); install it "
                 "(make install) or set PDSHM_BUILD_TREE to a built source tree" % e)
    return shlex.split(out)


def library_flags():
    """include_dirs, library_dirs, libraries, runtime_library_dirs."""
    tree = os.environ.get("PDSHM_BUILD_TREE")
    if tree:
        tree = os.path.abspath(tree)
        libdir = os.path.join(tree, "lib", ".libs")
        return [os.path.join(tree, "include")], [libdir], ["pdshm"], [libdir]
    cflags, libs = pkg_config("--cflags"), pkg_config("--libs")
    libdir = (pkg_config("--variable=libdir") or [""])[0]
    return ([f[2:] for f in cflags if f.startswith("-I")],
            [f[2:] for f in libs if f.startswith("-L")],
            [f[2:] for f in libs if f.startswith("-l")],
            [libdir] if libdir and not system_libdir(libdir) else [])


def system_libdir(path):
    """Whether the dynamic loader searches path without an rpath."""
    path = os.path.realpath(path)
    dirs = {"/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib"}
    try:
        arch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        arch = ""
    if arch:
        dirs |= {"/lib/" + arch, "/usr/lib/" + arch}
    return path in {os.path.realpath(d) for d in dirs}


include_dirs, library_dirs, libraries, rpath = library_flags()

extension = Extension(
    "pdshm._pdshm",
    sources=sorted(os.path.relpath(p, HERE) for p in glob(os.path.join(HERE, "src", "*.c"))),
    depends=glob(os.path.join(HERE, "src", "*.h")),
    include_dirs=include_dirs,
    library_dirs=library_dirs,
    libraries=libraries,
    runtime_library_dirs=rpath,
    extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-fvisibility=hidden"],
)

setup(
    name="pdshm",
    version="0.1.0",
    description="PaddlePaddle's Scope/Variable/Tensor model in POSIX shared memory",
    packages=["pdshm"],
    package_data={"pdshm": ["py.typed", "*.pyi"]},
    ext_modules=[extension],
    python_requires=">=3.10",
    zip_safe=False,
)
