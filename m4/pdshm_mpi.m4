# PDSHM_MPI: the optional MPI component (libpdshm-mpi, include/pdshm-mpi.h,
# pdshm-mpi.pc; pdshm.mpi in Python).
#
# Finds MPI's C flags and libraries: pkg-config's ompi-c (OpenMPI), else
# the wrapper compiler's own account of them (mpicc --showme:compile and
# --showme:link, OpenMPI's; -compile_info / -link_info, MPICH's), then links
# a program that splits a communicator by shared memory.  Sets have_mpi=yes,
# or have_mpi=no with the reason in pdshm_mpi_why.  --without-mpi skips it;
# --with-mpi makes a missing MPI an error.  Substitutes MPI_CFLAGS, MPI_LIBS
# and MPIRUN (the launcher of the tests, empty when none is found).
AC_DEFUN([PDSHM_MPI], [
AC_ARG_WITH([mpi],
  [AS_HELP_STRING([--without-mpi],
    [do not build libpdshm-mpi (default: build it when MPI is found: pkg-config ompi-c or mpicc)])],
  [with_mpi=$withval], [with_mpi=auto])
have_mpi=no
pdshm_mpi_why=
AS_IF([test "x$with_mpi" = xno], [pdshm_mpi_why="disabled by --without-mpi"], [
  PKG_CHECK_MODULES([MPI], [ompi-c], [pdshm_mpi_found="pkg-config ompi-c"], [
    AC_PATH_PROG([MPICC], [mpicc])
    AS_IF([test -n "$MPICC"], [
      AS_IF([MPI_CFLAGS=`$MPICC --showme:compile 2>/dev/null` && MPI_LIBS=`$MPICC --showme:link 2>/dev/null`],
        [pdshm_mpi_found="$MPICC --showme"],
      [MPI_CFLAGS=`$MPICC -compile_info 2>/dev/null | sed 's/^[[^ ]]* //'` && MPI_LIBS=`$MPICC -link_info 2>/dev/null | sed 's/^[[^ ]]* //'`],
        [pdshm_mpi_found="$MPICC -link_info"],
        [pdshm_mpi_found=])])])
  AS_IF([test -z "$pdshm_mpi_found"],
    [pdshm_mpi_why="no MPI (pkg-config ompi-c or mpicc; apt-get install libopenmpi-dev)"], [
    AC_MSG_CHECKING([whether MPI links (from $pdshm_mpi_found)])
    pdshm_save_CFLAGS=$CFLAGS
    pdshm_save_LIBS=$LIBS
    CFLAGS="$CFLAGS $MPI_CFLAGS"
    LIBS="$MPI_LIBS $LIBS"
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]], [[
      MPI_Comm c;
      MPI_Init(0, 0);
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &c);
      return MPI_Finalize();]])],
      [have_mpi=yes; AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no]); pdshm_mpi_why="MPI from $pdshm_mpi_found does not link an MPI-3 program"])
    CFLAGS=$pdshm_save_CFLAGS
    LIBS=$pdshm_save_LIBS])])
AS_IF([test "x$have_mpi" = xno && test "x$with_mpi" = xyes],
  [AC_MSG_ERROR([--with-mpi: $pdshm_mpi_why])])
AC_PATH_PROG([MPIRUN], [mpirun])
AC_SUBST([MPI_CFLAGS])
AC_SUBST([MPI_LIBS])
AC_SUBST([MPIRUN])
AM_CONDITIONAL([HAVE_MPI], [test "x$have_mpi" = xyes])
])
