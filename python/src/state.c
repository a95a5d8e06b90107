/*
 * state.c - what every object file of the module asks of the module itself:
 * the module state of a type, this process's fork generation, numpy.asarray.
 * Kept apart from module.c (which calls every file) so that no file calls up.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "pdshmpy.h"

pdshmpy_state *pdshmpy_state_of_type(PyTypeObject *tp) {
  return (pdshmpy_state *)PyType_GetModuleState(tp);
}

/* ---- fork generation ---------------------------------------------------------------- */

/* Process-wide, like the fork itself: shared by every interpreter. */
static atomic_ulong forkgen;
static pthread_once_t forkgen_once = PTHREAD_ONCE_INIT;

static void forkgen_bump(void) { atomic_fetch_add_explicit(&forkgen, 1, memory_order_relaxed); }
static void forkgen_register(void) { pthread_atfork(NULL, NULL, forkgen_bump); }

void pdshmpy_forkgen_init(void) { pthread_once(&forkgen_once, forkgen_register); }

unsigned long pdshmpy_forkgen(void) {
  return atomic_load_explicit(&forkgen, memory_order_relaxed);
}

/* ---- numpy ---------------------------------------------------------------------------- */

PyObject *pdshmpy_np_asarray(pdshmpy_state *st) {
  if (!st->np_asarray) {
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np) return NULL;
    st->np_asarray = PyObject_GetAttrString(np, "asarray");
    Py_DECREF(np);
  }
  return st->np_asarray;
}
