/*
 * pdshmpy_capi.h - the C API that pdshm._pdshm offers other extension
 * modules of the package (pdshm._pdshm_mpi): a table of functions in the
 * capsule pdshm._pdshm._c_api.  Private to the package: the table's
 * version must equal PDSHMPY_CAPI_VERSION.
 *
 *   PyObject *mod = PyImport_ImportModule("pdshm._pdshm");
 *   const pdshmpy_capi *api = PyCapsule_Import(PDSHMPY_CAPI_CAPSULE, 0);
 *
 * Every function takes that module (for its exception types) and is called
 * with the GIL held.
 */
#ifndef PDSHMPY_CAPI_H
#define PDSHMPY_CAPI_H

#include <Python.h>

#include "pdshm.h"

#define PDSHMPY_CAPI_CAPSULE "pdshm._pdshm._c_api"
#define PDSHMPY_CAPI_VERSION 1

typedef struct pdshmpy_capi {
  unsigned version;
  /* The reference of the variable obj names, to resolve through any
   * attachment of segment's segment (pdshm_varref_get): obj is a Var of a
   * segment of segment's name, or a whole-tensor view made by segment (a
   * pdshm.Segment; see Group.holds).  0, or -1 with TypeError (segment is no
   * Segment), pdshm.InvalidArgument (obj names no such variable) or
   * pdshm.Stale (the variable was erased). */
  int (*var_ref)(PyObject *module, PyObject *segment, PyObject *obj, pdshm_varref *out);
  /* Raises the pdshm exception of rc (a negative PDSHM_E* code: PeerDied
   * for EOWNERDEAD, ...) with pdshm_strerror(rc) and msg; returns NULL. */
  PyObject *(*raise)(PyObject *module, int rc, const char *msg);
} pdshmpy_capi;

#endif /* PDSHMPY_CAPI_H */
