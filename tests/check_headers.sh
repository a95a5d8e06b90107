#!/bin/sh
# check_headers.sh - every public header stands on its own.  For each
# include/pdshm/*.h, and include/pdshm.h that includes them all, a translation
# unit holding only its #include (twice: its guard must hold) compiles with
# $CC -fsyntax-only -Wall -Wextra -Werror -std=c11, and again as C++ with
# $CXX where configure found a C++ compiler.  Checked besides, each failure
# named by file:
#  - include/pdshm.h includes every header of include/pdshm/;
#  - a header that declares a function (PDSHM_API) wraps it in extern "C".
#
# make check runs it (PDSHM_SRCDIR, PDSHM_CC, PDSHM_CXX: empty without a C++
# compiler); by hand: tests/check_headers.sh [SRCDIR], with CC and CXX.
src=${1:-${PDSHM_SRCDIR:-$(dirname "$0")/..}}
cc=${PDSHM_CC:-${CC:-cc}}
cxx=${PDSHM_CXX-${CXX:-}}
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0

set -- "$src"/include/pdshm/*.h
if [ ! -e "$1" ]; then
  echo "check_headers: no headers in $src/include/pdshm" >&2
  exit 99
fi

# compile LANG COMPILER FLAGS... (the translation unit is $tmp/tu.c)
compile() {
  lang=$1 comp=$2
  shift 2
  # shellcheck disable=SC2086 # a compiler may be several words (ccache gcc)
  if ! $comp -fsyntax-only -Wall -Wextra -Werror "$@" -I "$src/include" "$tmp/tu.c" \
       >"$tmp/out" 2>&1; then
    echo "$name: does not compile on its own as $lang ($comp):"
    sed 's/^/  /' "$tmp/out"
    fail=1
  fi
}

for h in "$src/include/pdshm.h" "$@"; do
  name=${h#"$src/"}
  inc=${name#include/}
  printf '#include <%s>\n#include <%s>\n' "$inc" "$inc" >"$tmp/tu.c"
  compile C "$cc" -std=c11
  if [ -n "$cxx" ]; then
    compile C++ "$cxx" -x c++ -std=c++11
  fi
  if grep -q '^PDSHM_API' "$h" && ! grep -q '^extern "C" {' "$h"; then
    echo "$name: declares functions without extern \"C\" for C++"
    fail=1
  fi
  case $inc in
    pdshm/*)
      if ! grep -q "^#include \"$inc\"" "$src/include/pdshm.h"; then
        echo "include/pdshm.h: does not include \"$inc\""
        fail=1
      fi ;;
  esac
done

[ $fail = 0 ] && echo "check_headers: $# headers and pdshm.h compile alone as C${cxx:+ and C++}"
exit $fail
