/*
 * tensor_pins.c - pins: a process's hold on a tensor buffer, which keeps the buffer
 * allocated after its variable lets go of it (pdshm.h, "Pins").
 *
 * Owns: struct pdshm_pin (private) and the PIN records' lifetime; what the
 * heap lock guards (targets, counts, orphans) is heap_pins.c's.
 *
 * Invariants:
 *  1. A pin is one PIN block, owned by the pinning slot and never published,
 *     and one private handle on the process's list of pins, which detach
 *     walks to drop what is left.
 *  2. Taking a pin: the record is allocated first, with no lock held (an
 *     empty record counts for nothing); then, under the variable's scope lock
 *     (it keeps the buffer hooked: no erase, resize or destruction of the
 *     scope can free it meanwhile) and the heap lock inside it, the record
 *     targets the buffer and the buffer's count rises.
 *  3. Dropping a pin: under the heap lock the record lets go and the count
 *     falls, and an orphan losing its last pin is freed there; then the
 *     record is freed.  A death in between leaves an empty record to the
 *     reaper's sweep, which also drops the pins of a dead slot's records.
 *  4. A handle inherited across fork() never drops the parent's pin.
 *     pdshm_pin_inherit gives the child a pin of its own on the same buffer,
 *     only while the parent's record still holds that buffer.
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "model/model.h"

struct pdshm_pin {
  pdshm_seg *seg;              /* the attachment that pinned                 */
  pdshm_off_t rec;             /* its PIN record (payload)                   */
  pdshm_off_t target;          /* the pinned TENSOR payload                  */
  uint32_t slot;               /* the slot owning rec                        */
  uint64_t epoch;              /* that slot's epoch when pinned              */
  uint64_t forkgen;            /* pdshm__forkgen when pinned                 */
  uint64_t file_dev, file_ino; /* the segment file (pdshm_pin_inherit)       */
  pdshm_tensor_view view;
  struct pdshm_pin *next, *prev; /* the process's pins                       */
};

/* ---- the process's pins ---------------------------------------------------------- */

static pthread_mutex_t pin_list_mu = PTHREAD_MUTEX_INITIALIZER;
static pdshm_pin *pin_list;
static pthread_once_t pin_once = PTHREAD_ONCE_INIT;

/* A fork child must find the list's mutex free, whoever held it. */
static void pin_atfork_prepare(void) { pthread_mutex_lock(&pin_list_mu); }
static void pin_atfork_release(void) { pthread_mutex_unlock(&pin_list_mu); }
static void pin_register_atfork(void) {
  pthread_atfork(pin_atfork_prepare, pin_atfork_release, pin_atfork_release);
}

static uint64_t pin_forkgen(void) {
  return atomic_load_explicit(&pdshm__forkgen, memory_order_relaxed);
}

static pdshm_pin *pin_new(pdshm_seg *seg) {
  pthread_once(&pin_once, pin_register_atfork);
  pdshm_pin *p = pdshm__zalloc(sizeof *p);
  if (!p) return NULL;
  p->seg = seg;
  p->slot = seg->slot;
  p->epoch = atomic_load_explicit(&pdshm__slot(seg, seg->slot)->epoch, memory_order_relaxed);
  p->forkgen = pin_forkgen();
  p->file_dev = seg->dev;
  p->file_ino = seg->ino;
  return p;
}

static void pin_link(pdshm_pin *p) {
  pthread_mutex_lock(&pin_list_mu);
  p->next = pin_list;
  p->prev = NULL;
  if (pin_list) pin_list->prev = p;
  pin_list = p;
  pthread_mutex_unlock(&pin_list_mu);
}

static void pin_unlink_locked(pdshm_pin *p) {
  if (p->prev) p->prev->next = p->next;
  else if (pin_list == p) pin_list = p->next;
  if (p->next) p->next->prev = p->prev;
  p->next = p->prev = NULL;
}

static void pin_unlink(pdshm_pin *p) {
  pthread_mutex_lock(&pin_list_mu);
  pin_unlink_locked(p);
  pthread_mutex_unlock(&pin_list_mu);
}

/* ---- taking a pin ------------------------------------------------------------------ */

static struct pdshm_var_rec *pin_var(const pdshm_var *v) {
  return (struct pdshm_var_rec *)(uintptr_t)(const void *)v;
}

static void pin_describe(const pdshm_seg *seg, const struct pdshm_var_rec *r, pdshm_pin *p) {
  pdshm_tensor_view *w = &p->view;
  w->data = seg->base + r->data;
  w->nbytes = (size_t)r->nbytes;
  w->dtype = (int)(r->dtype_ndim & 0xffffffffu);
  w->ndim = (int)(r->dtype_ndim >> 32);
  memcpy(w->dims, r->dims, sizeof w->dims);
  w->version = atomic_load_explicit(&r->version, memory_order_acquire);
  p->target = r->buf;
}

/* Invariant 2, once the record exists: scope lock, then heap lock. */
static int pin_hooked(pdshm_seg *seg, struct pdshm_var_rec *r, pdshm_pin *p) {
  const uint32_t lk = pdshm__var_scope_lock(seg, r);
  if (!lk) return pdshm__fail(PDSHM_ESTALE, "variable was erased");
  int rc = pdshm__lock(seg, lk);
  if (rc) return rc;
  PDSHM_CRASHPOINT("pin.scope.locked");
  if (!pdshm__var_live_locked(seg, r, lk)) rc = pdshm__fail(PDSHM_ESTALE, "variable was erased");
  else if (r->vtype != PDSHM_V_TENSOR) rc = pdshm__fail(PDSHM_ETYPE, "not a tensor");
  else if (!pdshm__tensor_span_ok(seg, r))
    rc = pdshm__fail(PDSHM_EBADSEG, "the tensor's bytes lie outside its buffer (damaged)");
  else if (!(rc = pdshm__lock(seg, PDSHM_LOCK_HEAP))) {
    rc = pdshm__pin_take_locked(seg, p->rec, r->buf);
    pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  }
  if (!rc) pin_describe(seg, r, p);
  pdshm__unlock(seg, lk);
  return rc;
}

/* A PIN record for p, then `take` under the locks it needs; on failure the
 * record is freed again and p too. */
static int pin_with_record(pdshm_seg *seg, pdshm_pin *p,
                           int (*take)(pdshm_seg *, pdshm_pin *, const void *),
                           const void *arg) {
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  int rc = pdshm__alloc(seg, ln, sizeof(struct pdshm_pin_rec), PDSHM_T_PIN, &p->rec);
  if (!rc) {
    PDSHM_CRASHPOINT("pin.record.allocated");
    PDSHM_AT(seg->base, p->rec, struct pdshm_pin_rec)->epoch = p->epoch;
    rc = take(seg, p, arg);
    if (rc) pdshm__free(seg, ln, p->rec);
  }
  pdshm__lane_put(ln);
  if (rc) pdshm__xfree(p);
  else pin_link(p);
  return rc;
}

static int pin_take_var(pdshm_seg *seg, pdshm_pin *p, const void *arg) {
  return pin_hooked(seg, pin_var(arg), p);
}

PDSHM_API int pdshm_tensor_pin(pdshm_var *v, pdshm_pin **out, pdshm_tensor_view *view) {
  int rc;
  pdshm__fail_clear();
  pdshm_seg *seg = pdshm__var_seg(v, &rc);
  if (!seg) return rc;
  if (!out) return pdshm__fail(PDSHM_EINVAL, "NULL out pointer");
  if (pin_var(v)->vtype != PDSHM_V_TENSOR) return pdshm__fail(PDSHM_ETYPE, "not a tensor");
  pdshm_pin *p = pin_new(seg);
  if (!p) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  if ((rc = pin_with_record(seg, p, pin_take_var, v))) return rc;
  if (view) *view = p->view;
  *out = p;
  return 0;
}

PDSHM_API const pdshm_tensor_view *pdshm_pin_view(const pdshm_pin *p) {
  return p ? &p->view : NULL;
}

/* ---- dropping a pin ---------------------------------------------------------------- */

/* Invariant 3. */
static int pin_drop(pdshm_pin *p) {
  pdshm_seg *seg = p->seg;
  int rc = pdshm__lock(seg, PDSHM_LOCK_HEAP);
  if (rc) return rc;
  pdshm_off_t orphan = pdshm__pin_drop_locked(seg, p->rec);
  if (orphan) {
    PDSHM_CRASHPOINT("pin.unpin.last");
    pdshm__heap_release_locked(seg, orphan);
  }
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  PDSHM_CRASHPOINT("pin.unpin.dropped");
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  pdshm__free(seg, ln, p->rec);
  pdshm__lane_put(ln);
  return 0;
}

/* Invariant 4: the pin was taken before a fork() that made this process. */
static bool pin_inherited(const pdshm_pin *p) { return p->forkgen != pin_forkgen(); }

PDSHM_API int pdshm_tensor_unpin(pdshm_pin *p) {
  pdshm__fail_clear();
  return pdshm__tensor_unpin(p);
}

int pdshm__tensor_unpin(pdshm_pin *p) {
  if (!p) return pdshm__fail(PDSHM_EINVAL, "NULL pin");
  int rc = pin_inherited(p)
               ? pdshm__fail(PDSHM_EFORKED, "pin was taken by the parent process")
               : pin_drop(p);
  pin_unlink(p);
  pdshm__xfree(p);
  return rc;
}

void pdshm__pin_drop_all(pdshm_seg *seg) {
  pdshm_pin *mine = NULL;
  pthread_mutex_lock(&pin_list_mu);
  for (pdshm_pin *p = pin_list, *next; p; p = next) {
    next = p->next;
    if (p->seg != seg) continue;
    pin_unlink_locked(p);
    p->next = mine;
    mine = p;
  }
  pthread_mutex_unlock(&pin_list_mu);
  bool may = pdshm__seg_writable(seg) == 0;
  for (pdshm_pin *p = mine, *next; p; p = next) {
    next = p->next;
    if (may && !pin_inherited(p)) pin_drop(p);
    pdshm__xfree(p);
  }
}

/* ---- inheriting a pin across fork() ------------------------------------------------- */

/* Heap lock held: the parent's record still pins its buffer. */
static bool pin_parent_holds(const pdshm_seg *seg, const pdshm_pin *in) {
  if (in->slot >= seg->hdr->max_procs ||
      !pdshm__block_live(seg, in->rec, PDSHM_T_PIN, sizeof(struct pdshm_pin_rec)) ||
      pdshm__blk_owner(pdshm__blk(seg, in->rec)) != in->slot + 1)
    return false;
  const struct pdshm_pin_rec *r = PDSHM_AT(seg->base, in->rec, const struct pdshm_pin_rec);
  return r->target == in->target &&
         atomic_load(&pdshm__slot(seg, in->slot)->epoch) == in->epoch;
}

static int pin_take_inherited(pdshm_seg *seg, pdshm_pin *p, const void *arg) {
  const pdshm_pin *in = arg;
  int rc = pdshm__lock(seg, PDSHM_LOCK_HEAP);
  if (rc) return rc;
  rc = pin_parent_holds(seg, in) ? pdshm__pin_take_locked(seg, p->rec, in->target)
                                 : pdshm__fail(PDSHM_ESTALE, "the parent's pin is gone");
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  return rc;
}

PDSHM_API int pdshm_pin_inherit(pdshm_seg *seg, const pdshm_pin *inherited, pdshm_pin **out) {
  pdshm__fail_clear();
  int rc = pdshm__seg_writable(seg);
  if (rc) return rc;
  if (!inherited || !out) return pdshm__fail(PDSHM_EINVAL, "NULL pin or out pointer");
  if (!pin_inherited(inherited))
    return pdshm__fail(PDSHM_EINVAL, "pin was not inherited across fork()");
  if (inherited->file_dev != seg->dev || inherited->file_ino != seg->ino)
    return pdshm__fail(PDSHM_EINVAL, "pin is of another segment than \"%s\"", seg->name);
  pdshm_pin *p = pin_new(seg);
  if (!p) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  p->view = inherited->view;
  p->target = inherited->target;
  if ((rc = pin_with_record(seg, p, pin_take_inherited, inherited))) return rc;
  *out = p;
  return 0;
}
