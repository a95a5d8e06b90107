/* world.h - a live multi-process segment that the introspection suites
 * build and compare every view with (kid.h's segment g_name / g_seg). */
#ifndef PDSHM_TEST_WORLD_H
#define PDSHM_TEST_WORLD_H

#include "kid.h"
#include "model/model.h"

/* The test's own part: params/fc (W, b), data (x, shared-locked by us), a
 * variable "step" in the root; kids add an anonymous scope each. */
struct world {
  pdshm_scope *root, *params, *fc, *data;
  pdshm_var *w, *b, *x, *step;
  struct kid live, dead;      /* live: holds W exclusively; dead: killed     */
  uint64_t live_scope_id, dead_scope_id;
};

/* Makes the segment (16 MiB, 8 slots) and builds the world in it. */
void world_build(struct world *wd);
/* Kills the live kid, reaps, releases ours; the segment checks clean. */
void world_end(struct world *wd);
/* A tensor variable (ndim < 0: left empty) with an optional label. */
pdshm_var *mk_tensor(pdshm_scope *s, const char *name, pdshm_dtype dt, int ndim,
                     const int64_t *dims, const char *label);
/* The id of the scope a handle holds. */
uint64_t scope_id(pdshm_scope *s);
/* A read-only attachment of g_name. */
pdshm_seg *attach_ro(void);

#endif
