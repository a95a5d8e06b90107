/*
 * kept.c - the answers of a Scope's lookups by name, kept while they hold.
 *
 * find_var is what a training step calls most, with the same few names, on
 * a scope whose tables rarely change.  pdshm_find_var_now stamps its answer
 * with the change counts of the tables it read; while they stand still
 * (pdshm_find_stamp_holds, a load per table), the same lookup would give
 * the same answer, so the Var (or None) found last is returned again with
 * no lookup at all.  A stamp points into the attachment the scope's handle
 * lives in: everything kept goes when that handle goes (a release, a
 * detach, a fork child reopening it), through pdshmpy_kept_clear.
 *
 * The entries are direct-mapped by the name's hash: a name that collides
 * with another only costs a lookup.  Everything here runs under the GIL.
 */
#include "pdshmpy.h"

static pdshmpy_kept *kept_entry(pdshmpy_kept *kept, PyObject *name, int up) {
  Py_hash_t h = PyObject_Hash(name); /* an exact str: cached, never fails */
  return &kept[((size_t)h ^ (size_t)up) % PDSHMPY_NAMES_KEPT];
}

PyObject *pdshmpy_kept_get(pdshmpy_scope *sc, PyObject *name, int up) {
  if (!sc->kept || !PyUnicode_CheckExact(name)) return NULL;
  const pdshmpy_kept *e = kept_entry(sc->kept, name, up);
  if (!e->name || e->up != up) return NULL;
  if (e->name != name && PyUnicode_Compare(e->name, name) != 0) return NULL;
  if (!pdshm_find_stamp_holds(&e->stamp)) return NULL;
  return Py_NewRef(e->var);
}

void pdshmpy_kept_put(pdshmpy_scope *sc, PyObject *name, int up, PyObject *answer,
                      const pdshm_find_stamp *stamp) {
  if (!PyUnicode_CheckExact(name)) return;
  if (!sc->kept && !(sc->kept = PyMem_Calloc(PDSHMPY_NAMES_KEPT, sizeof *sc->kept))) return;
  pdshmpy_kept *e = kept_entry(sc->kept, name, up);
  PyObject *old_name = e->name, *old_answer = e->var;
  e->name = Py_NewRef(name);
  e->var = Py_NewRef(answer);
  e->up = up;
  e->stamp = *stamp;
  Py_XDECREF(old_name); /* last: a Var's dealloc sees the entry whole */
  Py_XDECREF(old_answer);
}

void pdshmpy_kept_clear(pdshmpy_scope *sc) {
  pdshmpy_kept *kept = sc->kept;
  if (!kept) return;
  sc->kept = NULL; /* first: the decrefs below find nothing kept */
  for (int i = 0; i < PDSHMPY_NAMES_KEPT; i++) {
    Py_XDECREF(kept[i].name);
    Py_XDECREF(kept[i].var);
  }
  PyMem_Free(kept);
}
