#!/bin/sh
# Runs a Python test (make check's PY_LOG_COMPILER) with the interpreter
# configure found, on the module of this build tree:
#   PYTHON        the interpreter (from configure; make check sets it)
#   PDSHM_PYPATH  the build tree's python/ directory, put first on PYTHONPATH
#   PDSHM_SANITIZERS  the build's -fsanitize flags: the module's sanitizer runtime
#                 must be loaded before anything else, so it is preloaded
#   CC            the compiler, asked where that runtime is
# numpy and pytest are required (exit 99, a hard error, when missing).
# Bytecode is not written: the source tree stays as it was.
set -u
: "${PYTHON:?PYTHON is not set (run this from make check)}"
: "${PDSHM_PYPATH:?PDSHM_PYPATH is not set (run this from make check)}"

if ! missing=$("$PYTHON" -c '
import importlib.util
print(" ".join(m for m in ("numpy", "pytest") if importlib.util.find_spec(m) is None))') ||
   [ -n "$missing" ]; then
  echo "pyrun: $PYTHON lacks ${missing:-numpy or pytest}, which the Python tests need:" \
       "apt-get install python3-numpy python3-pytest (or configure PYTHON= another interpreter)" >&2
  exit 99
fi

preload=
case " ${PDSHM_SANITIZERS:-} " in
  *thread*)
    echo "pyrun: SKIP: a ThreadSanitizer build's module cannot be loaded by an uninstrumented $PYTHON"
    exit 77 ;;
esac
for rt in address:libasan.so undefined:libubsan.so; do
  case " ${PDSHM_SANITIZERS:-} " in
    *"-fsanitize=${rt%%:*}"*)
      lib=$(${CC:-cc} -print-file-name="${rt#*:}")
      case $lib in
        /*) preload="$preload${preload:+ }$lib" ;;
        *) echo "pyrun: ${CC:-cc} does not know where ${rt#*:} is" >&2; exit 99 ;;
      esac ;;
  esac
done
if [ -n "$preload" ]; then
  echo "pyrun: sanitizer build: LD_PRELOAD=$preload, leak detection off (the interpreter keeps its memory)"
  LD_PRELOAD="$preload${LD_PRELOAD:+ $LD_PRELOAD}"
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  export LD_PRELOAD ASAN_OPTIONS
fi

PYTHONPATH="$PDSHM_PYPATH${PYTHONPATH:+:$PYTHONPATH}"
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH PYTHONDONTWRITEBYTECODE
echo "pyrun: $PYTHON $*"
exec "$PYTHON" "$@"
