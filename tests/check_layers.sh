#!/bin/sh
# check_layers.sh - the layers point down: no file of lib/ (or python/src/)
# includes a header of, or calls, a file above it.  The order is written
# once, in lib/LAYERS (folders) and python/src/LAYERS (files), bottom first;
# a unit may use itself and the units listed before it.
#
# Checked, each failure named by file and line:
#  - every .c and .h of lib/ sits in a folder that lib/LAYERS lists, and
#    every file of python/src/ is listed in python/src/LAYERS;
#  - every lib/ .c file defines PDSHM_LAYER, first, as its folder's number
#    (what the layer headers' #error compares);
#  - every #include "..." of a source file names a unit at or below its own;
#  - every reference of a built object to a symbol another object defines
#    (a call, a variable, a function's address) goes to a unit at or below
#    its own: from the objects' relocations (objdump -r), so that a call the
#    preprocessor hides is seen too.  python/src/ is held to its code only:
#    a type's method table (data) may name methods of the files above it.
#
# make check runs it after the build (PDSHM_SRCDIR, abs_top_builddir); by
# hand: tests/check_layers.sh [SRCDIR [BUILDDIR]].  NM, OBJDUMP, ADDR2LINE
# name the tools.
src=${1:-${PDSHM_SRCDIR:-$(dirname "$0")/..}}
build=${2:-${abs_top_builddir:-.}}
NM=${NM:-nm}
OBJDUMP=${OBJDUMP:-objdump}
ADDR2LINE=${ADDR2LINE:-addr2line}
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0

# The units of a LAYERS file, one per line: rank (list position), layer
# number, name.
units() {
  awk '!/^[ \t]*(#|$)/ { n++; print n, $1, $2 }' "$1"
}

# Every source file of dir as "unit path" (path under dir); dirs: whether
# the units are the subfolders (lib) or the files themselves (python/src).
sources() {
  (cd "$1" && find . -name '*.[ch]' | sed 's|^\./||' | sort) |
    if [ "$2" = dirs ]; then
      awk -F/ '{ print (NF > 1 ? $1 : "-"), $0 }'
    else
      awk -F/ '{ print (NF > 1 ? "-" : $0), $0 }'
    fi
}

# check DIR LAYERS KIND SECTIONS: KIND dirs|files; SECTIONS, a regular
# expression of the object sections whose relocations count.
check() {
  dir=$1 layers=$2 kind=$3 sections=$4
  units "$src/$layers" > "$tmp/units"
  sources "$src/$dir" "$kind" > "$tmp/files"

  # Placement, PDSHM_LAYER, includes.
  while read -r unit path; do
    awk -v dir="$dir" -v path="$path" -v unit="$unit" -v kind="$kind" -v layers="$layers" '
      FNR == NR { rank[$3] = $1; num[$3] = $2; next }
      FNR == 1 {
        if (!(unit in rank)) {
          printf "%s/%s: not in a unit that %s lists\n", dir, path, layers
          bad = 1; exit
        }
      }
      kind == "dirs" && path ~ /\.c$/ && !seen && /^#define PDSHM_LAYER / {
        seen = 1
        if ($3 != num[unit])
          printf "%s/%s:%d: PDSHM_LAYER %s, but %s/ is layer %s in %s\n", dir, path, FNR, $3, unit, num[unit], layers
      }
      kind == "dirs" && path ~ /\.c$/ && !seen && /^#include / {
        seen = 1
        printf "%s/%s:%d: includes before it defines PDSHM_LAYER (%s/ is layer %s)\n", dir, path, FNR, unit, num[unit]
      }
      /^#[ \t]*include[ \t]*"/ {
        inc = $0; sub(/^#[ \t]*include[ \t]*"/, "", inc); sub(/".*/, "", inc)
        to = ""
        if (kind == "dirs") {
          if (inc ~ /\//) { to = inc; sub(/\/.*/, "", to) }
        } else if (inc in rank) to = inc
        if (to != "" && (to in rank) && rank[to] > rank[unit])
          printf "%s/%s:%d: includes %s, of %s, listed after %s in %s\n", dir, path, FNR, inc, to, unit, layers
      }
      END { if (kind == "dirs" && path ~ /\.c$/ && !seen && !bad)
              printf "%s/%s: defines no PDSHM_LAYER (%s/ is layer %s)\n", dir, path, unit, num[unit] }
    ' "$tmp/units" "$src/$dir/$path"
  done < "$tmp/files" > "$tmp/out"

  # The objects of each .c file: libtool's PIC ones, else the others (lib/'s
  # files are built twice: into libpdshm_core and the crash tests' copy).
  : > "$tmp/objs"
  while read -r unit path; do
    case $path in *.c) ;; *) continue ;; esac
    d=$build/$dir/$(dirname "$path") b=$(basename "$path" .c)
    for o in "$d"/.libs/*-"$b".o; do [ -f "$o" ] && echo "$unit $path $o"; done > "$tmp/o1"
    [ -s "$tmp/o1" ] ||
      for o in "$d"/*-"$b".o; do [ -f "$o" ] && echo "$unit $path $o"; done > "$tmp/o1"
    cat "$tmp/o1" >> "$tmp/objs"
  done < "$tmp/files"
  if [ ! -s "$tmp/objs" ]; then
    echo "$dir: no objects under $build/$dir (not built): calls not checked"
    cat "$tmp/out"
    [ -s "$tmp/out" ] && fail=1
    return
  fi
  # Who defines what: "symbol unit path".
  while read -r unit path o; do
    "$NM" -g --defined-only "$o" | awk -v u="$unit" -v p="$path" 'NF >= 3 { print $3, u, p }'
  done < "$tmp/objs" | sort -u > "$tmp/defs"
  # What each object references, in the sections that count.
  while read -r unit path o; do
    "$OBJDUMP" -r "$o" | awk -v u="$unit" -v p="$path" -v o="$o" -v re="$sections" '
      /^RELOCATION RECORDS FOR \[/ { sec = $4; gsub(/[\[\]:]/, "", sec); next }
      NF == 3 && sec ~ re && $1 ~ /^[0-9a-f]+$/ {
        s = $3; sub(/[-+]0x[0-9a-f]+$/, "", s)
        print s, u, p, o, sec, $1
      }'
  done < "$tmp/objs" > "$tmp/refs"
  awk -v dir="$dir" -v layers="$layers" '
    FILENAME == ARGV[1] { rank[$3] = $1; next }
    FILENAME == ARGV[2] { def[$1] = $2 " " $3; next }
    ($1 in def) {
      split(def[$1], d, " ")
      if (rank[d[1]] > rank[$2] && !seen[$1 " " $3]++)
        print $4, $5, $6, dir "/" $3, $1, dir "/" d[2], d[1], $2
    }' "$tmp/units" "$tmp/defs" "$tmp/refs" > "$tmp/up"
  while read -r o sec off file sym def to from; do
    line=$("$ADDR2LINE" -e "$o" -j "$sec" "0x$off" 2>/dev/null | sed 's/ (discriminator.*//')
    case $line in *:[1-9]*) where=$(basename "$line"); where="$file:${where#*:}" ;; *) where=$file ;; esac
    echo "$where: uses $sym, of $def ($to), listed after $from in $layers"
  done < "$tmp/up" >> "$tmp/out"
  n=$(wc -l < "$tmp/objs")
  if [ -s "$tmp/out" ]; then
    cat "$tmp/out"
    fail=1
  else
    echo "$dir: $(wc -l < "$tmp/files") files, $n objects: every include and reference points down ($layers)"
  fi
}

check lib lib/LAYERS dirs '^\.(text|data|rodata|init_array|fini_array|tdata|tbss|bss)'
check python/src python/src/LAYERS files '^\.text'
exit $fail
