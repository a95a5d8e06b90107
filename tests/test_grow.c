/*
 * test_grow.c - segments that grow while processes are attached (DESIGN §2,
 * "Growth"; lib/heap/heap_grow.c): a peer attached before a growth reads
 * what was allocated after it, at the same offsets; several processes
 * allocating and freeing grow a small segment geometrically; a full
 * /dev/shm or max_size during a growth is an error that leaves the segment
 * intact; a fork child attaches a grown segment again.  The crash windows of
 * a growth are test_crash's (op resize_grows_segment), its hostile sizes
 * test_hostile's.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "model/model.h"
#include "testutil.h"

#define MIB (1u << 20)

/* Each test runs in a /dev/shm of its own (a mount namespace and a 256 MiB
 * tmpfs, gone with the test's process), when it may mount one: the suite's
 * other tests, running beside it in a 64 MiB /dev/shm, then neither starve
 * its growths nor are starved by them.  Elsewhere it shares /dev/shm. */
static void setup(void) {
  if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
      mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=256m"))
    fprintf(stderr, "no /dev/shm of its own (%s): the test shares /dev/shm\n", strerror(errno));
}
static void teardown(void) { tu_cleanup(); }

/* A segment of `size` bytes that grows up to `max`. */
static pdshm_seg *make_growing(const char *name, size_t size, size_t max, unsigned procs) {
  pdshm_options o = {.size = size, .max_size = max, .max_procs = procs};
  return tu_create_opts(name, &o);
}

static uint64_t growths(pdshm_seg *s) {
  pdshm_seg_info si;
  ck_assert_int_eq(pdshm_inspect_seg(s, &si), 0);
  return si.growths;
}

static off_t file_size(const char *name) {
  struct stat st;
  ck_assert_int_eq(stat(tu_path(name), &st), 0);
  return st.st_size;
}

/* Bytes /dev/shm has free. */
static uint64_t dev_shm_free(void) {
  struct statvfs vfs;
  ck_assert_int_eq(statvfs("/dev/shm", &vfs), 0);
  return (uint64_t)vfs.f_bavail * vfs.f_frsize;
}

/* Byte i of tensor number k. */
static uint8_t pattern(unsigned k, size_t i) { return (uint8_t)(k * 31 + i * 7 + (i >> 12)); }

static pdshm_var *tensor(pdshm_scope *s, const char *name, size_t bytes, unsigned k) {
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(s, name, &v), 0);
  int rc = pdshm_tensor_resize(v, PDSHM_U8, 1, (int64_t[]){(int64_t)bytes});
  ck_assert_msg(rc == 0, "resize %s: %s (%s)", name, pdshm_strerror(rc), pdshm_last_error());
  uint8_t *p = pdshm_tensor_data(v);
  for (size_t i = 0; i < bytes; i++) p[i] = pattern(k, i);
  return v;
}

static bool tensor_holds(const pdshm_var *v, size_t bytes, unsigned k) {
  const uint8_t *p = pdshm_tensor_data(v);
  if (!p || pdshm_tensor_nbytes(v) != bytes) return false;
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != pattern(k, i)) return false;
  return true;
}

/* ---- a peer attached before the growth ------------------------------------------------- */

struct peer {
  const char *name;
  int ready[2], go[2];
};

#define PEER_TENSORS 6
#define PEER_BYTES (3u * MIB)

/* Attaches while the segment is small, then, told to, reads the tensors
 * the parent allocated after its growths, at the offsets the parent sees,
 * and allocates one of its own (which may grow it again). */
static int peer_main(void *arg) {
  struct peer *p = arg;
  pdshm_seg *s;
  pdshm_scope *root;
  char c = 0;
  if (pdshm_attach(p->name, NULL, &s) || pdshm_root(s, &root)) return 10;
  pdshm_stats st;
  if (pdshm_seg_stats(s, &st)) return 11;
  uint64_t size0 = st.size;
  if (write(p->ready[1], &c, 1) != 1 || read(p->go[0], &c, 1) != 1) return 12;
  for (unsigned k = 0; k < PEER_TENSORS; k++) {
    char nm[16];
    snprintf(nm, sizeof nm, "t%u", k);
    pdshm_var *v = pdshm_find_var(root, nm);
    if (!v || !tensor_holds(v, PEER_BYTES, k)) return 20 + (int)k;
    /* the same offset as the parent's: told through the pipe */
    uint64_t off;
    if (read(p->go[0], &off, sizeof off) != sizeof off) return 30;
    if ((uint64_t)((uint8_t *)pdshm_tensor_data(v) - s->base) != off) return 31;
  }
  if (pdshm_seg_stats(s, &st) || st.size <= size0) return 40;
  pdshm_var *mine;
  if (pdshm_var_create(root, "peer", &mine) ||
      pdshm_tensor_resize(mine, PDSHM_U8, 1, (int64_t[]){PEER_BYTES}))
    return 41;
  memset(pdshm_tensor_data(mine), 0x5a, PEER_BYTES);
  if (pdshm_check(s, stderr)) return 42;
  return pdshm_scope_release(root) || pdshm_detach(s) ? 43 : 0;
}

START_TEST(peer_attached_before_growth_reads_after_it) {
  struct peer p = {.name = tu_name("peer")};
  pdshm_seg *s = make_growing(p.name, 4 * MIB, 48 * MIB, 8);
  ck_assert_int_eq(pipe(p.ready), 0);
  ck_assert_int_eq(pipe(p.go), 0);
  pid_t kid = tu_spawn(peer_main, &p);
  char c;
  ck_assert_int_eq(read(p.ready[0], &c, 1), 1);
  uint64_t g0 = growths(s);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(s, &root), 0);
  pdshm_var *v[PEER_TENSORS];
  for (unsigned k = 0; k < PEER_TENSORS; k++) {
    char nm[16];
    snprintf(nm, sizeof nm, "t%u", k);
    v[k] = tensor(root, nm, PEER_BYTES, k);
  }
  ck_assert_uint_gt(growths(s), g0);
  ck_assert_int_gt(file_size(p.name), 4 * MIB + PEER_TENSORS * PEER_BYTES / 2);
  ck_assert_int_eq(write(p.go[1], &c, 1), 1);
  for (unsigned k = 0; k < PEER_TENSORS; k++) {
    uint64_t off = (uint64_t)((uint8_t *)pdshm_tensor_data(v[k]) - s->base);
    ck_assert_int_eq(write(p.go[1], &off, sizeof off), sizeof off);
  }
  ck_assert_int_eq(tu_wait(kid), 0);
  /* what the peer wrote after its own allocation */
  pdshm_var *mine = pdshm_find_var(root, "peer");
  ck_assert_ptr_nonnull(mine);
  const uint8_t *q = pdshm_tensor_data(mine);
  for (size_t i = 0; i < PEER_BYTES; i += 4096) ck_assert_uint_eq(q[i], 0x5a);
  ck_assert_int_eq(pdshm_check(s, stderr), 0);
  ck_assert_int_eq(pdshm_scope_release(root), 0);
  ck_assert_int_eq(pdshm_detach(s), 0);
}
END_TEST

/* ---- geometric growth ------------------------------------------------------------------ */

/* N allocations cost O(log N) growths: 2000 tensors of 16 KiB (31 MiB) in a
 * segment that starts with a few MiB. */
START_TEST(growth_is_geometric) {
  const char *name = tu_name("geom");
  pdshm_seg *s = make_growing(name, 4 * MIB, 64 * MIB, 4);
  pdshm_scope *root, *local;
  ck_assert_int_eq(pdshm_root(s, &root), 0);
  ck_assert_int_eq(pdshm_scope_new(root, NULL, &local), 0);
  for (unsigned k = 0; k < 2000; k++) {
    char nm[16];
    snprintf(nm, sizeof nm, "v%u", k);
    pdshm_var *v;
    ck_assert_int_eq(pdshm_var_create(local, nm, &v), 0);
    ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_U8, 1, (int64_t[]){16 << 10}), 0);
  }
  uint64_t g = growths(s);
  ck_assert_uint_ge(g, 2);
  ck_assert_uint_le(g, 6);
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(s, &st), 0);
  ck_assert_uint_ge(st.size, 31 * MIB);
  ck_assert_uint_le(st.size, 64 * MIB);
  ck_assert_int_eq(pdshm_check(s, stderr), 0);
  /* everything back to the bins; the segment keeps its size */
  ck_assert_int_eq(pdshm_scope_release(local), 0);
  pdshm_stats after;
  ck_assert_int_eq(pdshm_seg_stats(s, &after), 0);
  ck_assert_uint_eq(after.size, st.size);
  ck_assert_uint_lt(after.used, 2 * MIB);
  ck_assert_int_eq(pdshm_check(s, stderr), 0);
  ck_assert_int_eq(pdshm_scope_release(root), 0);
  ck_assert_int_eq(pdshm_detach(s), 0);
}
END_TEST

/* ---- four processes allocating and freeing ------------------------------------------ */

#define CHURN_PROCS 4
#define CHURN_LIVE 8 /* tensors each keeps at once */

struct churn {
  const char *name;
  unsigned id;
};

/* Allocates and frees tensors of 1 to 4 MiB, keeping up to CHURN_LIVE (at
 * most 32 MiB) alive, writing each and checking it before it goes. */
static int churn_main(void *arg) {
  struct churn *c = arg;
  pdshm_seg *s;
  pdshm_scope *root, *local;
  if (pdshm_attach(c->name, NULL, &s) || pdshm_root(s, &root) ||
      pdshm_scope_new(root, NULL, &local))
    return 10;
  pdshm_var *live[CHURN_LIVE] = {0};
  size_t bytes[CHURN_LIVE] = {0};
  unsigned seed = c->id * 7919u + 1;
  for (unsigned round = 0; round < 120; round++) {
    unsigned k = round % CHURN_LIVE;
    char nm[16];
    snprintf(nm, sizeof nm, "t%u", k);
    if (live[k]) {
      if (!tensor_holds(live[k], bytes[k], c->id * 100 + k)) return 20;
      if (pdshm_var_erase(local, nm)) return 21;
      live[k] = NULL;
    }
    bytes[k] = (size_t)(1 + rand_r(&seed) % 4) * MIB - (size_t)(rand_r(&seed) % 4096);
    pdshm_var *v;
    int rc = pdshm_var_create(local, nm, &v);
    if (!rc) rc = pdshm_tensor_resize(v, PDSHM_U8, 1, (int64_t[]){(int64_t)bytes[k]});
    if (rc) {
      fprintf(stderr, "churn %u: %s (%s)\n", c->id, pdshm_strerror(rc), pdshm_last_error());
      return 22;
    }
    uint8_t *p = pdshm_tensor_data(v);
    for (size_t i = 0; i < bytes[k]; i++) p[i] = pattern(c->id * 100 + k, i);
    live[k] = v;
  }
  return pdshm_scope_release(local) || pdshm_scope_release(root) || pdshm_detach(s) ? 30 : 0;
}

START_TEST(four_processes_grow_it_past_100_mib) {
  if (dev_shm_free() < 160ull * MIB) {
    fprintf(stderr, "four_processes_grow_it_past_100_mib: /dev/shm has %llu MiB free, "
                    "less than the 160 MiB it needs: not tested\n",
            (unsigned long long)(dev_shm_free() >> 20));
    return;
  }
  const char *name = tu_name("churn");
  pdshm_seg *s = make_growing(name, 4 * MIB, 160 * MIB, 8);
  struct churn c[CHURN_PROCS];
  pid_t kids[CHURN_PROCS];
  for (unsigned i = 0; i < CHURN_PROCS; i++) {
    c[i] = (struct churn){.name = name, .id = i + 1};
    kids[i] = tu_spawn(churn_main, &c[i]);
  }
  for (unsigned i = 0; i < CHURN_PROCS; i++) ck_assert_int_eq(tu_wait(kids[i]), 0);
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(s, &st), 0);
  ck_assert_uint_gt(st.size, 100ull * MIB);
  ck_assert_uint_le(st.size, 160ull * MIB);
  ck_assert_uint_le(growths(s), 10);
  ck_assert_uint_lt(st.used, 2 * MIB);
  ck_assert_int_eq(file_size(name), (off_t)st.size + (off_t)s->hdr->arena_off);
  ck_assert_int_eq(pdshm_check(s, stderr), 0);
  ck_assert_int_eq(pdshm_detach(s), 0);
}
END_TEST

/* ---- limits ------------------------------------------------------------------------------ */

/* max_size reached: ENOMEM that says so, nothing changed, and what fits
 * still does. */
START_TEST(max_size_is_enomem_and_changes_nothing) {
  const char *name = tu_name("max");
  pdshm_seg *s = make_growing(name, 4 * MIB, 12 * MIB, 4);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(s, &root), 0);
  pdshm_var *v = tensor(root, "a", 5 * MIB, 1);
  off_t before = file_size(name);
  pdshm_stats st0, st1;
  ck_assert_int_eq(pdshm_seg_stats(s, &st0), 0);
  pdshm_var *w;
  ck_assert_int_eq(pdshm_var_create(root, "b", &w), 0);
  ck_assert_int_eq(pdshm_tensor_resize(w, PDSHM_U8, 1, (int64_t[]){8 * MIB}), PDSHM_ENOMEM);
  ck_assert_msg(strstr(pdshm_last_error(), "at most 12 MiB"), "\"%s\"", pdshm_last_error());
  ck_assert_int_le(file_size(name), 12 * MIB);
  ck_assert_int_eq(file_size(name), before);
  ck_assert_int_eq(pdshm_seg_stats(s, &st1), 0);
  ck_assert_uint_eq(st1.size, st0.size);
  ck_assert(tensor_holds(v, 5 * MIB, 1));
  ck_assert_int_eq(pdshm_tensor_resize(w, PDSHM_U8, 1, (int64_t[]){5 * MIB}), 0);
  ck_assert_int_eq(file_size(name), 12 * MIB);
  ck_assert_int_eq(pdshm_check(s, stderr), 0);
  ck_assert_int_eq(pdshm_scope_release(root), 0);
  ck_assert_int_eq(pdshm_detach(s), 0);
}
END_TEST

/* A 32 MiB /dev/shm of this test's own (a mount namespace), or false. */
static bool small_dev_shm(void) {
  if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
      mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=32m") == 0)
    return true;
  fprintf(stderr, "a small /dev/shm cannot be mounted here (%s): not tested\n", strerror(errno));
  return false;
}

/* Takes every page /dev/shm has left, into the file fd. */
static void fill_dev_shm(int fd) {
  struct stat st;
  ck_assert_int_eq(fstat(fd, &st), 0);
  off_t at = st.st_size;
  for (off_t chunk = 1 << 20; chunk >= 4096;)
    if (fallocate(fd, 0, at, chunk) == 0) at += chunk;
    else chunk /= 2;
}

struct touch {
  void *p;
  size_t len;
};

/* A child that writes every byte of t (SIGBUS on a page the file lacks). */
static int touch_main(void *arg) {
  const struct touch *t = arg;
  memset(t->p, 7, t->len);
  return 0;
}

/* /dev/shm full in the middle of a growth: ENOSPC with the /dev/shm message,
 * the file and the segment as they were, /dev/shm's free bytes too (the
 * failed fallocate keeps nothing); a growth whose geometric step no longer
 * fits takes the bytes it needs only. */
START_TEST(full_dev_shm_during_growth) {
  if (!small_dev_shm()) return;
  const char *name = tu_name("full");
  pdshm_seg *s = make_growing(name, 4 * MIB, 64 * MIB, 4); /* more than /dev/shm */
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(s, &root), 0);
  pdshm_var *v = tensor(root, "a", 6 * MIB, 1);
  tensor(root, "b", 8 * MIB, 2);
  /* leave 6 MiB free: less than the arena, so less than a geometric step */
  int fd = open("/dev/shm/filler", O_RDWR | O_CREAT, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(fallocate(fd, 0, 0, (off_t)(dev_shm_free() - 6 * MIB)), 0);
  uint64_t g = growths(s), avail = dev_shm_free();
  off_t before = file_size(name);
  ck_assert_int_gt(before - (off_t)s->hdr->arena_off, 12 * MIB);
  pdshm_var *w;
  ck_assert_int_eq(pdshm_var_create(root, "c", &w), 0);
  /* run 1 skips the failed 24 MiB: the 5 MiB growth's own failed doubling
   * is then the one that gives the last FREE block's pages back */
  if (_i == 0) {
    ck_assert_int_eq(pdshm_tensor_resize(w, PDSHM_U8, 1, (int64_t[]){24 * MIB}), PDSHM_ENOSPC);
    ck_assert_msg(strstr(pdshm_last_error(), "/dev/shm cannot hold") &&
                      strstr(pdshm_last_error(), "--shm-size"),
                  "\"%s\"", pdshm_last_error());
    ck_assert_int_eq(file_size(name), before);
    ck_assert_uint_ge(dev_shm_free(), avail); /* free blocks may have given pages back */
    ck_assert_uint_eq(growths(s), g);
    ck_assert(tensor_holds(v, 6 * MIB, 1));
    ck_assert_int_eq(pdshm_check(s, stderr), 0);
  }
  /* 5 MiB fit: the growth takes what the tensor lacks, not a doubling */
  ck_assert_int_eq(pdshm_tensor_resize(w, PDSHM_U8, 1, (int64_t[]){5 * MIB}), 0);
  ck_assert_int_le(file_size(name) - before, 5 * MIB + 4096);
  /* The failed doubling gave the last FREE block's pages back, and the
   * growth merged that block with the new bytes: the tensor carved across
   * both has every page reserved, so its first touch on a /dev/shm left
   * with no page free raises no SIGBUS. */
  fill_dev_shm(fd);
  struct touch t = {pdshm_tensor_data(w), 5 * MIB};
  ck_assert_int_eq(tu_wait(tu_spawn(touch_main, &t)), 0);
  ck_assert_int_eq(pdshm_check(s, stderr), 0);
  close(fd);
  unlink("/dev/shm/filler");
  ck_assert_int_eq(pdshm_scope_release(root), 0);
  ck_assert_int_eq(pdshm_detach(s), 0);
}
END_TEST

/* ---- fork ---------------------------------------------------------------------------------- */

struct forked {
  pdshm_seg *inherited;
  const char *name;
};

/* A fork child of a grown segment: the inherited handle answers EFORKED;
 * attached again, it reads what was allocated after the growth and grows
 * the segment further. */
static int fork_main(void *arg) {
  struct forked *f = arg;
  pdshm_scope *r;
  if (pdshm_root(f->inherited, &r) != PDSHM_EFORKED) return 10;
  pdshm_seg *s;
  if (pdshm_attach(f->name, NULL, &s) || pdshm_root(s, &r)) return 11;
  pdshm_var *v = pdshm_find_var(r, "big");
  if (!v || !tensor_holds(v, 6 * MIB, 3)) return 12;
  pdshm_var *w;
  if (pdshm_var_create(r, "child", &w) ||
      pdshm_tensor_resize(w, PDSHM_U8, 1, (int64_t[]){12 * MIB}))
    return 13;
  memset(pdshm_tensor_data(w), 9, 12 * MIB);
  return pdshm_scope_release(r) || pdshm_detach(s) ? 14 : 0;
}

START_TEST(fork_after_growth) {
  struct forked f = {.name = tu_name("fork")};
  f.inherited = make_growing(f.name, 4 * MIB, 48 * MIB, 8);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(f.inherited, &root), 0);
  tensor(root, "big", 6 * MIB, 3);
  uint64_t g = growths(f.inherited);
  ck_assert_uint_ge(g, 1);
  ck_assert_int_eq(tu_wait(tu_fork(fork_main, &f)), 0);
  ck_assert_uint_gt(growths(f.inherited), g);
  pdshm_var *w = pdshm_find_var(root, "child");
  ck_assert_ptr_nonnull(w);
  const uint8_t *p = pdshm_tensor_data(w);
  for (size_t i = 0; i < 12 * MIB; i += 4096) ck_assert_uint_eq(p[i], 9);
  ck_assert_int_eq(pdshm_check(f.inherited, stderr), 0);
  ck_assert_int_eq(pdshm_scope_release(root), 0);
  ck_assert_int_eq(pdshm_detach(f.inherited), 0);
}
END_TEST

/* ---- a size field scribbled while attached ----------------------------------------------- */

/* arena_end past the file (within max_size) or past max_size: pdshm_check
 * answers EBADSEG, lookups and allocations touch nothing past the file (no
 * SIGBUS), and with the field restored everything is as it was. */
START_TEST(scribbled_size_is_ebadseg) {
  const char *name = tu_name("scribble");
  pdshm_seg *s = make_growing(name, 4 * MIB, 32 * MIB, 4);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(s, &root), 0);
  tensor(root, "a", 100000, 1);
  const pdshm_off_t end = s->hdr->arena_end;
  const pdshm_off_t bad[] = {end + 4 * MIB, 32 * MIB, 32 * MIB + 4096, 1ull << 44};
  for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    s->hdr->arena_end = bad[i];
    ck_assert_msg(pdshm_check(s, NULL) == PDSHM_EBADSEG, "arena_end %#llx",
                  (unsigned long long)bad[i]);
    pdshm_stats st;
    ck_assert_int_eq(pdshm_seg_stats(s, &st), PDSHM_EBADSEG);
    pdshm_var *v = pdshm_find_var(root, "a");
    ck_assert_ptr_nonnull(v);
    (void)pdshm_var_create(root, "b", &v); /* any answer, and no SIGBUS */
    (void)pdshm_var_erase(root, "b");
    s->hdr->arena_end = end;
    ck_assert_int_eq(file_size(name), (off_t)end);
  }
  ck_assert_int_eq(pdshm_check(s, stderr), 0);
  ck_assert_int_eq(pdshm_scope_release(root), 0);
  ck_assert_int_eq(pdshm_detach(s), 0);
}
END_TEST

static Suite *grow_suite(void) {
  Suite *s = suite_create("grow");
  TCase *tc = tu_tcase(s, "peers", 120, setup, teardown);
  tcase_add_test(tc, peer_attached_before_growth_reads_after_it);
  tcase_add_test(tc, four_processes_grow_it_past_100_mib);
  tcase_add_test(tc, fork_after_growth);
  tc = tu_tcase(s, "growth", 120, setup, teardown);
  tcase_add_test(tc, growth_is_geometric);
  tcase_add_test(tc, max_size_is_enomem_and_changes_nothing);
  tcase_add_loop_test(tc, full_dev_shm_during_growth, 0, 2);
  tcase_add_test(tc, scribbled_size_is_ebadseg);
  return s;
}

int main(void) { return tu_run(grow_suite()) ? 1 : 0; }
