"""make check's entry to the Python test suite: pytest over python/tests.

Runs with the interpreter configure found (through tests/pyrun.sh), on the
module of this build tree, and exits with pytest's status: "no tests ran"
(5) fails like any failure.  No cache is written into the source tree.  With
pytest-timeout (python3-pytest-timeout) installed, a test running longer
than PDSHM_PYTEST_TIMEOUT seconds (default 600) fails; without it only the
tests' own timeouts apply.
"""
import importlib.util
import os
import sys

import pytest


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    suite = os.path.join(os.environ.get("srcdir", os.path.join(here, "..")), "python", "tests")
    args = ["-p", "no:cacheprovider", "-ra", suite]
    if importlib.util.find_spec("pytest_timeout") is not None:
        args[:0] = ["--timeout", os.environ.get("PDSHM_PYTEST_TIMEOUT", "600")]
    else:
        print("python_suite: no pytest-timeout (python3-pytest-timeout): "
              "only the tests' own timeouts apply")
    return pytest.main(args)


# multiprocessing's spawn and forkserver children import this file again, as
# __mp_main__: they must not run the suite.
if __name__ == "__main__":
    sys.exit(main())
