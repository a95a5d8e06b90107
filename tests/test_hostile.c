/* test_hostile.c - what sits under a segment's name and is not a good
 * segment: damaged headers, wrong sizes, random bytes, a creator still at
 * work, files that are not regular; owners and modes that are not ours. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* F_OFD_SETLK */
#endif
#include <dirent.h>
#include <poll.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "segutil.h"

/* ---- hostile files -------------------------------------------------------------- */

START_TEST(corrupt_magic_is_ebadseg) {
  const char *name = made_and_detached("magic", 0);
  for (int at = 0; at < PDSHM_MAGIC_LEN; at++) {
    struct pdshm_hdr h;
    read_hdr(name, &h);
    uint8_t was = h.magic[at], bad = was ^ 0x20;
    write_at(name, at, &bad, 1);
    assert_badseg(name, "a byte of the magic flipped");
    write_at(name, at, &was, 1);
  }
  ck_assert_int_eq(attach_rc(name, 0), 0); /* restored: attachable again */
  write_at(name, 0, "garbage!", 8);
  assert_badseg(name, "magic overwritten");
}
END_TEST

START_TEST(wrong_version_or_fingerprint_is_ebadseg) {
  const char *name = made_and_detached("version", 0);
  struct pdshm_hdr good, h;
  read_hdr(name, &good);
  h = good;
  h.layout_version++;
  write_at(name, 0, &h, sizeof h);
  assert_badseg(name, "layout version + 1");
  h = good;
  h.layout_version = 0;
  write_at(name, 0, &h, sizeof h);
  assert_badseg(name, "layout version 0");
  h = good;
  h.fingerprint ^= 1;
  write_at(name, 0, &h, sizeof h);
  assert_badseg(name, "fingerprint");
  h = good;
  h.hdr_bytes += 8;
  write_at(name, 0, &h, sizeof h);
  assert_badseg(name, "hdr_bytes");
  write_at(name, 0, &good, sizeof good);
  ck_assert_int_eq(attach_rc(name, 0), 0);
}
END_TEST

START_TEST(truncated_file_is_ebadseg) {
  const char *name = made_and_detached("trunc", 0);
  off_t size = stat_of(name).st_size;
  /* attach must compare sizes before it maps: a mapping past the end of the
   * file would be a SIGBUS at the first touch, and this test would die */
  resize_file(name, size - 4096);
  assert_badseg(name, "one page short");
  resize_file(name, size / 2);
  assert_badseg(name, "half the file");
  resize_file(name, (off_t)sizeof(struct pdshm_hdr) + 8);
  assert_badseg(name, "just the header");
  resize_file(name, 100);
  assert_badseg(name, "less than a header");
}
END_TEST

START_TEST(extended_file_is_ebadseg) {
  const char *name = made_and_detached("extend", 0);
  off_t size = stat_of(name).st_size;
  resize_file(name, size + 4096);
  assert_badseg(name, "one page more");
  resize_file(name, size + 1);
  assert_badseg(name, "one byte more");
  resize_file(name, size);
  ck_assert_int_eq(attach_rc(name, 0), 0);
}
END_TEST

/* A segment that grew: the size field (arena_end) past the file or past
 * max_size, or a file past max_size, is EBADSEG; a file longer than
 * arena_end (a grower that died before its publication) is not. */
START_TEST(grown_size_past_file_is_ebadseg) {
  const char *name = tu_name("grown");
  pdshm_options o = {.size = 4u << 20, .max_size = 32u << 20, .max_procs = 4};
  pdshm_seg *s = tu_create_opts(name, &o);
  pdshm_scope *root;
  pdshm_var *v;
  ck_assert_int_eq(pdshm_root(s, &root), 0);
  ck_assert_int_eq(pdshm_var_create(root, "t", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_U8, 1, (int64_t[]){6 << 20}), 0);
  ck_assert_int_eq(pdshm_scope_release(root), 0);
  ck_assert_int_eq(pdshm_detach(s), 0);
  off_t size = stat_of(name).st_size;
  struct pdshm_hdr good, h;
  read_hdr(name, &good);
  ck_assert_uint_eq(good.arena_end, (uint64_t)size);
  ck_assert_uint_gt(good.arena_end, good.size);
  h = good;
  h.arena_end += 1u << 20;
  write_at(name, 0, &h, sizeof h);
  assert_badseg(name, "arena_end past the file");
  h.arena_end = good.max_size + 4096;
  write_at(name, 0, &h, sizeof h);
  resize_file(name, (off_t)h.arena_end);
  assert_badseg(name, "arena_end and file past max_size");
  write_at(name, 0, &good, sizeof good);
  assert_badseg(name, "file past max_size");
  resize_file(name, size + (1 << 20));
  ck_assert_int_eq(attach_rc(name, 0), 0);
  ck_assert_int_eq(pdshm_attach(name, NULL, &s), 0);
  ck_assert_int_eq(pdshm_check(s, stderr), 0);
  ck_assert_int_eq(pdshm_detach(s), 0);
}
END_TEST

START_TEST(empty_file_is_ebadseg) {
  const char *name = tu_name("empty");
  tu_track(name);
  int fd = open(tu_path(name), O_RDWR | O_CREAT | O_EXCL, 0600);
  ck_assert_int_ge(fd, 0);
  close(fd);
  assert_badseg(name, "a file of 0 bytes");
}
END_TEST

START_TEST(random_file_is_ebadseg) {
  const char *name = tu_name("random");
  tu_track(name);
  int fd = open(tu_path(name), O_RDWR | O_CREAT | O_EXCL, 0600);
  ck_assert_int_ge(fd, 0);
  size_t n = 2u << 20;
  uint8_t *buf = malloc(n);
  unsigned seed = 12345;
  for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rand_r(&seed);
  ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
  close(fd);
  assert_badseg(name, "2 MiB of random bytes");
  /* the same with a correct magic in front */
  memcpy(buf, PDSHM_MAGIC, PDSHM_MAGIC_LEN);
  write_at(name, 0, buf, 4096);
  assert_badseg(name, "random bytes behind a good magic");
  free(buf);
}
END_TEST

START_TEST(altered_geometry_is_ebadseg) {
  const char *name = made_and_detached("geom", 0);
  off_t size = stat_of(name).st_size;
  struct pdshm_hdr good, h;
  read_hdr(name, &good);
  const char *what[] = {"slots_off + 4096", "slots_off - 4096", "locks_off + 4096",
                        "locks_off 0",     "arena_off + 4096", "arena_off - 4096",
                        "arena_end - 4096", "arena_end + 4096", "max_procs 0",
                        "max_procs > PDSHM_PROCS_MAX", "max_procs * 2", "max_locks 1",
                        "max_locks * 2", "max_locks > PDSHM_LOCKS_MAX", "max_size - 4096",
                        "size field + 4096", "size field 0", "max_size > PDSHM_SIZE_MAX",
                        "max_size + 1", "arena_end + 16", "max_size 0"};
  for (unsigned k = 0; k < sizeof what / sizeof what[0]; k++) {
    h = good;
    switch (k) {
    case 0: h.slots_off += 4096; break;
    case 1: h.slots_off -= 4096; break;
    case 2: h.locks_off += 4096; break;
    case 3: h.locks_off = 0; break;
    case 4: h.arena_off += 4096; break;
    case 5: h.arena_off -= 4096; break;
    case 6: h.arena_end -= 4096; break;
    case 7: h.arena_end += 4096; break;
    case 8: h.max_procs = 0; break;
    case 9: h.max_procs = PDSHM_PROCS_MAX + 1; break;
    case 10: h.max_procs *= 2; break;
    case 11: h.max_locks = 1; break;
    case 12: h.max_locks *= 2; break;
    case 13: h.max_locks = PDSHM_LOCKS_MAX + 1; break;
    case 14: h.max_size -= 4096; break;
    case 15: h.size += 4096; break;
    case 16: h.size = 0; break;
    case 17: h.max_size = PDSHM_SIZE_MAX + 4096; break;
    case 18: h.max_size += 1; break;
    case 19: h.arena_end += 16; break;
    case 20: h.max_size = 0; break;
    }
    write_at(name, 0, &h, sizeof h);
    assert_badseg(name, what[k]);
  }
  /* size field and file grown together: the recomputed layout still differs */
  h = good;
  h.size += 1u << 20;
  write_at(name, 0, &h, sizeof h);
  resize_file(name, size + (1 << 20));
  assert_badseg(name, "size field and file both grown");
  resize_file(name, size);
  write_at(name, 0, &good, sizeof good);
  ck_assert_int_eq(attach_rc(name, 0), 0);
}
END_TEST

/* ---- attaching from a helper process, with a deadline ----------------------------- */


struct probe {
  int p[2];
  unsigned flags;
};

/* In a child: attaches g_name, reports what attach returned. */
static int probe_attach(void *arg) {
  struct probe *pr = arg;
  close(pr->p[0]);
  pdshm_options o = {.flags = pr->flags};
  pdshm_seg *s;
  int64_t rc = pdshm_attach(g_name, &o, &s);
  if (!rc) pdshm_detach(s);
  return write(pr->p[1], &rc, sizeof rc) == sizeof rc ? 0 : 1;
}

static pid_t probe_start(struct probe *pr, unsigned flags) {
  ck_assert_int_eq(pipe(pr->p), 0);
  pr->flags = flags;
  pid_t pid = tu_spawn(probe_attach, pr);
  close(pr->p[1]);
  return pid;
}

/* Has the probe answered yet (within `ms` milliseconds)? */
static bool probe_answered(struct probe *pr, int ms) {
  struct pollfd p = {.fd = pr->p[0], .events = POLLIN};
  return poll(&p, 1, ms) == 1;
}

/* What the probe's attach returned, within `ms` milliseconds; false when
 * the attach is still blocked (the probe is then killed). */
static bool probe_result(struct probe *pr, pid_t pid, int ms, int64_t *out) {
  bool done = probe_answered(pr, ms) && read(pr->p[0], out, sizeof *out) == sizeof *out;
  if (!done) kill(pid, SIGKILL);
  tu_wait(pid);
  close(pr->p[0]);
  return done;
}

/* Has process pid the file at path open? */
static bool has_open(pid_t pid, const char *path) {
  char dir[64], fd[64 + 256], link[PDSHM_SEG_NAME_MAX + 64];
  snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(dir);
  bool found = false;
  for (struct dirent *e; d && !found && (e = readdir(d));) {
    snprintf(fd, sizeof fd, "%s/%s", dir, e->d_name);
    ssize_t n = readlink(fd, link, sizeof link - 1);
    found = n > 0 && (link[n] = '\0', !strcmp(link, path));
  }
  if (d) closedir(d);
  return found;
}

static void init_lock(int fd, short type) {
  struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = PDSHM_OFD_INIT, .l_len = 1};
  ck_assert_int_eq(fcntl(fd, F_OFD_SETLK, &fl), 0);
}

/* A creator still building (it holds the init lock; no magic yet): attach
 * waits for it; once it is done, attach succeeds.  (segment.c invariant 3)
 * The probe's attach is seen under way (the file open in the probe), then
 * left 300 ms, time enough for an attach that does not wait to answer
 * EBADSEG: it must not have answered before the creator is done. */
START_TEST(attach_waits_for_a_creator) {
  for (int dies = 0; dies < 2; dies++) {
    snprintf(g_name, sizeof g_name, "%s", made_and_detached("creator", 0));
    int fd = open(tu_path(g_name), O_RDWR);
    ck_assert_int_ge(fd, 0);
    init_lock(fd, F_WRLCK);
    uint8_t magic[PDSHM_MAGIC_LEN], zero[PDSHM_MAGIC_LEN] = {0};
    ck_assert_int_eq(pread(fd, magic, sizeof magic, 0), sizeof magic);
    ck_assert_int_eq(pwrite(fd, zero, sizeof zero, 0), sizeof zero);
    struct probe pr;
    pid_t pid = probe_start(&pr, 0);
    for (uint64_t end = tu_now_ns() + 10000000000ull; !has_open(pid, tu_path(g_name));) {
      ck_assert_msg(!probe_answered(&pr, 0), "attach answered while the creator held its lock");
      ck_assert_msg(tu_now_ns() < end, "the probe never opened the segment in 10 s");
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    ck_assert_msg(!probe_answered(&pr, 300), "attach answered while the creator held its lock");
    if (!dies) ck_assert_int_eq(pwrite(fd, magic, sizeof magic, 0), sizeof magic);
    init_lock(fd, F_UNLCK); /* done, or dead without its magic */
    int64_t rc;
    ck_assert_msg(probe_result(&pr, pid, 10000, &rc),
                  "attach still blocked 10 s after the creator was done");
    close(fd);
    if (dies) {
      ck_assert_msg(rc == PDSHM_EBADSEG, "a creator died: attach gave %s", pdshm_err_name((int)rc));
    } else {
      ck_assert_msg(rc == 0, "attach racing a creator gave %s", pdshm_err_name((int)rc));
    }
  }
}
END_TEST

/* Something else than a regular file under the segment's name: every
 * attach answers at once, with one of pdshm's own codes. */
START_TEST(non_regular_files_refused) {
  const char *target = made_and_detached("target", 0);
  char target_path[PDSHM_SEG_NAME_MAX + 32];
  snprintf(target_path, sizeof target_path, "%s", tu_path(target));
  const char *kinds[] = {"a directory", "a FIFO", "a symbolic link to a segment"};
  int64_t res[3][2];
  bool done[3][2];
  for (int k = 0; k < 3; k++) {
    snprintf(g_name, sizeof g_name, "%s", tu_name("odd"));
    const char *path = tu_path(g_name);
    int made = k == 0 ? mkdir(path, 0700) : k == 1 ? mkfifo(path, 0600) : symlink(target_path, path);
    ck_assert_msg(made == 0, "making %s: %s", kinds[k], strerror(errno));
    for (int f = 0; f < 2; f++) {
      struct probe pr;
      pid_t pid = probe_start(&pr, f ? PDSHM_RDONLY : 0);
      done[k][f] = probe_result(&pr, pid, 5000, &res[k][f]);
    }
    ck_assert_int_eq(k == 0 ? rmdir(path) : unlink(path), 0);
  }
  for (int k = 0; k < 3; k++)
    for (int f = 0; f < 2; f++) {
      const char *how = f ? "read-only attach" : "attach";
      ck_assert_msg(done[k][f], "%s of %s is still blocked after 5 s", how, kinds[k]);
      int rc = (int)res[k][f];
      ck_assert_msg(rc < 0, "%s of %s succeeded", how, kinds[k]);
      ck_assert_msg(strcmp(pdshm_err_name(rc), "PDSHM_E?") != 0,
                    "%s of %s gave %d, not a PDSHM_E* code", how, kinds[k], rc);
    }
}
END_TEST

/* ---- owner and mode ------------------------------------------------------------- */

START_TEST(writable_by_others_needs_shared_users) {
  const char *name = made_and_detached("mode", 0);
  const mode_t bad[] = {0666, 0620, 0602, 0660};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(chmod(tu_path(name), bad[i]), 0);
    int rc = attach_rc(name, 0);
    ck_assert_msg(rc == PDSHM_EACCES, "mode %03o: attach gave %s", (unsigned)bad[i],
                  pdshm_err_name(rc));
    ck_assert_int_eq(attach_rc(name, PDSHM_SHARED_USERS), 0);
    ck_assert_int_eq(attach_rc(name, PDSHM_SHARED_USERS | PDSHM_RDONLY), 0);
  }
  ck_assert_int_eq(chmod(tu_path(name), 0644), 0);
  ck_assert_int_eq(attach_rc(name, 0), 0);
}
END_TEST

START_TEST(foreign_owner_needs_shared_users) {
  if (geteuid() != 0) {
    fprintf(stderr, "foreign_owner_needs_shared_users: not root, cannot chown: not tested\n");
    return;
  }
  const char *name = made_and_detached("owner", 0);
  ck_assert_int_eq(chown(tu_path(name), 4242, (gid_t)-1), 0);
  int rc = attach_rc(name, 0);
  ck_assert_msg(rc == PDSHM_EACCES, "owned by uid 4242: attach gave %s", pdshm_err_name(rc));
  ck_assert_int_eq(attach_rc(name, PDSHM_SHARED_USERS), 0);
  ck_assert_int_eq(chown(tu_path(name), geteuid(), (gid_t)-1), 0);
  ck_assert_int_eq(attach_rc(name, 0), 0);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------ */

static Suite *hostile_suite(void) {
  Suite *s = suite_create("hostile segments");
  TCase *tc;
  tc = tu_tcase(s, "hostile files", 20, setup, teardown);
  tcase_add_test(tc, corrupt_magic_is_ebadseg);
  tcase_add_test(tc, wrong_version_or_fingerprint_is_ebadseg);
  tcase_add_test(tc, truncated_file_is_ebadseg);
  tcase_add_test(tc, extended_file_is_ebadseg);
  tcase_add_test(tc, grown_size_past_file_is_ebadseg);
  tcase_add_test(tc, empty_file_is_ebadseg);
  tcase_add_test(tc, random_file_is_ebadseg);
  tcase_add_test(tc, altered_geometry_is_ebadseg);
  tcase_add_test(tc, attach_waits_for_a_creator);
  tcase_add_test(tc, non_regular_files_refused);
  tc = tu_tcase(s, "owner and mode", 10, setup, teardown);
  tcase_add_test(tc, writable_by_others_needs_shared_users);
  tcase_add_test(tc, foreign_owner_needs_shared_users);
  return s;
}

int main(void) { return tu_run(hostile_suite()) ? 1 : 0; }
