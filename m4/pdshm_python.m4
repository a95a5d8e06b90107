# PDSHM_PYTHON: what the Python module (python/, `import pdshm`) needs.
#
# Finds the interpreter (AM_PATH_PYTHON, which honours PYTHON=), its headers
# and its extension suffix, and sets have_python=yes, or have_python=no with
# the reason in pdshm_python_why.  --disable-python skips the module;
# --enable-python makes a missing interpreter or missing headers an error.
#
# Substitutes PYTHON_CPPFLAGS (-I for Python.h) and PYTHON_EXT_SUFFIX (e.g.
# .cpython-311-x86_64-linux-gnu.so), and sets pyexecdir to a directory the
# interpreter searches (see PDSHM_PYTHON_SEARCHED_DIR); when it searches none
# under the prefix, pyexecdir stays what AM_PATH_PYTHON chose and
# pdshm_python_path_note says that PYTHONPATH is needed.  For configure's
# summary: pdshm_python_moduledir, where the package goes (expanded).
AC_DEFUN([PDSHM_PYTHON], [
AC_ARG_ENABLE([python],
  [AS_HELP_STRING([--disable-python],
    [do not build the Python module (default: build it when python3 >= 3.10 and its headers are found)])],
  [enable_python=$enableval], [enable_python=auto])
have_python=no
pdshm_python_why=
pdshm_python_path_note=
PYTHON_CPPFLAGS=
PYTHON_EXT_SUFFIX=
AS_IF([test "x$enable_python" = xno], [pdshm_python_why="disabled by --disable-python"], [
  AS_IF([test -n "$PYTHON" && ! command -v "$PYTHON" >/dev/null 2>&1],
    [AC_MSG_ERROR([PYTHON=$PYTHON: no such interpreter])])
  AM_PATH_PYTHON([3.10], [], [:])
  AS_IF([test "x$PYTHON" = "x:"], [pdshm_python_why="no python3 >= 3.10 (give PYTHON=/path/to/python3)"], [
    PYTHON_CPPFLAGS=`$PYTHON -E -c "import sysconfig
dirs = list()
for d in (sysconfig.get_path('include'), sysconfig.get_path('platinclude')):
    if d not in dirs:
        dirs.append(d)
print(' '.join('-I' + d for d in dirs))"`
    PYTHON_EXT_SUFFIX=`$PYTHON -E -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX') or '')"`
    pdshm_save_CPPFLAGS=$CPPFLAGS
    CPPFLAGS="$CPPFLAGS $PYTHON_CPPFLAGS"
    AC_CHECK_HEADER([Python.h], [pdshm_have_python_h=yes], [pdshm_have_python_h=no])
    CPPFLAGS=$pdshm_save_CPPFLAGS
    AS_IF([test "x$pdshm_have_python_h" != xyes],
      [pdshm_python_why="no Python.h for $PYTHON (install python3-dev: apt-get install python3-dev)"],
    [test -z "$PYTHON_EXT_SUFFIX"],
      [pdshm_python_why="$PYTHON does not say its extension suffix (sysconfig EXT_SUFFIX)"],
    [have_python=yes
     AC_MSG_CHECKING([for the suffix of $PYTHON's extension modules])
     AC_MSG_RESULT([$PYTHON_EXT_SUFFIX])
     PDSHM_PYTHON_SEARCHED_DIR])])])
AS_IF([test "x$have_python" = xno && test "x$enable_python" = xyes],
  [AC_MSG_ERROR([--enable-python: $pdshm_python_why])])
AC_SUBST([PYTHON_CPPFLAGS])
AC_SUBST([PYTHON_EXT_SUFFIX])
AM_CONDITIONAL([HAVE_PYTHON], [test "x$have_python" = xyes])
])

# PDSHM_PYTHON_SEARCHED_DIR: AM_PATH_PYTHON puts modules into
# PREFIX/lib/pythonX.Y/site-packages, which Debian's interpreter does not
# search (it searches dist-packages: /usr/lib/python3/dist-packages for
# /usr, /usr/local/lib/pythonX.Y/dist-packages for /usr/local).  Ask the
# interpreter (sys.path and site.getsitepackages(), without PYTHONPATH)
# which of the usual directories under the exec prefix it searches, and
# keep AM_PATH_PYTHON's choice only when it searches that one or none.
AC_DEFUN([PDSHM_PYTHON_SEARCHED_DIR], [
AC_MSG_CHECKING([where $PYTHON finds modules under the install prefix])
pdshm_save_prefix=$prefix
pdshm_save_exec_prefix=$exec_prefix
test "x$prefix" = xNONE && prefix=$ac_default_prefix
test "x$exec_prefix" = xNONE && exec_prefix=$prefix
pdshm_py_base=$PYTHON_EXEC_PREFIX
pdshm_py_dir=$pyexecdir
while :; do
  case $pdshm_py_base$pdshm_py_dir in
    *'$'*) eval pdshm_py_base=\"$pdshm_py_base\"; eval pdshm_py_dir=\"$pdshm_py_dir\" ;;
    *) break ;;
  esac
done
prefix=$pdshm_save_prefix
exec_prefix=$pdshm_save_exec_prefix
pdshm_py_found=`$PYTHON -E - "$pdshm_py_base" "$pdshm_py_dir" <<'EOF'
import os, site, sys
_, base, chosen = sys.argv
searched = set(os.path.realpath(p) for p in sys.path if p)
searched.update(os.path.realpath(p) for p in site.getsitepackages())
ver = 'python%d.%d' % (sys.version_info.major, sys.version_info.minor)
for d in (chosen, base + '/lib/python3/dist-packages',
          base + '/lib/' + ver + '/dist-packages', base + '/lib/' + ver + '/site-packages'):
    if os.path.realpath(d) in searched:
        print(d)
        break
EOF`
AS_CASE([$pdshm_py_found],
  ["$pdshm_py_dir"], [AC_MSG_RESULT([$pdshm_py_found])],
  ["$pdshm_py_base"/*],
    [pyexecdir="\${PYTHON_EXEC_PREFIX}${pdshm_py_found#"$pdshm_py_base"}"
     pdshm_py_dir=$pdshm_py_found
     AC_MSG_RESULT([$pdshm_py_found])],
  [AC_MSG_RESULT([none: it will need PYTHONPATH=$pdshm_py_dir])
   pdshm_python_path_note=" (not on its path: import with PYTHONPATH=$pdshm_py_dir)"])
pdshm_python_moduledir=$pdshm_py_dir/pdshm
])
