/* pdshm/variable.h - variables: lookup, names, labels, operators, locks, versions. */
#ifndef PDSHM_VARIABLE_H
#define PDSHM_VARIABLE_H

#include "pdshm/base.h"    /* PDSHM_API, the C types */
#include "pdshm/segment.h" /* pdshm_seg */
#include "pdshm/scope.h"   /* pdshm_scope, pdshm_var, pdshm_varref */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Variables ---------------------------------------------------------- */
/*
 * A pdshm_var * stays valid until that variable is erased or its scope dies;
 * don't keep it.  Lookups take no lock and write nothing shared: they return
 * a variable that was, at some instant during the call, the one of that name.
 * Using a pdshm_var * that another process or thread erased meanwhile is the
 * caller's race; the edits (set_label, add_reader/writer, pdshm_tensor_resize,
 * pdshm_tensor_pin) check the record under the scope's lock and return
 * ESTALE, changing nothing, when it is no longer a variable; a record already
 * reused for a new variable is that new variable (pdshm_var_ref's generation
 * tells them apart).  The variable locks leave no race: a lock word carries
 * its variable's generation, so pdshm_var_lock and pdshm_var_unlock through a
 * variable erased before or during the call never change a variable made
 * since at the same record (see pdshm_var_lock).
 */
/* Gets the local variable of that name, or creates it (shadowing a parent's).
 * EINVAL for a NULL or empty name; ENAMETOOLONG. */
PDSHM_API int pdshm_var_get(pdshm_scope *s, const char *name, pdshm_var **out);
/* Creates it; EEXIST when the scope already has one of that name; EINVAL,
 * ENAMETOOLONG as pdshm_var_get. */
PDSHM_API int pdshm_var_create(pdshm_scope *s, const char *name, pdshm_var **out);
/* Creates one under a generated name, never reused, never colliding.  Only
 * the common errors; a failure may use up a number of the segment's name
 * counter (never handed out again), and changes nothing else. */
PDSHM_API int pdshm_var_new(pdshm_scope *s, pdshm_var **out);
/* Erases the scope's own variable (ENOENT when not local); EINVAL,
 * ENAMETOOLONG for a bad name. */
PDSHM_API int pdshm_var_erase(pdshm_scope *s, const char *name);
/* Renames the scope's own variable, keeping the object; ENOENT, EEXIST;
 * EINVAL, ENAMETOOLONG for a bad name. */
PDSHM_API int pdshm_var_rename(pdshm_scope *s, const char *from, const char *to);
/* The nearest variable of that name up the parent chain, or NULL. */
PDSHM_API pdshm_var *pdshm_find_var(pdshm_scope *s, const char *name);
/* The scope's own variable of that name, or NULL. */
PDSHM_API pdshm_var *pdshm_find_local_var(pdshm_scope *s, const char *name);
/* What a lookup's answer rests on: the tables it read and the change count
 * each stood at.  Private fields: fill it with pdshm_find_var_now, test it
 * with pdshm_find_stamp_holds. */
#define PDSHM_FIND_STAMP_TABLES 4
typedef struct pdshm_find_stamp {
  const void *count[PDSHM_FIND_STAMP_TABLES];
  uint64_t at[PDSHM_FIND_STAMP_TABLES];
  unsigned n; /* 0: a stamp that never holds */
} pdshm_find_stamp;
/* pdshm_find_var (up != 0) or pdshm_find_local_var (up == 0) that never
 * waits, for a caller that must not block (an interpreter's lock held) and
 * that keeps answers: 0 with *out the variable or NULL, and *stamp what the
 * answer rests on; PDSHM_EBUSY, *out and *stamp unset, when a table it must
 * read is in the middle of a change (call the waiting form then).  EINVAL
 * for a NULL argument, ENAMETOOLONG, and the common errors.  A lookup that
 * reads more than PDSHM_FIND_STAMP_TABLES tables gets a stamp that never
 * holds. */
PDSHM_API int pdshm_find_var_now(pdshm_scope *s, const char *name, int up, pdshm_var **out,
                                 pdshm_find_stamp *stamp);
/* True while the same lookup through the same scope would give the same
 * answer: no table the lookup read has changed since (a change to it now
 * under way counts as one).  Reads a change count per table and writes
 * nothing.  Valid only while the handle the lookup went through is held,
 * and never in a fork child for its parent's stamp (they point into that
 * attachment). */
PDSHM_API int pdshm_find_stamp_holds(const pdshm_find_stamp *stamp);
/* Calls fn for each of the scope's own variables (with that label unless
 * label is NULL) until fn returns nonzero, which is then returned.  The
 * variables are those of one instant before the first call (fn must not
 * erase one that is still to come).  EINVAL for a NULL fn; ENOMEM when no
 * private memory is left for that list. */
PDSHM_API int pdshm_scope_foreach_var(pdshm_scope *s, const char *label,
                                      int (*fn)(pdshm_var *v, void *arg), void *arg);

/* Name and label: "" for NULL and in a fork child (EFORKED). */
PDSHM_API const char *pdshm_var_name(const pdshm_var *v);
/* label NULL or "" clears it.  ENAMETOOLONG. */
PDSHM_API int pdshm_var_set_label(pdshm_var *v, const char *label);
PDSHM_API const char *pdshm_var_label(const pdshm_var *v); /* "" when none */
/* Operators reading / writing the variable (a set: adding twice is a no-op).
 * EINVAL for a NULL or empty op; ENAMETOOLONG. */
PDSHM_API int pdshm_var_add_reader(pdshm_var *v, const char *op);
PDSHM_API int pdshm_var_add_writer(pdshm_var *v, const char *op);
/* Fills ops[0..cap) and returns the count (which may exceed cap); the names
 * stay valid while the variable's list is unchanged.  EINVAL for cap < 0,
 * or a NULL ops with cap > 0.  Works on a read-only attachment. */
PDSHM_API int pdshm_var_readers(const pdshm_var *v, const char **ops, int cap);
PDSHM_API int pdshm_var_writers(const pdshm_var *v, const char **ops, int cap);
/* A robust lock, shared (exclusive == 0) or exclusive; a holder's death
 * releases it (found when a waiter sees the holder's process gone, or by any
 * reap).  EDEADLK when this thread already holds it; ENOMEM when (a thread's
 * first lock) there is no private memory for the thread's table of held
 * locks; ENOLCK when this thread holds 256 variable locks already, the
 * process 256 (all its threads together), or the variable 65535 shared
 * holders; ESTALE when v was erased, before the call or while it waited
 * (unlock then lets go of what lock took, whatever v has become, and touches
 * the word of no variable made since); EBADSEG when the lock's word names
 * holders that no process records (damaged bytes: found after a wait of
 * some milliseconds).  A failure holds nothing.  Holds are
 * per thread: a thread that exits still holding variable locks lets go of
 * them as it exits (a share it cannot give back then, its word frozen by a
 * reaper's recount, goes at the detach); a detach lets go of every hold its
 * attachment's threads had, and a later attachment inherits none. */
PDSHM_API int pdshm_var_lock(pdshm_var *v, int exclusive);
PDSHM_API int pdshm_var_unlock(pdshm_var *v); /* EPERM when not held */
/* Bumped by resize and by each unlock of an exclusive lock. */
PDSHM_API uint64_t pdshm_var_version(const pdshm_var *v);
PDSHM_API pdshm_varref pdshm_var_ref(const pdshm_var *v);
/* The variable, or NULL once it was erased or its scope died. */
PDSHM_API pdshm_var *pdshm_varref_get(pdshm_seg *seg, pdshm_varref r);

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_VARIABLE_H */
