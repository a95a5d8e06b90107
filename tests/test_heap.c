/* test_heap.c - the in-segment allocator: classes, alignment, a randomised
 * run against a shadow model, exhaustion, several processes and threads,
 * pages given back, sweeping a dead slot, rebuilding after damage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* unshare, fallocate */
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "config.h"
#include "testutil.h"

static pdshm_seg *seg;

static void setup(void) { seg = tu_create("heap", 16u << 20, 8); }
static void teardown(void) {
  if (seg) pdshm_detach(seg);
  tu_cleanup();
}

static pdshm_off_t alloc(size_t n) {
  pdshm_off_t off = 0;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  int rc = pdshm__alloc(seg, ln, n, PDSHM_T_RAW, &off);
  pdshm__lane_put(ln);
  ck_assert_msg(rc == 0, "alloc %zu: %s", n, pdshm_strerror(rc));
  return off;
}

static void release(pdshm_off_t off) {
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  pdshm__free(seg, ln, off);
  pdshm__lane_put(ln);
}

static void flush(void) {
  for (unsigned k = 0; k < PDSHM_LANES; k++) pdshm__cache_flush(seg, &seg->lanes[k]);
}

START_TEST(classes) {
  for (size_t b = 1; b <= PDSHM_CLASS_MAX; b++) {
    unsigned c = pdshm__class_of(b);
    ck_assert_uint_lt(c, PDSHM_NCLASSES);
    ck_assert_uint_ge(pdshm__class_size(c), b);
    if (c) ck_assert_uint_lt(pdshm__class_size(c - 1), b > 32 ? b : 33);
  }
  ck_assert_uint_eq(pdshm__class_of(PDSHM_CLASS_MAX + 1), PDSHM_NCLASSES);
  for (unsigned c = 1; c < PDSHM_NCLASSES; c++)
    ck_assert_uint_gt(pdshm__class_size(c), pdshm__class_size(c - 1));
}
END_TEST

START_TEST(alignment_and_usable) {
  for (size_t n = 1; n < 70000; n = n * 3 + 1) {
    pdshm_off_t off = alloc(n);
    ck_assert_uint_eq(off % PDSHM_ALIGN, 0);
    ck_assert_uint_ge(pdshm__alloc_usable(seg, off), n);
    memset(seg->base + off, 0xab, n);
    release(off);
  }
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
}
END_TEST

struct shadow {
  pdshm_off_t off;
  size_t n;
  unsigned char fill;
};

static size_t random_size(unsigned r) {
  switch (r % 8) {
  case 0: return 1 + r % 64;
  case 1: case 2: case 3: return 1 + r % 512;
  case 4: case 5: return 1 + r % 8192;
  case 6: return 1 + r % 70000;
  default: return 1 + r % (2u << 20);
  }
}

/* Every live block keeps its bytes; no two overlap (fills would clash). */
static void verify(const struct shadow *sh, int n) {
  for (int i = 0; i < n; i++) {
    const unsigned char *p = seg->base + sh[i].off;
    for (size_t k = 0; k < sh[i].n; k += 97) ck_assert_uint_eq(p[k], sh[i].fill);
    ck_assert_uint_eq(p[sh[i].n - 1], sh[i].fill);
  }
}

/* The bytes in the lane's bins, counted block by block. */
static uint64_t lane_cached(const struct pdshm_lane *l) {
  uint64_t sum = 0;
  for (unsigned c = 0; c < PDSHM_NCLASSES; c++)
    sum += (uint64_t)l->cache[c].count * pdshm__class_size(c);
  return sum;
}

/* Blocks of every class freed by one lane: what it keeps stays within the
 * lane's cap, and its count of cached bytes is what its bins hold. */
START_TEST(lane_cache_stays_under_its_cap) {
  enum { PER_CLASS = 8 };
  static pdshm_off_t offs[PDSHM_NCLASSES][PER_CLASS];
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  for (unsigned c = 0; c < PDSHM_NCLASSES; c++)
    for (unsigned i = 0; i < PER_CLASS; i++)
      ck_assert_int_eq(pdshm__alloc(seg, ln, pdshm__class_size(c) - PDSHM_BLK_HDR, PDSHM_T_RAW,
                                    &offs[c][i]), 0);
  for (unsigned c = 0; c < PDSHM_NCLASSES; c++)
    for (unsigned i = 0; i < PER_CLASS; i++) {
      pdshm__free(seg, ln, offs[c][i]);
      ck_assert_uint_le(ln->rec->cached, pdshm__cache_cap(seg));
      ck_assert_uint_eq(ln->rec->cached, lane_cached(ln->rec));
    }
  ck_assert_uint_gt(ln->rec->cached, 0);
  pdshm__cache_flush(seg, ln);
  ck_assert_uint_eq(ln->rec->cached, 0);
  pdshm__lane_put(ln);
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
}
END_TEST

/* A working set of 4 KiB blocks filling half the lane's cap, allocated and
 * freed over and over by one lane: after the first round it never takes
 * the heap lock. */
START_TEST(a_working_set_stays_cached) {
  enum { ROUNDS = 100, BYTES = 4096 + 112 /* a 4 KiB tensor's buffer */ };
  pdshm_off_t offs[64];
  const unsigned n = (unsigned)(pdshm__cache_cap(seg) / 2 /
                                pdshm__class_size(pdshm__class_of(BYTES + PDSHM_BLK_HDR)));
  ck_assert_uint_ge(n, 4);
  ck_assert_uint_le(n, 64);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  const struct pdshm_lock *heap = pdshm__lockent(seg, PDSHM_LOCK_HEAP);
  uint64_t taken = 0;
  for (unsigned r = 0; r < ROUNDS; r++) {
    if (r == 1) taken = heap->acquisitions;
    for (unsigned i = 0; i < n; i++)
      ck_assert_int_eq(pdshm__alloc(seg, ln, BYTES, PDSHM_T_RAW, &offs[i]), 0);
    for (unsigned i = 0; i < n; i++) pdshm__free(seg, ln, offs[i]);
  }
  ck_assert_uint_eq(heap->acquisitions, taken);
  pdshm__lane_put(ln);
}
END_TEST

START_TEST(random_against_shadow) {
  enum { LIVE = 400, STEPS = 6000 };
  struct shadow sh[LIVE];
  int n = 0;
  uint64_t base = tu_used(seg);
  srand(1234);
  for (int step = 0; step < STEPS; step++) {
    unsigned r = (unsigned)rand();
    if (n < LIVE && (n == 0 || r % 3)) {
      size_t size = random_size((unsigned)rand());
      pdshm_off_t off;
      struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
      int rc = pdshm__alloc(seg, ln, size, PDSHM_T_RAW, &off);
      pdshm__lane_put(ln);
      if (rc == PDSHM_ENOMEM) continue;
      ck_assert_int_eq(rc, 0);
      sh[n] = (struct shadow){off, size, (unsigned char)(step & 0xff)};
      memset(seg->base + off, sh[n].fill, size);
      n++;
    } else {
      int k = (int)(r % (unsigned)n);
      release(sh[k].off);
      sh[k] = sh[--n];
    }
    if (step % 200 == 0) {
      verify(sh, n);
      ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
    }
  }
  verify(sh, n);
  while (n) release(sh[--n].off);
  flush();
  ck_assert_uint_eq(tu_used(seg), base);
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
  struct pdshm_heap_stats hs;
  ck_assert_int_eq(pdshm__heap_stats(seg, &hs), 0);
  ck_assert_uint_eq(hs.blocks_free, 1); /* everything merged back */
}
END_TEST

START_TEST(exhaustion) {
  uint64_t base = tu_used(seg);
  pdshm_off_t offs[4096];
  int n = 0;
  for (;;) {
    pdshm_off_t off;
    struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
    int rc = pdshm__alloc(seg, ln, 100000, PDSHM_T_RAW, &off);
    pdshm__lane_put(ln);
    if (rc) {
      ck_assert_int_eq(rc, PDSHM_ENOMEM);
      break;
    }
    ck_assert_int_lt(n, 4096);
    offs[n++] = off;
  }
  ck_assert_int_gt(n, 100);
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
  pdshm_off_t small = alloc(64); /* what is left still serves small blocks */
  release(small);
  while (n) release(offs[--n]);
  flush();
  ck_assert_uint_eq(tu_used(seg), base);
  pdshm_off_t big = alloc(8u << 20);
  release(big);
  pdshm_off_t off;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  ck_assert_int_eq(pdshm__alloc(seg, ln, (size_t)1 << 40, PDSHM_T_RAW, &off), PDSHM_EOVERFLOW);
  ck_assert_int_eq(pdshm__alloc(seg, ln, 64u << 20, PDSHM_T_RAW, &off), PDSHM_ENOMEM);
  pdshm__lane_put(ln);
}
END_TEST

static uint64_t file_blocks(void) {
  struct stat st;
  ck_assert_int_eq(fstat(seg->fd, &st), 0);
  return (uint64_t)st.st_blocks * 512;
}

START_TEST(pages_go_back) {
  uint64_t before = file_blocks();
  pdshm_off_t big = alloc(12u << 20);
  memset(seg->base + big, 1, 12u << 20);
  release(big); /* beyond the retain budget (1/4 of the arena) */
  uint64_t punched = file_blocks();
  ck_assert_uint_lt(punched, before - (8u << 20));
  struct pdshm_heap_stats hs;
  ck_assert_int_eq(pdshm__heap_stats(seg, &hs), 0);
  ck_assert_uint_gt(hs.punched, 8u << 20);
  big = alloc(12u << 20); /* reserved again before it is handed out */
  ck_assert_uint_ge(file_blocks(), punched + (11u << 20));
  memset(seg->base + big, 2, 12u << 20);
  release(big);
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
}
END_TEST

static uint64_t punched_total(pdshm_seg *s) {
  struct pdshm_heap_stats hs;
  ck_assert_int_eq(pdshm__heap_stats(s, &hs), 0);
  return hs.punched;
}

/* Large frees stay backed while they fit the budget (1/4 of the arena,
 * about 3.9 MiB here); the free that would pass it gives its pages back. */
START_TEST(large_frees_kept_within_budget) {
  uint64_t before = file_blocks(), punched = punched_total(seg);
  pdshm_off_t a = alloc(2u << 20), b = alloc(3u << 20);
  memset(seg->base + a, 1, 2u << 20);
  memset(seg->base + b, 1, 3u << 20);
  release(a);
  ck_assert_uint_eq(punched_total(seg), punched);
  ck_assert_uint_eq(file_blocks(), before);
  a = alloc(2u << 20); /* the kept block, carved again: nothing to reserve */
  ck_assert_uint_eq(file_blocks(), before);
  release(a);
  release(b); /* 2 + 3 MiB: over the budget */
  ck_assert_uint_ge(punched_total(seg), punched + (2u << 20));
  ck_assert_uint_le(file_blocks(), before - (2u << 20));
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
}
END_TEST

/* Retained bytes that sat unused past their age go back at the next locked
 * allocation: as many as were retained, not every free page. */
START_TEST(kept_pages_go_back_when_unused) {
  pdshm_off_t a = alloc(2u << 20);
  memset(seg->base + a, 1, 2u << 20);
  release(a);
  uint64_t punched = punched_total(seg), before = file_blocks();
  ck_assert_uint_ge(seg->hdr->heap.retained, 2u << 20);
  seg->hdr->heap.retained_ns = 0; /* kept since boot */
  release(alloc(200u << 10));
  uint64_t gone = punched_total(seg) - punched;
  ck_assert_uint_ge(gone, (2u << 20) - 8192);
  ck_assert_uint_le(gone, (2u << 20) + 8192);
  /* the 200 KiB were carved from the punched front: reserved again */
  ck_assert_uint_le(file_blocks(), before - (2u << 20) + (256u << 10));
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
}
END_TEST

/* A 24 MiB /dev/shm of this test's own (a mount namespace), or false. */
static bool small_dev_shm(void) {
  if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
      mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=24m") == 0)
    return true;
  fprintf(stderr, "a small /dev/shm cannot be mounted here (%s): not tested\n", strerror(errno));
  return false;
}

/* When /dev/shm cannot hold the pages a carve must reserve, the segment's
 * backed FREE blocks give theirs back first, and the carve succeeds. */
START_TEST(kept_pages_go_back_when_dev_shm_is_full) {
  if (!small_dev_shm()) return;
  pdshm_seg *s = tu_create("pressure", 16u << 20, 8);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(s);
  pdshm_off_t kept, sep1, holey, sep2, rest[256];
  ck_assert_int_eq(pdshm__alloc(s, ln, 3u << 20, PDSHM_T_RAW, &kept), 0);
  ck_assert_int_eq(pdshm__alloc(s, ln, 100000, PDSHM_T_RAW, &sep1), 0);
  ck_assert_int_eq(pdshm__alloc(s, ln, 6u << 20, PDSHM_T_RAW, &holey), 0);
  ck_assert_int_eq(pdshm__alloc(s, ln, 100000, PDSHM_T_RAW, &sep2), 0);
  int n = 0; /* the rest of the arena in use: only the two blocks below are FREE */
  while (n < 256 && pdshm__alloc(s, ln, 100000, PDSHM_T_RAW, &rest[n]) == 0) n++;
  ck_assert_int_lt(n, 256);
  pdshm__free(s, ln, holey); /* over the budget: punched, flagged HOLEY */
  pdshm__free(s, ln, kept);  /* within it: kept backed */
  uint64_t punched = punched_total(s);
  /* /dev/shm filled up to 2 MiB: the 4 MiB carve needs the kept block's pages */
  struct statvfs vf;
  ck_assert_int_eq(statvfs("/dev/shm", &vf), 0);
  uint64_t avail = (uint64_t)vf.f_bavail * vf.f_frsize;
  ck_assert_uint_gt(avail, 6u << 20);
  int fd = open("/dev/shm/filler", O_RDWR | O_CREAT, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(fallocate(fd, 0, 0, (off_t)(avail - (2u << 20))), 0);
  pdshm_off_t big;
  int rc = pdshm__alloc(s, ln, 4u << 20, PDSHM_T_RAW, &big);
  ck_assert_msg(rc == 0, "alloc under pressure: %s (%s)", pdshm_strerror(rc), pdshm_last_error());
  ck_assert_uint_ge(punched_total(s), punched + (2u << 20));
  memset(s->base + big, 3, 4u << 20); /* reserved: no SIGBUS */
  pdshm__lane_put(ln);
  ck_assert_int_eq(pdshm__heap_check(s, stderr), 0);
  close(fd);
  unlink("/dev/shm/filler");
  pdshm_detach(s);
}
END_TEST

/* ---- several processes, threads ---------------------------------------------------- */

static int churn_child(void *arg) {
  pdshm_seg *s;
  if (pdshm_attach((const char *)arg, NULL, &s)) return 1;
  pdshm_off_t offs[64];
  unsigned r = (unsigned)getpid();
  for (int round = 0; round < 300; round++) {
    for (int i = 0; i < 64; i++) {
      struct pdshm_lane_ctx *ln = pdshm__lane_get(s);
      r = r * 1103515245 + 12345;
      if (pdshm__alloc(s, ln, random_size(r >> 8) % 20000 + 1, PDSHM_T_RAW, &offs[i])) return 2;
      pdshm__lane_put(ln);
      memset(s->base + offs[i], i, 16);
    }
    for (int i = 0; i < 64; i++) {
      if (s->base[offs[i]] != i) return 3;
      struct pdshm_lane_ctx *ln = pdshm__lane_get(s);
      pdshm__free(s, ln, offs[i]);
      pdshm__lane_put(ln);
    }
  }
  return pdshm_detach(s) ? 4 : 0;
}

START_TEST(processes_at_once) {
  uint64_t base = tu_used(seg);
  pid_t pid[4];
  for (int i = 0; i < 4; i++) pid[i] = tu_fork(churn_child, seg->name);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(tu_wait(pid[i]), 0);
  ck_assert_uint_eq(tu_used(seg), base);
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

static void *thread_churn(void *arg) {
  long bad = 0;
  for (int round = 0; round < 500; round++) {
    pdshm_off_t offs[32];
    for (int i = 0; i < 32; i++) {
      struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
      if (pdshm__alloc(seg, ln, 16 + (size_t)(i * 37 + round) % 3000, PDSHM_T_RAW, &offs[i])) bad++;
      pdshm__lane_put(ln);
      seg->base[offs[i]] = (unsigned char)(uintptr_t)arg;
    }
    for (int i = 0; i < 32; i++) {
      if (seg->base[offs[i]] != (unsigned char)(uintptr_t)arg) bad++;
      release(offs[i]);
    }
  }
  return (void *)bad;
}

START_TEST(threads_at_once) {
  uint64_t base = tu_used(seg);
  pthread_t th[6];
  for (uintptr_t i = 0; i < 6; i++) pthread_create(&th[i], NULL, thread_churn, (void *)(i + 1));
  for (int i = 0; i < 6; i++) {
    void *bad;
    pthread_join(th[i], &bad);
    ck_assert_ptr_null(bad);
  }
  flush();
  ck_assert_uint_eq(tu_used(seg), base);
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
}
END_TEST

/* ---- death, damage ----------------------------------------------------------------------- */

static int die_holding_blocks(void *arg) {
  pdshm_seg *s;
  if (pdshm_attach((const char *)arg, NULL, &s)) return 1;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(s);
  pdshm_off_t off;
  for (int i = 0; i < 100; i++) { /* in flight: allocated, never published */
    if (pdshm__alloc(s, ln, 100 + (size_t)i * 10, PDSHM_T_RAW, &off)) return 2;
    if (i % 2) pdshm__free(s, ln, off); /* and some cached */
  }
  if (pdshm__alloc(s, ln, 1u << 20, PDSHM_T_RAW, &off)) return 3;
  raise(SIGKILL);
  return 4;
}

START_TEST(sweep_dead_slot) {
  uint64_t base = tu_used(seg);
  ck_assert_int_eq(tu_wait(tu_fork(die_holding_blocks, seg->name)), 128 + SIGKILL);
  tu_await_dead(seg, 1);
  ck_assert_uint_gt(tu_used(seg), base);
  unsigned n = 0;
  ck_assert_int_eq(pdshm_reap(seg, &n), 0);
  ck_assert_uint_eq(n, 1);
  ck_assert_uint_eq(tu_used(seg), base);
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
}
END_TEST

START_TEST(sweep_keeps_kept_types) {
  pdshm_off_t a = alloc(100);
  pdshm__blk(seg, a)->type = PDSHM_T_HANDLE;
  pdshm_off_t b = alloc(100);
  pdshm_off_t *kept;
  size_t nkept;
  uint32_t me = seg->slot;
  /* sweep our own slot as a reaper would: b goes, a is returned */
  ck_assert_int_eq(pdshm__heap_sweep_slot(seg, me, 1u << PDSHM_T_HANDLE, &kept, &nkept), 0);
  ck_assert_uint_eq(nkept, 1);
  ck_assert_uint_eq(kept[0], a);
  pdshm__xfree(kept);
  ck_assert_uint_eq(pdshm__blk_state(atomic_load(&pdshm__blk(seg, b)->word)), PDSHM_BLK_FREE);
  pdshm__blk(seg, a)->type = PDSHM_T_RAW;
  release(a);
}
END_TEST

START_TEST(rebuild_after_damage) {
  pdshm_off_t keep[50];
  for (int i = 0; i < 50; i++) keep[i] = alloc(300 + (size_t)i * 100);
  for (int i = 0; i < 50; i += 2) release(keep[i]);
  flush();
  struct pdshm_heap *h = &seg->hdr->heap;
  ck_assert_int_eq(pdshm__lock(seg, PDSHM_LOCK_HEAP), 0);
  memset(h->bins, 0x5a, sizeof h->bins); /* as if a death left them in pieces */
  memset(h->nonempty, 0xff, sizeof h->nonempty);
  ck_assert_int_gt(pdshm__heap_check_locked(seg, NULL), 0);
  ck_assert_int_eq(pdshm__heap_rebuild(seg), 0);
  ck_assert_int_eq(pdshm__heap_check_locked(seg, stderr), 0);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  for (int i = 1; i < 50; i += 2) release(keep[i]);
  release(alloc(5000));
}
END_TEST

START_TEST(check_sees_broken_chain) {
  pdshm_off_t a = alloc(1000);
  struct pdshm_blk *b = pdshm__blk(seg, a);
  uint64_t w = atomic_load(&b->word);
  atomic_store(&b->word, (w & 15) | 24); /* an impossible size */
  ck_assert_int_gt(pdshm__heap_check(seg, NULL), 0);
  ck_assert_int_eq(pdshm_check(seg, NULL), PDSHM_EBADSEG);
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), PDSHM_EBADSEG);
  atomic_store(&b->word, (w & 15) | (uint64_t)0xfffffff0); /* runs past the end */
  ck_assert_int_gt(pdshm__heap_check(seg, NULL), 0);
  atomic_store(&b->word, w);
  ck_assert_int_eq(pdshm__heap_check(seg, NULL), 0);
  release(a);
}
END_TEST

START_TEST(double_free_is_ignored) {
  pdshm_off_t a = alloc(100);
  release(a);
  release(a); /* must not put it in the cache twice */
  pdshm_off_t b = alloc(100), c = alloc(100);
  ck_assert_uint_ne(b, c);
  release(b);
  release(c);
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
}
END_TEST

START_TEST(check_sees_wrong_bin_and_bad_bounds) {
  pdshm_off_t keep = alloc(300000), gap = alloc(300000), keep2 = alloc(300000);
  release(gap); /* a FREE block between two USED ones */
  pdshm_off_t blk = gap - PDSHM_BLK_HDR;
  struct pdshm_heap *h = &seg->hdr->heap;
  unsigned right = pdshm__bin_of(pdshm__blk_size(atomic_load(&pdshm__blk(seg, gap)->word)));
  ck_assert_uint_eq(h->bins[right], blk);
  ck_assert_uint_eq(PDSHM_AT(seg->base, gap, struct pdshm_free_links)->next, 0);
  h->bins[right] = 0; /* move it to bin 5 */
  h->nonempty[right / 64] &= ~(1ull << (right % 64));
  h->bins[5] = blk;
  h->nonempty[0] |= 1ull << 5;
  ck_assert_int_gt(pdshm__heap_check(seg, NULL), 0);
  ck_assert_int_eq(pdshm__lock(seg, PDSHM_LOCK_HEAP), 0);
  ck_assert_int_eq(pdshm__heap_rebuild(seg), 0);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
  pdshm_off_t end = seg->hdr->arena_end;
  seg->hdr->arena_end = (pdshm_off_t)1 << 40; /* past the mapping */
  ck_assert_int_gt(pdshm__heap_check(seg, NULL), 0);
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), PDSHM_EBADSEG);
  ck_assert_int_eq(pdshm_check(seg, NULL), PDSHM_EBADSEG);
  seg->hdr->arena_end = end;
  release(keep);
  release(keep2);
}
END_TEST

#ifdef PDSHM_DEBUG
/* Debug builds check their own invariants (PDSHM_ASSERT): a `*_locked`
 * function called without its lock, a step of a journal that is not open,
 * stop the process (SIGABRT) before they touch anything. */
START_TEST(a_locked_call_without_its_lock_aborts) {
  pdshm_off_t off = alloc(64);
  ck_assert_int_eq(pdshm__lock(seg, PDSHM_LOCK_HEAP), 0);
  pdshm__heap_release_locked(seg, alloc(64)); /* with it: fine */
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  pdshm__heap_release_locked(seg, off);
#ifdef HAVE_GLIBC_MUTEX_LOCK_WORD
  ck_abort_msg("the heap lock was not asked for");
#else
  raise(SIGABRT); /* without the mutex's word, nobody can tell who holds it */
#endif
}
END_TEST

START_TEST(a_journal_step_outside_a_journal_aborts) {
  pdshm_off_t off = alloc(64);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  pdshm__j_set(seg, ln, off, 1);
  ck_abort_msg("a store outside a journal was not caught");
}
END_TEST
#endif

static Suite *heap_suite(void) {
  Suite *s = suite_create("heap");
  TCase *tc = tcase_create("allocator");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, classes);
  tcase_add_test(tc, alignment_and_usable);
  tcase_add_test(tc, lane_cache_stays_under_its_cap);
  tcase_add_test(tc, a_working_set_stays_cached);
  tcase_add_test(tc, random_against_shadow);
  tcase_add_test(tc, exhaustion);
  tcase_add_test(tc, pages_go_back);
  tcase_add_test(tc, large_frees_kept_within_budget);
  tcase_add_test(tc, kept_pages_go_back_when_dev_shm_is_full);
  tcase_add_test(tc, kept_pages_go_back_when_unused);
  tcase_add_test(tc, processes_at_once);
  tcase_add_test(tc, threads_at_once);
  tcase_add_test(tc, sweep_dead_slot);
  tcase_add_test(tc, sweep_keeps_kept_types);
  tcase_add_test(tc, rebuild_after_damage);
  tcase_add_test(tc, check_sees_broken_chain);
  tcase_add_test(tc, double_free_is_ignored);
  tcase_add_test(tc, check_sees_wrong_bin_and_bad_bounds);
#ifdef PDSHM_DEBUG
  tcase_add_test_raise_signal(tc, a_locked_call_without_its_lock_aborts, SIGABRT);
  tcase_add_test_raise_signal(tc, a_journal_step_outside_a_journal_aborts, SIGABRT);
#endif
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(heap_suite()) ? 1 : 0; }
