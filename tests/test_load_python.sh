#!/bin/sh
# test_load_python.sh - the built libpdshm.so loaded by Debian's python3
# through ctypes, before and after `import torch` (tests/load_ctypes.py).
# make check sets PDSHM_LIB, PDSHM_SRCDIR and PDSHM_SANITIZERS (configure's
# sanitizer flags, empty in a plain build); 77 is automake's SKIP.
py=/usr/bin/python3
if [ ! -x "$py" ]; then
  echo "SKIP: $py not found (Debian's python3 runs this test)"
  exit 77
fi
if [ -n "$PDSHM_SANITIZERS" ]; then
  echo "SKIP: the library is built with $PDSHM_SANITIZERS, whose runtime python3 would have to preload"
  exit 77
fi
if [ -z "$PDSHM_LIB" ] || [ ! -r "$PDSHM_LIB" ]; then
  echo "SKIP: the shared library ${PDSHM_LIB:-(PDSHM_LIB unset)} was not built"
  exit 77
fi
exec "$py" "${PDSHM_SRCDIR:-.}/tests/load_ctypes.py" "$PDSHM_LIB"
