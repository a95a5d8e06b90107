/*
 * group_pin.c - the pin a membership keeps on the tensor of its last
 * collective, so that a training loop's collectives on the same tensor
 * call after call take no lock for it (a pin takes the scope's lock and
 * the heap's, and letting it go the heap's again: shared by every process,
 * they were most of a small allreduce's time).
 *
 * Owns: the pin fields of struct pdshm_group.
 *
 * Invariants:
 *  1. While the membership keeps the pin of buffer B, B is allocated (an
 *     orphan once its variable let go of it: heap_pins.c) and no resize
 *     of any variable reuses it (tensor.c, invariant 3): a resize of the
 *     pinned variable gives it another buffer, so its data moves.  So the
 *     variable whose record has the kept generation and whose data is
 *     still where the pin's view (pdshm_pin_view) has it holds B, with the
 *     dtype and size of that view.  The record is read without a lock (each
 *     word whole): a variable erased meanwhile is the caller's race, as for
 *     any call, and the collective then works on B, which stays allocated.
 *  2. The pin is let go when a collective comes with another buffer, and
 *     at the leave; at a detach, the leave comes before the process's
 *     remaining pins are dropped (segment.c), a forked child never drops
 *     it (tensor_pins.c, invariant 4).
 */
#define PDSHM_LAYER 6 /* groups/ (lib/LAYERS) */
#include "config.h"

#include "groups/groups.h"

int pdshm__group_pin(struct pdshm_group *gr, pdshm_var *v, pdshm_tensor_view *view) {
  const struct pdshm_var_rec *r = pdshm__var_rec(v);
  /* data as the journal stores it, one whole word (journal.c) */
  pdshm_off_t data = atomic_load_explicit((_Atomic pdshm_off_t *)&r->data, memory_order_relaxed);
  if (gr->pin && r == gr->pin_rec && r->gen == gr->pin_gen &&
      gr->seg->base + data == pdshm_pin_view(gr->pin)->data) {
    *view = *pdshm_pin_view(gr->pin);
    return 0;
  }
  pdshm__group_unpin(gr);
  int rc = pdshm_tensor_pin(v, &gr->pin, view);
  if (rc) {
    gr->pin = NULL;
    return rc;
  }
  gr->pin_rec = r;
  gr->pin_gen = r->gen;
  return 0;
}

void pdshm__group_unpin(struct pdshm_group *gr) {
  if (!gr->pin) return;
  pdshm__tensor_unpin(gr->pin);
  gr->pin = NULL;
}
