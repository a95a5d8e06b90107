/*
 * attach_list.c - this process's attachments: the list a fork() child walks,
 * and the lookup of the attachment a variable pointer belongs to.
 *
 * Owns: the list (process memory), pdshm__forkgen, pdshm__seg_list_gen, each
 * thread's pdshm__seg_last and the fork handlers.
 *
 * Invariants:
 *  1. Every attachment of the process is on the list from the end of its
 *     create or attach to the start of its detach; the list changes only
 *     under seg_list_mu, and every change bumps pdshm__seg_list_gen.
 *  2. In a fork child, pdshm__forkgen is bumped before anything else, so
 *     every handle inherited from the parent answers PDSHM_EFORKED
 *     (attach_state.c), and each one is mapped again or left unmapped
 *     (attach_inherit.c; segment.c, invariant 4).
 */
#define PDSHM_LAYER 1 /* attach/ (lib/LAYERS) */
#include "config.h"

#include "attach/attach.h"

_Atomic uint64_t pdshm__forkgen;

static pthread_mutex_t seg_list_mu = PTHREAD_MUTEX_INITIALIZER;
static pdshm_seg *seg_list;
_Atomic uint64_t pdshm__seg_list_gen; /* attach_list.h */
PDSHM_TLS_HOT struct pdshm_seg_last pdshm__seg_last;

static void seg_atfork_prepare(void) { pthread_mutex_lock(&seg_list_mu); }
static void seg_atfork_parent(void) { pthread_mutex_unlock(&seg_list_mu); }

/* The child must not keep its parent's slots alive: OFD locks belong to the
 * open file description, which the inherited descriptors share.  Each
 * handle keeps its address range, mapped again if it can be (invariant 2). */
static void seg_atfork_child(void) {
  atomic_fetch_add(&pdshm__forkgen, 1);
  for (pdshm_seg *s = seg_list; s; s = s->next) pdshm__seg_inherit(s);
  atomic_fetch_add_explicit(&pdshm__seg_list_gen, 1, memory_order_release);
  pthread_mutex_unlock(&seg_list_mu);
}

void pdshm__seg_list_atfork(void) {
  pthread_atfork(seg_atfork_prepare, seg_atfork_parent, seg_atfork_child);
}

/* Newest first: a fork child's new attachment may be mapped over the range
 * of an inherited handle that could not be mapped again, and must win the
 * lookups of pdshm__seg_of (whose remembered answers the new generation ends). */
void pdshm__seg_list_add(pdshm_seg *seg) {
  static uint64_t made;
  pthread_mutex_lock(&seg_list_mu);
  seg->id = ++made;
  atomic_fetch_add_explicit(&pdshm__seg_list_gen, 1, memory_order_release);
  seg->next = seg_list;
  seg_list = seg;
  pthread_mutex_unlock(&seg_list_mu);
}

void pdshm__seg_list_remove(pdshm_seg *seg) {
  pthread_mutex_lock(&seg_list_mu);
  atomic_fetch_add_explicit(&pdshm__seg_list_gen, 1, memory_order_release);
  for (pdshm_seg **p = &seg_list; *p; p = &(*p)->next)
    if (*p == seg) {
      *p = seg->next;
      break;
    }
  pthread_mutex_unlock(&seg_list_mu);
}

bool pdshm__seg_list_with(uint64_t id, void (*fn)(pdshm_seg *seg, void *arg), void *arg) {
  pthread_mutex_lock(&seg_list_mu);
  pdshm_seg *s = seg_list;
  while (s && s->id != id) s = s->next;
  if (s) fn(s, arg);
  pthread_mutex_unlock(&seg_list_mu);
  return s != NULL;
}

/* p is compared, never read (in a fork child the range may be unmapped).
 * The answer and the generation it holds for are read under the mutex: a
 * detach that follows bumps the generation, which ends the answer. */
pdshm_seg *pdshm__seg_find(const void *p) {
  const uint8_t *b = p;
  pdshm_seg *found = NULL;
  pthread_mutex_lock(&seg_list_mu);
  for (pdshm_seg *s = seg_list; s && !found; s = s->next)
    if (b >= s->base && b < s->base + s->size) found = s;
  uint64_t gen = atomic_load_explicit(&pdshm__seg_list_gen, memory_order_relaxed);
  pthread_mutex_unlock(&seg_list_mu);
  pdshm__seg_last.seg = found;
  pdshm__seg_last.gen = gen;
  return found;
}
