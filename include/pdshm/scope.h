/* pdshm/scope.h - scopes: the root, children, handles, unlinking. */
#ifndef PDSHM_SCOPE_H
#define PDSHM_SCOPE_H

#include "pdshm/base.h"    /* PDSHM_API, the C types */
#include "pdshm/segment.h" /* pdshm_seg */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Scopes ------------------------------------------------------------- */
/*
 * A pdshm_scope * is a handle that owns one reference; release it with
 * pdshm_scope_release.  A scope lives while a handle, a child scope, or (for
 * a named scope) its link in the parent references it:
 *  - an anonymous scope (name NULL) is a process's local scope, reclaimed with
 *    its variables and buffers when its last handle is released or its holder
 *    dies;
 *  - a named scope is published: it outlives its creator until it is unlinked
 *    (pdshm_scope_unlink, or pdshm_scope_drop_kids on its parent; either
 *    unlinks the whole named subtree) and its last handle is gone.  Its parent
 *    must be the root or a linked named scope.
 * Names: 1 to PDSHM_NAME_MAX bytes, no '/' in scope names.
 */
typedef struct pdshm_scope pdshm_scope;
typedef struct pdshm_var pdshm_var; /* lives in the segment; borrowed          */
typedef struct { uint64_t off, gen; } pdshm_varref; /* weak                      */

/* A new handle on the global scope. */
PDSHM_API int pdshm_root(pdshm_seg *seg, pdshm_scope **out);
/* A child of parent.  EINVAL for an empty name or one with a '/', or a named
 * child of an anonymous parent; ENAMETOOLONG; ESTALE for a named child of an
 * unlinked parent; EEXIST for a sibling of the same name. */
PDSHM_API int pdshm_scope_new(pdshm_scope *parent, const char *name, pdshm_scope **out);
/* A new handle on the named scope at path ("params/fc") from the root; ""
 * is the root.  ENOENT, EINVAL (empty component), ENAMETOOLONG. */
PDSHM_API int pdshm_scope_open(pdshm_seg *seg, const char *path, pdshm_scope **out);
/* A second handle on the same scope. */
PDSHM_API int pdshm_scope_dup(pdshm_scope *s, pdshm_scope **out);
/* Drops the handle's reference (destroying the scope if it was the last) and
 * frees the handle, also on error.  Errors: EINVAL for NULL or a handle
 * whose record in the segment is damaged; EFORKED, which changes nothing in
 * the segment (the reference is the parent process's); ENOTRECOVERABLE or
 * EBADSEG when a lock's repair or the destruction failed: the reference, or
 * what is left of the destruction, is then released by this attachment's
 * detach or its reaper. */
PDSHM_API int pdshm_scope_release(pdshm_scope *s);
/* A new handle on the parent; ENOENT at the root. */
PDSHM_API int pdshm_scope_parent(pdshm_scope *s, pdshm_scope **out);
/* Unlinks the named child (and its named subtree, one scope at a time after
 * the child).  ENOENT when parent has no child of that name; EINVAL,
 * ENAMETOOLONG for a bad name.  A failure once the child is unlinked
 * (ENOTRECOVERABLE, EBADSEG) leaves it unlinked, and the rest of its subtree
 * is unlinked by this attachment's detach or its reaper. */
PDSHM_API int pdshm_scope_unlink(pdshm_scope *parent, const char *name);
/* Unlinks every child, one at a time: they can no longer be opened or
 * listed; handles that others hold stay usable until released.  The scope's
 * variables stay.  A failure (ENOTRECOVERABLE, EBADSEG) leaves the children
 * already unlinked so and the others linked; the named subtrees of those
 * unlinked are unlinked by this attachment's detach or its reaper. */
PDSHM_API int pdshm_scope_drop_kids(pdshm_scope *s);
/* The scope's name, "" for an anonymous one or the root. */
PDSHM_API const char *pdshm_scope_name(const pdshm_scope *s);

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_SCOPE_H */
