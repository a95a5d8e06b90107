/* test_pin_recount.c - the recount of pins, the heap's repair after a death
 * under its lock: it never lets a pinned buffer's count read 0 on the way,
 * and it counts every record, with its list of targets or, without private
 * memory for one, by a walk per buffer. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

#include "model/model.h"
#include "testutil.h"

#define FLOATS 4096 /* 16 KiB: a lane-cached size class */

static pdshm_seg *seg;
static pdshm_scope *root;
static uint64_t base_used; /* with the root's table made, before any test var */

static void setup(void) {
  seg = tu_create("recount", 16u << 20, 8);
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  pdshm_var *keep;
  ck_assert_int_eq(pdshm_var_create(root, "keep", &keep), 0);
  base_used = tu_used(seg);
}

static void teardown(void) {
  if (root) pdshm_scope_release(root);
  if (seg) pdshm_detach(seg);
  root = NULL;
  seg = NULL;
  tu_cleanup();
}

static uint64_t used(void) { return tu_used(seg); }

static void clean(void) { ck_assert_int_eq(pdshm_check(seg, stderr), 0); }

/* The recount of pins (the heap's repair after a death under its lock) runs
 * while other threads free buffers with no lock: a free finding a buffer's
 * count at 0 caches it at once (pdshm__free).  So a pinned buffer's count
 * must never read 0 in the middle of a recount, as it did when the recount
 * zeroed every count before counting the records again. */
#define RECOUNTS 2000

struct recount_watch {
  pdshm_off_t buf;
  _Atomic int stop;
  _Atomic uint64_t looks, unpinned;
};

static void *recount_watcher(void *arg) {
  struct recount_watch *rw = arg;
  while (!atomic_load(&rw->stop)) {
    if (!pdshm__tensor_pinned(seg, rw->buf)) atomic_fetch_add(&rw->unpinned, 1);
    atomic_fetch_add(&rw->looks, 1);
  }
  return NULL;
}

START_TEST(a_recount_never_shows_a_pinned_buffer_unpinned) {
  pdshm_scope *fill; /* blocks for the recount's walks to step over */
  char name[16];
  ck_assert_int_eq(pdshm_scope_new(root, NULL, &fill), 0);
  for (int i = 0; i < 64; i++) {
    snprintf(name, sizeof name, "f%d", i);
    tu_filled(fill, name, 64, (float)i);
  }
  pdshm_var *v = tu_filled(root, "t", FLOATS, 5);
  pdshm_pin *p;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, NULL), 0);
  struct recount_watch rw = {.buf = ((struct pdshm_var_rec *)(void *)v)->buf};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, recount_watcher, &rw), 0);
  while (!atomic_load(&rw.looks)) sched_yield();
  for (int i = 0; i < RECOUNTS; i++) {
    ck_assert_int_eq(pdshm__lock(seg, PDSHM_LOCK_HEAP), 0);
    int rc = pdshm__pin_recount_locked(seg);
    pdshm__unlock(seg, PDSHM_LOCK_HEAP);
    ck_assert_int_eq(rc, 0);
  }
  atomic_store(&rw.stop, 1);
  pthread_join(t, NULL);
  ck_assert_msg(!atomic_load(&rw.unpinned), "%llu of %llu looks found the pinned buffer unpinned",
                (unsigned long long)atomic_load(&rw.unpinned),
                (unsigned long long)atomic_load(&rw.looks));
  ck_assert_uint_eq(pdshm__tensor_pins(seg, rw.buf, NULL), 1);
  clean();
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  ck_assert_int_eq(pdshm_scope_release(fill), 0);
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

/* The recount collects every record's target into a list that grows (64,
 * then doubling): records found before a growth count as much as those
 * after.  They did not: the growth forgot the targets already collected, so
 * with more than 64 records a buffer's count fell to what the later ones
 * held, even to 0 with live pins.  Without private memory for the list
 * (_i 1: calloc refused, through the link's --wrap=calloc), each buffer's
 * records are counted by a walk of its own, to the same counts. */
#define MANY_PINS 200
#define PINNED_BUFFERS 5

static _Atomic int calloc_refused;
static _Atomic unsigned calloc_refusals;
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size) {
  if (!atomic_load(&calloc_refused)) return __real_calloc(n, size);
  atomic_fetch_add(&calloc_refusals, 1);
  return NULL;
}

START_TEST(a_recount_counts_every_record_of_many) {
  pdshm_var *v[PINNED_BUFFERS];
  pdshm_pin *p[MANY_PINS];
  pdshm_scope *many;
  char name[16];
  ck_assert_int_eq(pdshm_scope_new(root, NULL, &many), 0);
  for (int b = 0; b < PINNED_BUFFERS; b++) {
    snprintf(name, sizeof name, "t%d", b);
    v[b] = tu_filled(many, name, 64, (float)b);
  }
  for (int i = 0; i < MANY_PINS; i++) /* buffer 0's pins first: all before any growth */
    ck_assert_int_eq(pdshm_tensor_pin(v[i * PINNED_BUFFERS / MANY_PINS], &p[i], NULL), 0);
  ck_assert_int_eq(pdshm__lock(seg, PDSHM_LOCK_HEAP), 0);
  atomic_store(&calloc_refused, _i);
  int rc = pdshm__pin_recount_locked(seg);
  atomic_store(&calloc_refused, 0);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  ck_assert_int_eq(rc, 0);
  ck_assert_uint_eq(atomic_load(&calloc_refusals) > 0, _i); /* the list was refused */
  for (int b = 0; b < PINNED_BUFFERS; b++)
    ck_assert_uint_eq(pdshm__tensor_pins(seg, ((struct pdshm_var_rec *)(void *)v[b])->buf, NULL),
                      MANY_PINS / PINNED_BUFFERS);
  clean();
  for (int i = 0; i < MANY_PINS; i++) ck_assert_int_eq(pdshm_tensor_unpin(p[i]), 0);
  ck_assert_int_eq(pdshm_scope_release(many), 0);
  ck_assert_uint_eq(used(), base_used);
  clean();
}
END_TEST

static Suite *recount_suite(void) {
  Suite *s = suite_create("pin_recount");
  TCase *tc = tu_tcase(s, "recount", 60, setup, teardown);
  tcase_add_test(tc, a_recount_never_shows_a_pinned_buffer_unpinned);
  tcase_add_loop_test(tc, a_recount_counts_every_record_of_many, 0, 2); /* list, no memory */
  return s;
}

int main(void) { return tu_run(recount_suite()) ? 1 : 0; }
