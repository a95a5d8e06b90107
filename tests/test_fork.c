/*
 * test_fork.c - what a fork child may do with what its parent attached: every
 * entry point answers EFORKED (or NULL / 0 / "") and touches nothing, even
 * with the parent's range unmapped; memory handed out before the fork (a
 * tensor's bytes) stays readable and writable and shows the other processes'
 * writes; the parent's death still frees its slot while the child lives.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "model/model.h"
#include "testutil.h"

static char g_name[64];
static pdshm_seg *g_seg;
static pdshm_scope *g_root, *g_kid;
static pdshm_var *g_var;

static void setup(void) {}
static void teardown(void) { tu_cleanup(); }

/* A segment with a scope "kid" and a labelled tensor "w" (with readers and
 * writers) in the root. */
static void make_world(const char *tag) {
  snprintf(g_name, sizeof g_name, "%s", tu_name(tag));
  g_seg = tu_create_as(g_name, 0, 0);
  ck_assert_int_eq(pdshm_root(g_seg, &g_root), 0);
  ck_assert_int_eq(pdshm_scope_new(g_root, "kid", &g_kid), 0);
  ck_assert_int_eq(pdshm_var_create(g_root, "w", &g_var), 0);
  ck_assert_int_eq(pdshm_tensor_resize(g_var, PDSHM_F32, 2, (int64_t[]){4, 8}), 0);
  ck_assert_int_eq(pdshm_var_set_label(g_var, "param"), 0);
  ck_assert_int_eq(pdshm_var_add_reader(g_var, "fc"), 0);
  ck_assert_int_eq(pdshm_var_add_writer(g_var, "sgd"), 0);
}

static int cb_count(pdshm_var *v, void *arg) {
  (void)v;
  ++*(int *)arg;
  return 0;
}
static int cb_scope(const pdshm_scope_info *si, void *arg) {
  (void)si;
  ++*(int *)arg;
  return 0;
}
static int cb_var(const pdshm_var_info *vi, void *arg) {
  (void)vi;
  ++*(int *)arg;
  return 0;
}
static int cb_lock(const pdshm_lock_info *li, void *arg) {
  (void)li;
  ++*(int *)arg;
  return 0;
}

#define FORKED(call, code)                                                                       \
  do {                                                                                           \
    if ((call) != PDSHM_EFORKED) return (code);                                                  \
  } while (0)

/* Every call taking the inherited variable. */
static int var_calls(void) {
  const char *ops[4];
  FORKED(pdshm_var_lock(g_var, 1), 1);
  FORKED(pdshm_var_lock(g_var, 0), 2);
  FORKED(pdshm_var_unlock(g_var), 3);
  FORKED(pdshm_var_set_label(g_var, "x"), 4);
  FORKED(pdshm_var_add_reader(g_var, "x"), 5);
  FORKED(pdshm_var_add_writer(g_var, "x"), 6);
  FORKED(pdshm_var_readers(g_var, ops, 4), 7);
  FORKED(pdshm_var_writers(g_var, ops, 4), 8);
  FORKED(pdshm_tensor_resize(g_var, PDSHM_U8, 1, (int64_t[]){3}), 9);
  FORKED(pdshm_tensor_dtype(g_var), 10);
  FORKED(pdshm_tensor_ndim(g_var), 11);
  if (strcmp(pdshm_var_name(g_var), "") || strcmp(pdshm_var_label(g_var), "")) return 12;
  if (!strstr(pdshm_last_error(), "parent")) return 13; /* the EFORKED detail */
  if (pdshm_var_version(g_var) != 0) return 14;
  pdshm_varref ref = pdshm_var_ref(g_var);
  if (ref.off || ref.gen) return 15;
  if (pdshm_tensor_data(g_var) || pdshm_tensor_dims(g_var) || pdshm_tensor_nbytes(g_var))
    return 16;
  return 0;
}

/* Every call taking an inherited scope handle. */
static int scope_calls(void) {
  pdshm_scope *s = NULL;
  pdshm_var *v = NULL;
  int n = 0;
  FORKED(pdshm_scope_new(g_root, "x", &s), 20);
  FORKED(pdshm_scope_dup(g_root, &s), 21);
  FORKED(pdshm_scope_parent(g_kid, &s), 22);
  FORKED(pdshm_scope_unlink(g_root, "kid"), 23);
  FORKED(pdshm_scope_drop_kids(g_root), 24);
  FORKED(pdshm_var_get(g_root, "w", &v), 25);
  FORKED(pdshm_var_create(g_root, "y", &v), 26);
  FORKED(pdshm_var_new(g_root, &v), 27);
  FORKED(pdshm_var_erase(g_root, "w"), 28);
  FORKED(pdshm_var_rename(g_root, "w", "z"), 29);
  FORKED(pdshm_scope_foreach_var(g_root, NULL, cb_count, &n), 30);
  if (s || v || n) return 31;
  if (pdshm_find_var(g_kid, "w") || pdshm_find_local_var(g_root, "w")) return 32;
  if (strcmp(pdshm_scope_name(g_kid), "")) return 33;
  FORKED(pdshm_scope_release(g_kid), 34); /* frees the copy only */
  return 0;
}

/* Every call taking the inherited segment handle; then its detach. */
static int seg_calls(void) {
  pdshm_scope *s = NULL;
  pdshm_stats st;
  pdshm_daemon_info di;
  pdshm_proc_info pi[4];
  pdshm_seg_info si;
  pdshm_alloc_info ai;
  char buf[64];
  unsigned reaped = 7;
  int n = 0;
  FORKED(pdshm_root(g_seg, &s), 40);
  FORKED(pdshm_scope_open(g_seg, "kid", &s), 41);
  if (s || pdshm_varref_get(g_seg, (pdshm_varref){8, 8})) return 42;
  FORKED(pdshm_unique_name(g_seg, "p", buf, sizeof buf), 43);
  FORKED(pdshm_seg_stats(g_seg, &st), 44);
  FORKED(pdshm_reap(g_seg, &reaped), 45);
  if (reaped) return 46;
  FORKED(pdshm_check(g_seg, NULL), 47);
  FORKED(pdshm_daemon_claim(g_seg), 48);
  FORKED(pdshm_daemon_beat(g_seg), 49);
  FORKED(pdshm_daemon_release(g_seg), 50);
  FORKED(pdshm_daemon_status(g_seg, &di), 51);
  FORKED(pdshm_procs(g_seg, pi, 4), 52);
  FORKED(pdshm_inspect_seg(g_seg, &si), 53);
  FORKED(pdshm_inspect_scopes(g_seg, cb_scope, &n), 54);
  FORKED(pdshm_inspect_vars(g_seg, 1, cb_var, &n), 55);
  FORKED(pdshm_inspect_locks(g_seg, cb_lock, &n), 56);
  FORKED(pdshm_inspect_alloc(g_seg, &ai), 57);
  if (n) return 58;
  FORKED(pdshm_detach(g_seg), 59);
  return 0;
}

static int every_call(void) {
  int rc = var_calls();
  if (!rc) rc = scope_calls();
  return rc ? rc : seg_calls();
}

/* The child with the range mapped again (what the library does). */
static int child_mapped(void *arg) {
  (void)arg;
  return every_call();
}

/* The child as if mapping again had failed: nothing may read the range. */
static int child_unmapped(void *arg) {
  (void)arg;
  if (munmap(g_seg->base, g_seg->size)) return 90;
  g_seg->mapped = false;
  return every_call();
}

START_TEST(every_entry_point_answers_eforked_in_a_child) {
  make_world("fork-calls");
  uint64_t version = pdshm_var_version(g_var);
  ck_assert_int_eq(tu_wait(tu_spawn(child_mapped, NULL)), 0);
  ck_assert_int_eq(tu_wait(tu_spawn(child_unmapped, NULL)), 0);
  /* nothing changed here */
  ck_assert_uint_eq(pdshm_var_version(g_var), version);
  ck_assert_str_eq(pdshm_var_label(g_var), "param");
  ck_assert_int_eq(pdshm_tensor_dtype(g_var), PDSHM_F32);
  ck_assert_ptr_nonnull(pdshm_find_var(g_kid, "w"));
  ck_assert_str_eq(pdshm_scope_name(g_kid), "kid");
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(g_seg, &st), 0);
  ck_assert_uint_eq(st.procs_alive, 1);
  ck_assert_uint_eq(st.procs_dead, 0);
  ck_assert_int_eq(pdshm_check(g_seg, stderr), 0);
  ck_assert_int_eq(pdshm_scope_release(g_kid), 0);
  ck_assert_int_eq(pdshm_scope_release(g_root), 0);
  ck_assert_int_eq(pdshm_detach(g_seg), 0);
}
END_TEST

START_TEST(attach_records_the_file_identity) {
  make_world("fork-ino");
  struct stat st;
  ck_assert_int_eq(stat(tu_path(g_name), &st), 0);
  ck_assert_uint_eq(g_seg->ino, (uint64_t)st.st_ino);
  ck_assert_uint_eq(g_seg->dev, (uint64_t)st.st_dev);
  pdshm_seg *b = tu_attach(g_name);
  ck_assert_uint_eq(b->ino, (uint64_t)st.st_ino);
  ck_assert_int_eq(pdshm_detach(b), 0);
}
END_TEST

/* ---- inherited memory ------------------------------------------------------------ */

#define NBYTES 4096

struct family {
  int to_test[2];  /* middle -> test: its slot and the grandchild's pid */
  int to_kid[2];   /* test -> grandchild: steps                          */
  int from_kid[2]; /* grandchild -> test: steps                          */
  pdshm_seg *mid_seg; /* the middle process's attachment (grandchild: inherited) */
  uint8_t *data;      /* the tensor's bytes, as the middle process took them */
};

static int step_wait(int fd, char want) {
  char c;
  return read(fd, &c, 1) == 1 && c == want ? 0 : -1;
}
static int step_say(int fd, char c) { return write(fd, &c, 1) == 1 ? 0 : -1; }

/* A process forked from the grandchild: the grandchild's handle is inherited
 * the same way (attach_inherit.c, invariant 3). */
static int great_grandchild(void *arg) {
  struct family *f = arg;
  return f->data[2] == 0xC3 && pdshm_var_version(g_var) == 0 ? 0 : 1;
}

/* Reads and writes through the pointer its parent took, before and after
 * that parent dies; then detaches the inherited handle. */
static int grandchild(struct family *f) {
  for (int i = 4; i < NBYTES; i++)
    if (f->data[i] != 0x11) return 60;
  if (step_say(f->from_kid[1], 'g') || step_wait(f->to_kid[0], '1')) return 61;
  if (f->data[0] != 0xA1 || f->data[3] != 0xD4) return 62; /* the test's, the parent's */
  f->data[1] = 0xB2;
  if (step_say(f->from_kid[1], 'w') || step_wait(f->to_kid[0], '2')) return 63;
  if (f->data[2] != 0xC3) return 64; /* written after the parent's death */
  if (tu_wait(tu_fork(great_grandchild, f))) return 65;
  if (pdshm_detach(f->mid_seg) != PDSHM_EFORKED) return 66;
  unsigned char vec;
  if (mincore(f->data - ((uintptr_t)f->data % 4096), 4096, &vec) == 0 || errno != ENOMEM)
    return 67; /* the detach unmapped the range */
  return 0;
}

/* The middle process: attaches, takes the tensor's bytes, forks the
 * grandchild, writes one more byte, waits to be killed. */
static int middle(void *arg) {
  struct family *f = arg;
  pdshm_scope *root;
  if (pdshm_attach(g_name, NULL, &f->mid_seg) || pdshm_root(f->mid_seg, &root)) return 1;
  g_var = pdshm_find_var(root, "w");
  if (!g_var || !(f->data = pdshm_tensor_data(g_var))) return 2;
  fflush(NULL);
  pid_t g = fork();
  if (g < 0) return 3;
  if (g == 0) _exit(grandchild(f));
  close(f->from_kid[1]); /* the grandchild's: its death reads as EOF in the test */
  close(f->to_kid[0]);
  f->data[3] = 0xD4;
  uint64_t msg[2] = {f->mid_seg->slot, (uint64_t)g};
  if (write(f->to_test[1], msg, sizeof msg) != sizeof msg) return 4;
  for (;;) pause();
}

static void read_full(int fd, void *p, size_t n) {
  uint8_t *b = p;
  while (n) {
    ssize_t k = read(fd, b, n);
    ck_assert_msg(k > 0, "a helper process went away");
    b += k;
    n -= (size_t)k;
  }
}

static void say(int fd, char c) { ck_assert_int_eq(write(fd, &c, 1), 1); }
static void hear(int fd, char want) {
  char c = 0;
  read_full(fd, &c, 1);
  ck_assert_int_eq(c, want);
}

START_TEST(inherited_bytes_stay_mapped_and_parent_death_frees_its_slot) {
  snprintf(g_name, sizeof g_name, "%s", tu_name("fork-bytes"));
  g_seg = tu_create_as(g_name, 0, 0);
  ck_assert_int_eq(pdshm_root(g_seg, &g_root), 0);
  ck_assert_int_eq(pdshm_var_create(g_root, "w", &g_var), 0);
  ck_assert_int_eq(pdshm_tensor_resize(g_var, PDSHM_U8, 1, (int64_t[]){NBYTES}), 0);
  uint8_t *mine = pdshm_tensor_data(g_var);
  memset(mine, 0x11, NBYTES);
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0); /* to wait for the orphan */
  struct family f = {0};
  ck_assert_int_eq(pipe(f.to_test), 0);
  ck_assert_int_eq(pipe(f.to_kid), 0);
  ck_assert_int_eq(pipe(f.from_kid), 0);
  pid_t mid = tu_spawn(middle, &f);
  close(f.to_test[1]); /* so that a helper's early death reads as EOF */
  close(f.from_kid[1]);
  close(f.to_kid[0]);
  uint64_t msg[2];
  read_full(f.to_test[0], msg, sizeof msg);
  uint32_t slot = (uint32_t)msg[0];
  pid_t g = (pid_t)msg[1];
  hear(f.from_kid[0], 'g');
  mine[0] = 0xA1;
  say(f.to_kid[1], '1');
  hear(f.from_kid[0], 'w');
  ck_assert_uint_eq(mine[1], 0xB2); /* the grandchild's write */
  ck_assert_int_eq(kill(mid, SIGKILL), 0);
  ck_assert_int_eq(tu_wait(mid), 128 + SIGKILL);
  tu_await_dead(g_seg, 1); /* the grandchild holds no reference to its OFD */
  ck_assert_int_eq(pdshm__slot_alive(g_seg, slot), 0);
  unsigned reaped = 0;
  ck_assert_int_eq(pdshm_reap(g_seg, &reaped), 0);
  ck_assert_uint_eq(reaped, 1);
  ck_assert_int_eq(kill(g, 0), 0); /* while the grandchild lives */
  mine[2] = 0xC3;
  say(f.to_kid[1], '2');
  ck_assert_int_eq(tu_wait(g), 0);
  ck_assert_int_eq(pdshm_check(g_seg, stderr), 0);
  ck_assert_int_eq(pdshm_scope_release(g_root), 0);
  ck_assert_int_eq(pdshm_detach(g_seg), 0);
}
END_TEST

/* The inherited range is mapped again through the descriptor, so it does
 * not need the name: a segment unlinked before the fork still works. */
static int child_reads_unlinked(void *arg) {
  const uint8_t *data = arg;
  return data[0] == 0x5A && data[NBYTES - 1] == 0xA5 ? 0 : 1;
}

START_TEST(inherited_bytes_of_an_unlinked_segment) {
  snprintf(g_name, sizeof g_name, "%s", tu_name("fork-unlinked"));
  g_seg = tu_create_as(g_name, 0, 0);
  ck_assert_int_eq(pdshm_root(g_seg, &g_root), 0);
  ck_assert_int_eq(pdshm_var_create(g_root, "w", &g_var), 0);
  ck_assert_int_eq(pdshm_tensor_resize(g_var, PDSHM_U8, 1, (int64_t[]){NBYTES}), 0);
  uint8_t *data = pdshm_tensor_data(g_var);
  data[0] = 0x5A;
  data[NBYTES - 1] = 0xA5;
  ck_assert_int_eq(pdshm_unlink(g_name), 0);
  ck_assert_int_eq(tu_wait(tu_spawn(child_reads_unlinked, data)), 0);
  ck_assert_int_eq(pdshm_scope_release(g_root), 0);
  ck_assert_int_eq(pdshm_detach(g_seg), 0);
}
END_TEST

/* A child whose inherited attachment could not be mapped again, and whose
 * thread inherited a lock record reserved in it: a lock taken through an
 * attachment of its own must not read the inherited range. */
static int child_locks_in_its_own_attachment(void *arg) {
  (void)arg;
  /* the range kept inaccessible, so that the child's own attach cannot map
   * the segment there again and make a read of it harmless */
  if (mmap(g_seg->base, g_seg->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
      g_seg->base)
    return 90;
  g_seg->mapped = false;
  pdshm_seg *mine;
  pdshm_scope *root;
  if (pdshm_attach(g_name, NULL, &mine) || pdshm_root(mine, &root)) return 91;
  pdshm_var *v = pdshm_find_var(root, "w");
  if (!v) return 92;
  if (pdshm_var_lock(v, 1) || pdshm_var_unlock(v)) return 93;
  if (pdshm_var_lock(v, 0) || pdshm_var_unlock(v)) return 94;
  if (pdshm_scope_release(root) || pdshm_detach(mine)) return 95;
  return 0;
}

START_TEST(lock_in_a_child_beside_an_unmapped_inherited_attachment) {
  make_world("fork-lock");
  ck_assert_int_eq(pdshm_var_lock(g_var, 1), 0); /* this thread reserves a record */
  ck_assert_int_eq(pdshm_var_unlock(g_var), 0);
  ck_assert_int_eq(tu_wait(tu_spawn(child_locks_in_its_own_attachment, NULL)), 0);
  ck_assert_int_eq(pdshm_var_lock(g_var, 1), 0); /* the parent's record is its own still */
  ck_assert_int_eq(pdshm_var_unlock(g_var), 0);
  ck_assert_int_eq(pdshm_check(g_seg, stderr), 0);
}
END_TEST

static Suite *fork_suite(void) {
  Suite *s = suite_create("fork");
  TCase *tc = tu_tcase(s, "calls", 20, setup, teardown);
  tcase_add_test(tc, every_entry_point_answers_eforked_in_a_child);
  tcase_add_test(tc, attach_records_the_file_identity);
  tcase_add_test(tc, lock_in_a_child_beside_an_unmapped_inherited_attachment);
  tc = tu_tcase(s, "inherited memory", 20, setup, teardown);
  tcase_add_test(tc, inherited_bytes_stay_mapped_and_parent_death_frees_its_slot);
  tcase_add_test(tc, inherited_bytes_of_an_unlinked_segment);
  return s;
}

int main(void) { return tu_run(fork_suite()) ? 1 : 0; }
