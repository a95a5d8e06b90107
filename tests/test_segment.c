/* test_segment.c - create, attach, detach, unlink: names, options, hostile
 * files, permissions, read-only attachments, fork. */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static void teardown(void) { tu_cleanup(); }

static bool exists(const char *name) {
  struct stat st;
  return stat(tu_path(name), &st) == 0;
}

static pdshm_stats stats(pdshm_seg *seg) {
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
  return st;
}

START_TEST(create_twice_and_missing) {
  pdshm_seg *a = tu_create("twice", 0, 0), *b = NULL;
  const char *name = a->name;
  ck_assert_int_eq(pdshm_create(name, NULL, &b), PDSHM_EEXIST);
  ck_assert_ptr_null(b);
  pdshm_seg *c = tu_attach(name);
  ck_assert_uint_eq(stats(a).procs_alive, 2);
  pdshm_detach(c);
  ck_assert_int_eq(pdshm_attach("t-no-such-segment", NULL, &b), PDSHM_ENOENT);
  ck_assert_int_eq(pdshm_unlink("t-no-such-segment"), PDSHM_ENOENT);
  ck_assert_int_eq(pdshm_unlink(name), 0);
  ck_assert_int_eq(pdshm_attach(name, NULL, &b), PDSHM_ENOENT);
  ck_assert_uint_eq(stats(a).procs_alive, 1); /* still working */
  pdshm_detach(a);
}
END_TEST

START_TEST(bad_names) {
  pdshm_seg *s = NULL;
  const char *bad[] = {"", ".", "..", "a/b", "a b", "caf\xc3\xa9", "tab\t", "-x/"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(pdshm_create(bad[i], NULL, &s), PDSHM_EINVAL);
    ck_assert_int_eq(pdshm_attach(bad[i], NULL, &s), PDSHM_EINVAL);
    ck_assert_int_eq(pdshm_unlink(bad[i]), PDSHM_EINVAL);
  }
  ck_assert_int_eq(pdshm_create(NULL, NULL, &s), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_create("x", NULL, NULL), PDSHM_EINVAL);
  char longname[PDSHM_SEG_NAME_MAX + 2];
  memset(longname, 'n', sizeof longname);
  longname[PDSHM_SEG_NAME_MAX + 1] = '\0';
  ck_assert_int_eq(pdshm_create(longname, NULL, &s), PDSHM_ENAMETOOLONG);
  ck_assert(!exists(longname));
  longname[PDSHM_SEG_NAME_MAX] = '\0'; /* exactly 200 is fine */
  pdshm_unlink(longname);
  pdshm_options o = {.size = 4u << 20};
  ck_assert_int_eq(pdshm_create(longname, &o, &s), 0);
  pdshm_detach(s);
  ck_assert_int_eq(pdshm_unlink(longname), 0);
  ck_assert_int_eq(pdshm_attach("a/b", NULL, &s), PDSHM_EINVAL);
  ck_assert_str_ne(pdshm_last_error(), ""); /* a failure says why */
}
END_TEST

START_TEST(options) {
  const char *name = tu_name("opts");
  pdshm_seg *s = NULL;
  struct stat st;
  pdshm_unlink(name);
  ck_assert_int_eq(pdshm_create(name, NULL, &s), 0); /* defaults: 64 MiB */
  ck_assert_int_eq(stat(tu_path(name), &st), 0);
  ck_assert_int_eq(st.st_size, (off_t)PDSHM_SIZE_DEFAULT);
  ck_assert_int_eq(st.st_mode & 0777, 0600);
  pdshm_detach(s);
  pdshm_unlink(name);
  pdshm_options bad[] = {{.size = PDSHM_SIZE_MIN - 1},
                         {.size = PDSHM_SIZE_MAX + 4096},
                         {.max_procs = PDSHM_PROCS_MAX + 1},
                         {.mode = 01777},
                         {.max_locks = PDSHM_LOCKS_MIN - 1},
                         {.max_locks = PDSHM_LOCKS_MAX + 1},
                         {.flags = PDSHM_RDONLY},
                         {.size = 2u << 20, .max_procs = 4000}}; /* too small for them */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(pdshm_create(name, &bad[i], &s), PDSHM_EINVAL);
    ck_assert(!exists(name));
  }
  mode_t old = umask(077);
  pdshm_options o = {.size = 2u << 20, .max_procs = 8, .mode = 0640};
  ck_assert_int_eq(pdshm_create(name, &o, &s), 0);
  umask(old);
  ck_assert_int_eq(stat(tu_path(name), &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0640);
  pdshm_options af = {.flags = 0x80};
  pdshm_seg *t;
  ck_assert_int_eq(pdshm_attach(name, &af, &t), PDSHM_EINVAL);
  pdshm_detach(s);
  pdshm_unlink(name);
}
END_TEST

/* More than /dev/shm can ever hold: refused at once.  (Never ask for more
 * than is free but less than its size: tmpfs would fill RAM first.) */
START_TEST(no_space) {
  struct statvfs vfs;
  ck_assert_int_eq(statvfs("/dev/shm", &vfs), 0);
  uint64_t total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
  if (total == 0 || total + (1u << 30) > PDSHM_SIZE_MAX) return; /* no limit to exceed */
  const char *name = tu_name("nospace");
  pdshm_options o = {.size = (total + (1u << 30)) & ~4095ull};
  pdshm_seg *s = NULL;
  ck_assert_int_eq(pdshm_create(name, &o, &s), PDSHM_ENOSPC);
  ck_assert(!exists(name));
  ck_assert_ptr_nonnull(strstr(pdshm_last_error(), "/dev/shm"));
}
END_TEST

/* Writes `len` bytes at `off` of the file behind name. */
static void scribble(const char *name, off_t off, const void *bytes, size_t len) {
  int fd = open(tu_path(name), O_RDWR);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, bytes, len, off), (ssize_t)len);
  close(fd);
}

static pdshm_seg *fresh(const char *tag, char *name) {
  pdshm_seg *s = tu_create(tag, 2u << 20, 4);
  strcpy(name, s->name);
  pdshm_detach(s);
  return NULL;
}

START_TEST(hostile_files) {
  static const uint32_t bad_version = 999, no_procs = 0;
  static const uint64_t bad_fingerprint = 12345, bad_locks_off = 8192;
  const struct {
    const char *tag;
    off_t at;
    const void *bytes;
    size_t len;
  } damage[] = {
      {"magic", 0, "XXXX", 4},
      {"version", offsetof(struct pdshm_hdr, layout_version), &bad_version, 4},
      {"fprint", offsetof(struct pdshm_hdr, fingerprint), &bad_fingerprint, 8},
      {"geom", offsetof(struct pdshm_hdr, locks_off), &bad_locks_off, 8},
      {"procs", offsetof(struct pdshm_hdr, max_procs), &no_procs, 4},
  };
  char name[PDSHM_SEG_NAME_MAX + 1];
  pdshm_seg *s = NULL;
  for (size_t i = 0; i < sizeof damage / sizeof damage[0]; i++) {
    fresh(damage[i].tag, name);
    scribble(name, damage[i].at, damage[i].bytes, damage[i].len);
    ck_assert_msg(pdshm_attach(name, NULL, &s) == PDSHM_EBADSEG, "%s", damage[i].tag);
  }
  fresh("trunc", name);
  ck_assert_int_eq(truncate(tu_path(name), 1u << 20), 0);
  ck_assert_int_eq(pdshm_attach(name, NULL, &s), PDSHM_EBADSEG);
  fresh("grow", name);
  ck_assert_int_eq(truncate(tu_path(name), 3u << 20), 0);
  ck_assert_int_eq(pdshm_attach(name, NULL, &s), PDSHM_EBADSEG);
}
END_TEST

START_TEST(foreign_files) {
  const char *name = tu_name("foreign");
  pdshm_seg *s = NULL;
  int fd = open(tu_path(name), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pdshm_attach(name, NULL, &s), PDSHM_EBADSEG); /* empty */
  char junk[65536];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 131 + 7);
  ck_assert_int_eq(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
  close(fd);
  ck_assert_int_eq(pdshm_attach(name, NULL, &s), PDSHM_EBADSEG);
  pdshm_options ro = {.flags = PDSHM_RDONLY};
  ck_assert_int_eq(pdshm_attach(name, &ro, &s), PDSHM_EBADSEG);
  unlink(tu_path(name));
}
END_TEST

START_TEST(permissions) {
  pdshm_seg *a = tu_create("perm", 2u << 20, 4), *s = NULL;
  ck_assert_int_eq(chmod(tu_path(a->name), 0620), 0);
  ck_assert_int_eq(pdshm_attach(a->name, NULL, &s), PDSHM_EACCES);
  ck_assert_int_eq(chmod(tu_path(a->name), 0606), 0);
  ck_assert_int_eq(pdshm_attach(a->name, NULL, &s), PDSHM_EACCES);
  pdshm_options trust = {.flags = PDSHM_SHARED_USERS};
  ck_assert_int_eq(pdshm_attach(a->name, &trust, &s), 0);
  pdshm_detach(s);
  ck_assert_int_eq(chmod(tu_path(a->name), 0600), 0);
  if (geteuid() == 0) {
    ck_assert_int_eq(chown(tu_path(a->name), 4242, 4242), 0);
    ck_assert_int_eq(pdshm_attach(a->name, NULL, &s), PDSHM_EACCES);
    ck_assert_int_eq(pdshm_attach(a->name, &trust, &s), 0);
    pdshm_detach(s);
  }
  pdshm_detach(a);
}
END_TEST

START_TEST(read_only) {
  pdshm_seg *a = tu_create("ro", 2u << 20, 4), *r = NULL;
  pdshm_options ro = {.flags = PDSHM_RDONLY};
  ck_assert_int_eq(pdshm_attach(a->name, &ro, &r), 0);
  ck_assert_uint_eq(stats(a).procs_alive, 1); /* no slot */
  ck_assert_uint_eq(stats(r).used, stats(a).used);
  unsigned n;
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_reap(r, &n), PDSHM_EROFS);
  ck_assert_int_eq(pdshm_root(r, &root), PDSHM_EROFS);
  char buf[32];
  ck_assert_int_eq(pdshm_unique_name(r, "x", buf, sizeof buf), PDSHM_EROFS);
  ck_assert_int_eq(pdshm_check(r, NULL), 0);
  ck_assert_int_eq(pdshm_detach(r), 0);
  pdshm_detach(a);
}
END_TEST

/* ---- fork ------------------------------------------------------------------------- */

static pdshm_seg *parent_seg;

static int child_uses_inherited(void *arg) {
  (void)arg;
  pdshm_stats st;
  unsigned n;
  if (pdshm_seg_stats(parent_seg, &st) != PDSHM_EFORKED) return 1;
  if (pdshm_reap(parent_seg, &n) != PDSHM_EFORKED) return 2;
  pdshm_seg *mine;
  if (pdshm_attach(parent_seg->name, NULL, &mine)) return 3; /* attaching anew works */
  if (pdshm_seg_stats(mine, &st) || st.procs_alive != 2) return 4;
  pdshm_detach(mine);
  return pdshm_detach(parent_seg) == PDSHM_EFORKED ? 0 : 5;
}

START_TEST(fork_child) {
  parent_seg = tu_create("fork", 2u << 20, 8);
  ck_assert_int_eq(tu_wait(tu_fork(child_uses_inherited, NULL)), 0);
  pdshm_seg *third = tu_attach(parent_seg->name);
  ck_assert_uint_eq(stats(third).procs_alive, 2); /* the parent's slot is intact */
  ck_assert_uint_eq(stats(third).procs_dead, 0);
  pdshm_detach(third);
  pdshm_detach(parent_seg);
}
END_TEST

/* The parent dies while its forked child lives on: the child must not keep
 * the parent's slot alive. */
static int grandchild_waits(void *arg) {
  int fd = *(int *)arg;
  char c;
  return read(fd, &c, 1) == 1 ? 0 : 1;
}

static int parent_dies(void *arg) {
  int *p = arg;
  pdshm_seg *s;
  if (pdshm_attach(parent_seg->name, NULL, &s)) return 1;
  tu_fork(grandchild_waits, &p[0]);
  raise(SIGKILL);
  return 2;
}

START_TEST(dead_parent_forked_child) {
  parent_seg = tu_create("orphan", 2u << 20, 8);
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(tu_wait(tu_fork(parent_dies, p)), 128 + SIGKILL);
  tu_await_dead(parent_seg, 1);
  ck_assert_uint_eq(stats(parent_seg).procs_dead, 1);
  unsigned n = 0;
  ck_assert_int_eq(pdshm_reap(parent_seg, &n), 0);
  ck_assert_uint_eq(n, 1);
  ck_assert_int_eq(write(p[1], "x", 1), 1); /* release the grandchild */
  pdshm_detach(parent_seg);
}
END_TEST

static int attach_and_wait(void *arg) {
  int *p = arg;
  pdshm_seg *s;
  char c;
  if (pdshm_attach(parent_seg->name, NULL, &s)) return 1;
  if (write(p[1], "a", 1) != 1 || read(p[2], &c, 1) != 1) return 2;
  return pdshm_detach(s) ? 3 : 0;
}

START_TEST(many_attach) {
  parent_seg = tu_create("many", 4u << 20, 16);
  int up[2], down[2];
  ck_assert_int_eq(pipe(up), 0);
  ck_assert_int_eq(pipe(down), 0);
  int fds[3] = {up[0], up[1], down[0]};
  pid_t pid[8];
  for (int i = 0; i < 8; i++) pid[i] = tu_fork(attach_and_wait, fds);
  char c;
  for (int i = 0; i < 8; i++) ck_assert_int_eq(read(up[0], &c, 1), 1);
  ck_assert_uint_eq(stats(parent_seg).procs_alive, 9);
  ck_assert_int_eq(write(down[1], "gggggggg", 8), 8);
  for (int i = 0; i < 8; i++) ck_assert_int_eq(tu_wait(pid[i]), 0);
  ck_assert_uint_eq(stats(parent_seg).procs_alive, 1);
  ck_assert_int_eq(pdshm_check(parent_seg, stderr), 0);
  pdshm_detach(parent_seg);
}
END_TEST

/* Attach racing create: never EBADSEG once create has returned. */
static int attach_loop(void *arg) {
  const char *name = arg;
  for (int i = 0; i < 2000; i++) {
    pdshm_seg *s;
    int rc = pdshm_attach(name, NULL, &s);
    if (rc == 0) return pdshm_detach(s) ? 2 : 0;
    if (rc != PDSHM_ENOENT && rc != PDSHM_EBADSEG) return 3;
    usleep(500);
  }
  return 4;
}

START_TEST(attach_races_create) {
  char name[PDSHM_SEG_NAME_MAX + 1];
  snprintf(name, sizeof name, "%s", tu_name("race"));
  pdshm_unlink(name);
  pid_t pid = tu_fork(attach_loop, name);
  usleep(20000);
  pdshm_seg *s = tu_create_as(name, 32u << 20, 0);
  ck_assert_int_eq(tu_wait(pid), 0);
  pdshm_seg *t;
  ck_assert_int_eq(pdshm_attach(name, NULL, &t), 0);
  pdshm_detach(t);
  pdshm_detach(s);
}
END_TEST

static Suite *segment_suite(void) {
  Suite *s = suite_create("segment");
  TCase *tc = tcase_create("lifecycle");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, create_twice_and_missing);
  tcase_add_test(tc, bad_names);
  tcase_add_test(tc, options);
  tcase_add_test(tc, no_space);
  tcase_add_test(tc, hostile_files);
  tcase_add_test(tc, foreign_files);
  tcase_add_test(tc, permissions);
  tcase_add_test(tc, read_only);
  tcase_add_test(tc, fork_child);
  tcase_add_test(tc, dead_parent_forked_child);
  tcase_add_test(tc, many_attach);
  tcase_add_test(tc, attach_races_create);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(segment_suite()) ? 1 : 0; }
