/* test_pin.c - pins: a pinned buffer outlives an erase, a resize, its scope's
 * release and its owner's detach, in this process or another, with every
 * byte intact; its memory comes back at the last unpin, at the pinner's
 * detach, or when the pinner is SIGKILLed and reaped; fork children cannot
 * drop the parent's pin but can take their own (pdshm_pin_inherit); bad calls
 * change nothing. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/model.h"
#include "testutil.h"

#define FLOATS 4096 /* 16 KiB: a lane-cached size class */
#define BIG (1u << 20) /* floats: a 4 MiB buffer, freed straight to the heap */

static char seg_name[PDSHM_SEG_NAME_MAX + 1];
static pdshm_seg *seg;
static pdshm_scope *root;
static uint64_t base_used; /* with the root's table made, before any test var */

static void setup(void) {
  snprintf(seg_name, sizeof seg_name, "%s", tu_name("pin"));
  seg = tu_create_as(seg_name, 16u << 20, 8);
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  pdshm_var *keep;
  ck_assert_int_eq(pdshm_var_create(root, "keep", &keep), 0);
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
  base_used = st.used;
}

static void teardown(void) {
  if (root) pdshm_scope_release(root);
  if (seg) pdshm_detach(seg);
  root = NULL;
  seg = NULL;
  tu_cleanup();
}

static uint64_t used(void) {
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
  return st.used;
}

static pdshm_alloc_info alloc_info(void) {
  pdshm_alloc_info a;
  ck_assert_int_eq(pdshm_inspect_alloc(seg, &a), 0);
  return a;
}

static uint64_t orphans(void) { return alloc_info().orphan_blocks; }

static void clean(void) { ck_assert_int_eq(pdshm_check(seg, stderr), 0); }

static uint64_t my_pins(void) { return tu_my_pins(seg); }

static void intact(const pdshm_tensor_view *w, int64_t n, float seed) {
  ck_assert_uint_eq(w->nbytes, (size_t)n * 4);
  const float *f = w->data;
  for (int64_t i = 0; i < n; i++)
    if (f[i] != (float)i + seed) ck_abort_msg("byte %lld changed", (long long)i * 4);
}

/* ---- one process ------------------------------------------------------------------- */

START_TEST(view_describes_the_tensor) {
  pdshm_var *v;
  int64_t dims[3] = {2, 3, 5};
  ck_assert_int_eq(pdshm_var_create(root, "t", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_I16, 3, dims), 0);
  pdshm_pin *p;
  pdshm_tensor_view w;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, &w), 0);
  ck_assert_ptr_eq(w.data, pdshm_tensor_data(v));
  ck_assert_uint_eq((uintptr_t)w.data % PDSHM_TENSOR_ALIGN, 0);
  ck_assert_uint_eq(w.nbytes, 60);
  ck_assert_int_eq(w.dtype, PDSHM_I16);
  ck_assert_int_eq(w.ndim, 3);
  ck_assert_int_eq(w.dims[2], 5);
  ck_assert_int_eq(w.dims[3], 0);
  ck_assert_uint_eq(w.version, pdshm_var_version(v));
  ck_assert_int_eq(memcmp(pdshm_pin_view(p), &w, sizeof w), 0);
  ck_assert_uint_eq(my_pins(), 1);
  clean();
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  ck_assert_uint_eq(my_pins(), 0);
  ck_assert_ptr_null(pdshm_pin_view(NULL));
  clean();
}
END_TEST

START_TEST(pin_survives_erase) {
  pdshm_var *v = tu_filled(root, "t", FLOATS, 7);
  pdshm_pin *p;
  pdshm_tensor_view w;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, &w), 0);
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  ck_assert_ptr_null(pdshm_find_var(root, "t"));
  tu_filled(root, "other", FLOATS, 100); /* would reuse the buffer were it freed */
  intact(&w, FLOATS, 7);
  ck_assert_uint_eq(orphans(), 1);
  ck_assert_uint_ge(alloc_info().orphan_bytes, FLOATS * 4);
  clean();
  ck_assert_int_eq(pdshm_var_erase(root, "other"), 0);
  ck_assert_uint_gt(used(), base_used);
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  ck_assert_uint_eq(orphans(), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

/* A large buffer goes straight to the heap, not to a lane cache. */
START_TEST(pin_survives_erase_of_a_large_buffer) {
  pdshm_var *v = tu_filled(root, "big", BIG, 3);
  pdshm_pin *p;
  pdshm_tensor_view w;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, &w), 0);
  ck_assert_int_eq(pdshm_var_erase(root, "big"), 0);
  tu_filled(root, "big2", BIG, 11);
  intact(&w, BIG, 3);
  clean();
  ck_assert_int_eq(pdshm_var_erase(root, "big2"), 0);
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

/* A resize of a pinned buffer takes a new one, even when the old would fit. */
START_TEST(pin_survives_resize) {
  pdshm_var *v = tu_filled(root, "t", FLOATS, 1);
  pdshm_pin *p1, *p2;
  pdshm_tensor_view w1, w2;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p1, &w1), 0);
  int64_t same = FLOATS;
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &same), 0);
  ck_assert_ptr_ne(pdshm_tensor_data(v), w1.data);
  ck_assert_uint_gt(pdshm_var_version(v), w1.version);
  memset(pdshm_tensor_data(v), 0xff, FLOATS * 4);
  intact(&w1, FLOATS, 1);
  ck_assert_int_eq(pdshm_tensor_pin(v, &p2, &w2), 0);
  int64_t smaller = 10;
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &smaller), 0);
  ck_assert_uint_eq(orphans(), 2);
  clean();
  ck_assert_int_eq(pdshm_tensor_unpin(p2), 0);
  ck_assert_int_eq(pdshm_tensor_unpin(p1), 0);
  ck_assert_uint_eq(orphans(), 0);
  /* unpinned and hooked: a resize that fits reuses the buffer again */
  void *now = pdshm_tensor_data(v);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &smaller), 0);
  ck_assert_ptr_eq(pdshm_tensor_data(v), now);
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

/* Unpinning a buffer still hooked frees nothing. */
START_TEST(unpin_of_a_hooked_buffer_keeps_it) {
  pdshm_var *v = tu_filled(root, "t", FLOATS, 5);
  uint64_t before = used();
  pdshm_pin *a, *b;
  ck_assert_int_eq(pdshm_tensor_pin(v, &a, NULL), 0);
  ck_assert_int_eq(pdshm_tensor_pin(v, &b, NULL), 0);
  ck_assert_uint_eq(my_pins(), 2);
  ck_assert_int_eq(pdshm_tensor_unpin(a), 0);
  ck_assert_int_eq(pdshm_tensor_unpin(b), 0);
  ck_assert_uint_eq(used(), before);
  ck_assert_uint_eq(orphans(), 0);
  pdshm_tensor_view w = {0};
  w.data = pdshm_tensor_data(v);
  w.nbytes = FLOATS * 4;
  intact(&w, FLOATS, 5);
  clean();
}
END_TEST

START_TEST(pin_survives_scope_release) {
  pdshm_scope *local;
  ck_assert_int_eq(pdshm_scope_new(root, NULL, &local), 0);
  pdshm_var *v = tu_filled(local, "t", FLOATS, 9);
  pdshm_pin *p;
  pdshm_tensor_view w;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, &w), 0);
  ck_assert_int_eq(pdshm_scope_release(local), 0);
  intact(&w, FLOATS, 9);
  ck_assert_uint_eq(orphans(), 1);
  clean();
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

/* Tensor invariant 2: a 0-byte tensor has a buffer, pinned like any. */
START_TEST(zero_byte_tensor_pins) {
  pdshm_var *v;
  int64_t zero[2] = {4, 0};
  ck_assert_int_eq(pdshm_var_create(root, "z", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F64, 2, zero), 0);
  pdshm_pin *p;
  pdshm_tensor_view w;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, &w), 0);
  ck_assert_ptr_nonnull(w.data);
  ck_assert_uint_eq(w.nbytes, 0);
  ck_assert_int_eq(pdshm_var_erase(root, "z"), 0);
  ck_assert_uint_eq(orphans(), 1);
  clean();
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

/* Threads pin and unpin one variable while another resizes it to and fro:
 * every pinned view keeps the bytes it showed; at the end every byte is
 * back. */
#define PIN_THREADS 3
#define PIN_ROUNDS 400

static _Atomic int pin_stop;
static _Atomic int pin_bad;

static void *pinner(void *arg) {
  pdshm_var *v = arg;
  for (int r = 0; r < PIN_ROUNDS && !pin_bad; r++) {
    pdshm_pin *p;
    pdshm_tensor_view w;
    int rc = pdshm_var_lock(v, 0); /* a buffer the resizer has filled */
    if (!rc) rc = pdshm_tensor_pin(v, &p, &w);
    if (!rc) rc = pdshm_var_unlock(v);
    if (rc) {
      pin_bad = 1;
      break;
    }
    /* the resizer fills each new buffer with its length's low byte, and
     * never touches it again once pinned (a resize then takes another) */
    const volatile uint8_t *b = w.data;
    /* while the resizer runs: a sleep, not sched_yield, which on a busy
     * machine gives the processor away for whole time slices */
    for (int look = 0; look < 4; look++, nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL))
      for (size_t j = 0; j < w.nbytes; j++)
        if (b[j] != (uint8_t)w.nbytes) pin_bad = 2;
    if (pdshm_tensor_unpin(p)) pin_bad = 3;
  }
  return NULL;
}

static void *resizer(void *arg) {
  pdshm_var *v = arg;
  /* sizes one buffer fits: unpinned, it is reused (tensor.c, invariant 3) */
  for (int64_t k = 0, n = 1000; !pin_stop && !pin_bad; n = 1000 + ++k % 3) {
    pdshm_var_lock(v, 1); /* pinners pin under a shared lock: filled buffers */
    if (pdshm_tensor_resize(v, PDSHM_U8, 1, &n)) pin_bad = 4;
    memset(pdshm_tensor_data(v), (uint8_t)n, (size_t)n);
    pdshm_var_unlock(v);
  }
  return NULL;
}

START_TEST(threads_pin_while_another_resizes) {
  pdshm_var *v;
  int64_t n = 1;
  ck_assert_int_eq(pdshm_var_create(root, "t", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_U8, 1, &n), 0);
  memset(pdshm_tensor_data(v), 1, 1);
  pthread_t t[PIN_THREADS + 1];
  ck_assert_int_eq(pthread_create(&t[PIN_THREADS], NULL, resizer, v), 0);
  for (int i = 0; i < PIN_THREADS; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, pinner, v), 0);
  for (int i = 0; i < PIN_THREADS; i++) pthread_join(t[i], NULL);
  pin_stop = 1;
  pthread_join(t[PIN_THREADS], NULL);
  ck_assert_int_eq(pin_bad, 0);
  ck_assert_uint_eq(my_pins(), 0);
  ck_assert_uint_eq(orphans(), 0);
  clean();
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  ck_assert_uint_eq(used(), base_used);
}
END_TEST

/* A pin (like every edit) checks the variable under its scope's lock and then
 * relies on it: the destruction of a scope that lost its last handle, which
 * frees its variables, must wait for that lock too, or it frees the buffer
 * the pin is about to count (and whose bytes a collective then writes).
 * Here the test stops the destruction at its first step (the parent's lock)
 * once the last handle is gone, takes the scope's lock as pin_hooked does,
 * and lets the destruction go on while it holds that lock. */
static void *releaser(void *arg) {
  return (void *)(intptr_t)pdshm_scope_release(arg);
}

START_TEST(scope_destruction_waits_for_the_scope_lock) {
  pdshm_scope *local;
  ck_assert_int_eq(pdshm_scope_new(root, NULL, &local), 0);
  pdshm_var *v = tu_filled(local, "t", FLOATS, 4);
  struct pdshm_var_rec *r = (struct pdshm_var_rec *)(void *)v;
  const pdshm_off_t buf = r->buf;
  const uint32_t parent_lk = pdshm__scope_at(seg, root->rec)->lock;
  ck_assert_int_eq(pdshm__lock(seg, parent_lk), 0);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, releaser, local), 0);
  usleep(100000); /* the handle dropped, the destruction waits for parent_lk */
  const uint32_t lk = pdshm__var_scope_lock(seg, r);
  ck_assert_uint_ne(lk, 0);
  ck_assert_int_eq(pdshm__lock(seg, lk), 0);
  ck_assert(pdshm__var_live_locked(seg, r, lk));
  pdshm__unlock(seg, parent_lk);
  usleep(200000); /* time enough to free the variables, were the lock no bar */
  bool live = pdshm__var_live_locked(seg, r, lk);
  uint64_t w = atomic_load_explicit(&pdshm__blk(seg, buf)->word, memory_order_acquire);
  pdshm__unlock(seg, lk);
  void *rc;
  pthread_join(t, &rc);
  ck_assert_int_eq((int)(intptr_t)rc, 0);
  ck_assert_msg(live, "the variable died under its scope's lock");
  ck_assert_msg(pdshm__blk_state(w) == PDSHM_BLK_USED, "its buffer was freed under the lock");
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

/* ---- errors change nothing ------------------------------------------------------------ */

START_TEST(bad_calls_change_nothing) {
  pdshm_var *v;
  pdshm_pin *p = NULL;
  ck_assert_int_eq(pdshm_var_create(root, "empty", &v), 0);
  uint64_t before = used();
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, NULL), PDSHM_ETYPE);
  ck_assert_int_eq(pdshm_tensor_pin(NULL, &p, NULL), PDSHM_EINVAL);
  v = tu_filled(root, "t", 8, 0);
  before = used();
  ck_assert_int_eq(pdshm_tensor_pin(v, NULL, NULL), PDSHM_EINVAL);
  ck_assert_ptr_null(p);
  ck_assert_uint_eq(used(), before);
  ck_assert_int_eq(pdshm_tensor_unpin(NULL), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_pin_inherit(seg, NULL, &p), PDSHM_EINVAL);
  ck_assert_uint_eq(my_pins(), 0);
  clean();
}
END_TEST

START_TEST(read_only_attachment_cannot_pin) {
  pdshm_var *v = tu_filled(root, "t", 8, 0);
  pdshm_options o = {.flags = PDSHM_RDONLY};
  pdshm_seg *ro;
  ck_assert_int_eq(pdshm_attach(seg_name, &o, &ro), 0);
  pdshm_var *rv = pdshm_varref_get(ro, pdshm_var_ref(v));
  ck_assert_ptr_nonnull(rv);
  pdshm_pin *p = NULL;
  ck_assert_int_eq(pdshm_tensor_pin(rv, &p, NULL), PDSHM_EROFS);
  ck_assert_ptr_null(p);
  ck_assert_int_eq(pdshm_detach(ro), 0);
  ck_assert_uint_eq(my_pins(), 0);
  clean();
}
END_TEST

/* No block left for the record: ENOMEM, nothing pinned, nothing taken. */
START_TEST(enomem_changes_nothing) {
  pdshm_var *v = tu_filled(root, "t", FLOATS, 2);
  enum { MAXB = 4096 };
  static pdshm_off_t held[MAXB];
  int n = 0;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  for (size_t size = 8u << 20; size >= 16 && n < MAXB;) {
    if (pdshm__alloc(seg, ln, size, PDSHM_T_RAW, &held[n]) == 0) n++;
    else size /= 2;
  }
  pdshm__lane_put(ln);
  uint64_t before = used();
  pdshm_pin *p = NULL;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, NULL), PDSHM_ENOMEM);
  ck_assert_ptr_null(p);
  ck_assert_uint_eq(used(), before);
  ck_assert_uint_eq(my_pins(), 0);
  ln = pdshm__lane_get(seg);
  while (n) pdshm__free(seg, ln, held[--n]);
  pdshm__lane_put(ln);
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, NULL), 0);
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  clean();
}
END_TEST

/* pdshm_check finds a pin count that disagrees with the records, and an
 * orphan without a pin; nothing else is wrong meanwhile. */
START_TEST(check_finds_bad_pin_counts) {
  pdshm_var *v = tu_filled(root, "t", FLOATS, 0);
  pdshm_pin *p;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, NULL), 0);
  const pdshm_off_t buf = ((struct pdshm_var_rec *)(void *)v)->buf;
  struct pdshm_tensor_buf *t = PDSHM_AT(seg->base, buf, struct pdshm_tensor_buf);
  char *rep = NULL;
  size_t len = 0;
  t->pins = 2;
  FILE *f = open_memstream(&rep, &len);
  ck_assert_int_eq(pdshm_check(seg, f), PDSHM_EBADSEG);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(rep, ": 2 pins, 1 pin records"));
  free(rep);
  t->pins = 1;
  clean();
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  ck_assert_uint_eq(orphans(), 1);
  t->pins = 0;
  f = open_memstream(&rep, &len);
  ck_assert_int_eq(pdshm_check(seg, f), PDSHM_EBADSEG);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(rep, "an orphan with no pin"));
  free(rep);
  t->pins = 1;
  clean();
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  ck_assert_uint_eq(pdshm__tensor_pins(seg, buf, NULL), 0); /* freed */
  ck_assert_uint_eq(used(), base_used);
}
END_TEST

/* A buffer whose block's size word was damaged to reach past the file, and
 * a record whose byte count reaches as far: the bytes lie inside the block
 * as its word says, but not inside the file, and are refused, not handed
 * out.  Nothing changes: the same pin works once the word is mended. */
START_TEST(buffer_reaching_past_the_file_is_ebadseg) {
  pdshm_var *v = tu_filled(root, "t", FLOATS, 0);
  struct pdshm_var_rec *r = (struct pdshm_var_rec *)(void *)v;
  struct pdshm_blk *b = pdshm__blk(seg, r->buf);
  const uint64_t word = atomic_load(&b->word), nbytes = r->nbytes;
  const uint64_t huge = seg->size * 2 / PDSHM_ALIGN * PDSHM_ALIGN;
  atomic_store(&b->word, huge | (word & PDSHM_BLK_FLAGS));
  r->nbytes = seg->size;
  pdshm_pin *p;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, NULL), PDSHM_EBADSEG);
  atomic_store(&b->word, word);
  r->nbytes = nbytes;
  clean();
  ck_assert_uint_eq(my_pins(), 0);
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, NULL), 0);
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
}
END_TEST

/* ---- other processes ------------------------------------------------------------------- */

/* A child that attaches and erases "t" in the root. */
static int erase_t(void *arg) {
  (void)arg;
  pdshm_seg *s;
  pdshm_scope *r;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_root(s, &r)) return 10;
  int rc = pdshm_var_erase(r, "t");
  pdshm_scope_release(r);
  pdshm_detach(s);
  return rc ? 11 : 0;
}

START_TEST(erase_in_another_process) {
  pdshm_var *v = tu_filled(root, "t", FLOATS, 4);
  pdshm_pin *p;
  pdshm_tensor_view w;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, &w), 0);
  ck_assert_int_eq(tu_wait(tu_fork(erase_t, NULL)), 0);
  ck_assert_ptr_null(pdshm_find_var(root, "t"));
  intact(&w, FLOATS, 4);
  ck_assert_uint_eq(orphans(), 1);
  clean();
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

struct duo {
  int ready[2], go[2]; /* pipes: child -> parent, parent -> child */
  float seed;
  int die;             /* the child SIGKILLs itself instead of unpinning */
  int detach;          /* the child detaches without unpinning */
};

/* A child that pins "t", says so, waits for go, then lets go of it as told,
 * checking the bytes first. */
static int pin_t(void *arg) {
  struct duo *d = arg;
  pdshm_seg *s;
  pdshm_scope *r;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_root(s, &r)) return 10;
  pdshm_var *v = pdshm_find_var(r, "t");
  pdshm_pin *p;
  pdshm_tensor_view w;
  if (!v || pdshm_tensor_pin(v, &p, &w)) return 11;
  pdshm_scope_release(r);
  char c = 1;
  if (write(d->ready[1], &c, 1) != 1 || read(d->go[0], &c, 1) != 1) return 12;
  const float *f = w.data;
  for (int i = 0; i < FLOATS; i++)
    if (f[i] != (float)i + d->seed) return 13;
  if (d->die) raise(SIGKILL);
  if (!d->detach && pdshm_tensor_unpin(p)) return 14;
  return pdshm_detach(s) ? 15 : 0;
}

static pid_t duo_start(struct duo *d) {
  ck_assert_int_eq(pipe(d->ready), 0);
  ck_assert_int_eq(pipe(d->go), 0);
  pid_t kid = tu_spawn(pin_t, d);
  char c;
  ck_assert_int_eq(read(d->ready[0], &c, 1), 1);
  return kid;
}

static int duo_finish(struct duo *d, pid_t kid) {
  char c = 1;
  ck_assert_int_eq(write(d->go[1], &c, 1), 1);
  int st = tu_wait(kid);
  close(d->ready[0]), close(d->ready[1]), close(d->go[0]), close(d->go[1]);
  return st;
}

START_TEST(two_pins_from_two_processes) {
  pdshm_var *v = tu_filled(root, "t", FLOATS, 6);
  pdshm_pin *p;
  pdshm_tensor_view w;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, &w), 0);
  struct duo d = {.seed = 6};
  pid_t kid = duo_start(&d);
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  ck_assert_uint_eq(orphans(), 1); /* the child's pin holds it */
  clean();
  ck_assert_int_eq(duo_finish(&d, kid), 0);
  ck_assert_uint_eq(orphans(), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

START_TEST(detach_drops_the_pins) {
  tu_filled(root, "t", FLOATS, 8);
  struct duo d = {.seed = 8, .detach = 1};
  pid_t kid = duo_start(&d);
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  ck_assert_uint_eq(orphans(), 1);
  ck_assert_int_eq(duo_finish(&d, kid), 0);
  ck_assert_uint_eq(orphans(), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

START_TEST(killed_pinner_is_reaped) {
  tu_filled(root, "t", FLOATS, 12);
  struct duo d = {.seed = 12, .die = 1};
  pid_t kid = duo_start(&d);
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  ck_assert_int_eq(duo_finish(&d, kid), 128 + SIGKILL);
  tu_await_dead(seg, 1);
  ck_assert_uint_eq(orphans(), 1); /* until its reaper drops the pin */
  clean();
  unsigned reaped;
  ck_assert_int_eq(pdshm_reap(seg, &reaped), 0);
  ck_assert_uint_eq(reaped, 1);
  ck_assert_uint_eq(orphans(), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

/* The owner's death (or detach) while the buffer is pinned: its scope dies
 * with the reaper (or the detach), the buffer stays. */
struct owner {
  int ready[2], go[2];
  int detach;          /* detach when told, instead of waiting to be killed */
};

static int own_and_die(void *arg) {
  struct owner *o = arg;
  pdshm_seg *s;
  pdshm_scope *r, *local;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_root(s, &r) ||
      pdshm_scope_new(r, "owner", &local))
    return 10;
  int64_t n = FLOATS;
  pdshm_var *v;
  if (pdshm_var_create(local, "t", &v) || pdshm_tensor_resize(v, PDSHM_F32, 1, &n)) return 11;
  float *f = pdshm_tensor_data(v);
  for (int i = 0; i < FLOATS; i++) f[i] = (float)i + 21;
  char c = 1;
  if (write(o->ready[1], &c, 1) != 1) return 12;
  if (!o->detach) pause();
  if (read(o->go[0], &c, 1) != 1) return 13;
  return pdshm_detach(s) ? 14 : 0;
}

START_TEST(owner_death_leaves_the_pinned_buffer) {
  struct owner o = {.detach = _i};
  ck_assert_int_eq(pipe(o.ready), 0);
  ck_assert_int_eq(pipe(o.go), 0);
  pid_t kid = tu_spawn(own_and_die, &o);
  char c = 1;
  ck_assert_int_eq(read(o.ready[0], &c, 1), 1);
  pdshm_scope *owner;
  ck_assert_int_eq(pdshm_scope_open(seg, "owner", &owner), 0);
  pdshm_pin *p;
  pdshm_tensor_view w;
  ck_assert_int_eq(pdshm_tensor_pin(pdshm_find_var(owner, "t"), &p, &w), 0);
  ck_assert_int_eq(pdshm_scope_unlink(root, "owner"), 0);
  ck_assert_int_eq(pdshm_scope_release(owner), 0); /* the kid's handle keeps it */
  if (o.detach) {
    ck_assert_int_eq(write(o.go[1], &c, 1), 1);
    ck_assert_int_eq(tu_wait(kid), 0);
  } else {
    kill(kid, SIGKILL);
    ck_assert_int_eq(tu_wait(kid), 128 + SIGKILL);
    tu_await_dead(seg, 1);
    ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  }
  intact(&w, FLOATS, 21);
  ck_assert_uint_eq(orphans(), 1);
  clean();
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
  close(o.ready[0]), close(o.ready[1]), close(o.go[0]), close(o.go[1]);
}
END_TEST

/* ---- fork ---------------------------------------------------------------------------------- */

static pdshm_pin *g_pin;

static int unpin_inherited(void *arg) {
  (void)arg;
  return pdshm_tensor_unpin(g_pin) == PDSHM_EFORKED ? 0 : 1;
}

START_TEST(fork_child_cannot_drop_the_parents_pin) {
  pdshm_var *v = tu_filled(root, "t", FLOATS, 3);
  pdshm_tensor_view w;
  ck_assert_int_eq(pdshm_tensor_pin(v, &g_pin, &w), 0);
  ck_assert_int_eq(tu_wait(tu_fork(unpin_inherited, NULL)), 0);
  ck_assert_uint_eq(my_pins(), 1);
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  intact(&w, FLOATS, 3);
  clean();
  ck_assert_int_eq(pdshm_tensor_unpin(g_pin), 0);
  ck_assert_uint_eq(used(), base_used);
}
END_TEST

struct heir {
  int ready[2], go[2];
  int expect;          /* what pdshm_pin_inherit must answer */
};

/* The child: waits for go, attaches, inherits g_pin; when that worked,
 * reports, waits again, checks the orphan is still counted, unpins. */
static int inherit_it(void *arg) {
  struct heir *h = arg;
  char c;
  if (read(h->go[0], &c, 1) != 1) return 10;
  pdshm_seg *s;
  if (pdshm_attach(seg_name, NULL, &s)) return 11;
  pdshm_pin *mine = NULL;
  int rc = pdshm_pin_inherit(s, g_pin, &mine);
  if (rc != h->expect) return 12;
  if (rc) return pdshm_detach(s) ? 13 : 0;
  if (pdshm_pin_view(mine)->data != pdshm_pin_view(g_pin)->data ||
      pdshm_pin_view(mine)->nbytes != FLOATS * 4)
    return 14;
  if (pdshm_pin_inherit(s, mine, &mine) != PDSHM_EINVAL) return 15; /* not inherited */
  if (write(h->ready[1], &c, 1) != 1 || read(h->go[0], &c, 1) != 1) return 16;
  pdshm_alloc_info a;
  if (pdshm_inspect_alloc(s, &a) || a.orphan_blocks != 1) return 17;
  if (pdshm_check(s, stderr)) return 18;
  if (pdshm_tensor_unpin(mine)) return 19;
  return pdshm_detach(s) ? 20 : 0;
}

static pid_t heir_start(struct heir *h) {
  ck_assert_int_eq(pipe(h->ready), 0);
  ck_assert_int_eq(pipe(h->go), 0);
  return tu_spawn(inherit_it, h);
}

static void heir_say(struct heir *h) {
  char c = 1;
  ck_assert_int_eq(write(h->go[1], &c, 1), 1);
}

START_TEST(inherited_pin_outlives_the_parents) {
  pdshm_var *v = tu_filled(root, "t", FLOATS, 30);
  ck_assert_int_eq(pdshm_tensor_pin(v, &g_pin, NULL), 0);
  struct heir h = {.expect = 0};
  pid_t kid = heir_start(&h);
  heir_say(&h);
  char c;
  ck_assert_int_eq(read(h.ready[0], &c, 1), 1);
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  ck_assert_int_eq(pdshm_tensor_unpin(g_pin), 0);
  ck_assert_uint_eq(orphans(), 1);
  heir_say(&h);
  ck_assert_int_eq(tu_wait(kid), 0);
  ck_assert_uint_eq(orphans(), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

START_TEST(inherit_after_the_parents_unpin_is_estale) {
  pdshm_var *v = tu_filled(root, "t", FLOATS, 31);
  ck_assert_int_eq(pdshm_tensor_pin(v, &g_pin, NULL), 0);
  struct heir h = {.expect = PDSHM_ESTALE};
  pid_t kid = heir_start(&h);
  ck_assert_int_eq(pdshm_tensor_unpin(g_pin), 0);
  heir_say(&h);
  ck_assert_int_eq(tu_wait(kid), 0);
  ck_assert_uint_eq(my_pins(), 0);
  clean();
}
END_TEST

/* An inherited pin is of this segment only. */
START_TEST(inherit_into_another_segment_is_einval) {
  pdshm_var *v = tu_filled(root, "t", 8, 0);
  ck_assert_int_eq(pdshm_tensor_pin(v, &g_pin, NULL), 0);
  pdshm_seg *other = tu_create("pin2", 0, 4);
  pdshm_pin *q = NULL;
  ck_assert_int_eq(pdshm_pin_inherit(seg, g_pin, &q), PDSHM_EINVAL); /* not inherited */
  ck_assert_int_eq(pdshm_pin_inherit(other, g_pin, &q), PDSHM_EINVAL);
  ck_assert_ptr_null(q);
  ck_assert_int_eq(pdshm_detach(other), 0);
  ck_assert_int_eq(pdshm_tensor_unpin(g_pin), 0);
}
END_TEST

static Suite *pin_suite(void) {
  Suite *s = suite_create("pin");
  TCase *tc = tu_tcase(s, "one", 30, setup, teardown);
  tcase_add_test(tc, view_describes_the_tensor);
  tcase_add_test(tc, pin_survives_erase);
  tcase_add_test(tc, pin_survives_erase_of_a_large_buffer);
  tcase_add_test(tc, pin_survives_resize);
  tcase_add_test(tc, unpin_of_a_hooked_buffer_keeps_it);
  tcase_add_test(tc, pin_survives_scope_release);
  tcase_add_test(tc, zero_byte_tensor_pins);
  tcase_add_test(tc, threads_pin_while_another_resizes);
  tcase_add_test(tc, scope_destruction_waits_for_the_scope_lock);
  tc = tu_tcase(s, "errors", 30, setup, teardown);
  tcase_add_test(tc, bad_calls_change_nothing);
  tcase_add_test(tc, read_only_attachment_cannot_pin);
  tcase_add_test(tc, enomem_changes_nothing);
  tcase_add_test(tc, check_finds_bad_pin_counts);
  tcase_add_test(tc, buffer_reaching_past_the_file_is_ebadseg);
  tc = tu_tcase(s, "procs", 30, setup, teardown);
  tcase_add_test(tc, erase_in_another_process);
  tcase_add_test(tc, two_pins_from_two_processes);
  tcase_add_test(tc, detach_drops_the_pins);
  tcase_add_test(tc, killed_pinner_is_reaped);
  tcase_add_loop_test(tc, owner_death_leaves_the_pinned_buffer, 0, 2); /* killed, detached */
  tc = tu_tcase(s, "fork", 30, setup, teardown);
  tcase_add_test(tc, fork_child_cannot_drop_the_parents_pin);
  tcase_add_test(tc, inherited_pin_outlives_the_parents);
  tcase_add_test(tc, inherit_after_the_parents_unpin_is_estale);
  tcase_add_test(tc, inherit_into_another_segment_is_einval);
  return s;
}

int main(void) { return tu_run(pin_suite()) ? 1 : 0; }
