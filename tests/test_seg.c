/* test_seg.c - segments: create, attach, detach, unlink; names and options;
 * read-only attachments; error names; fork(); processes attaching at once
 * and racing a creator.  Hostile files: test_hostile.c. */
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
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "segutil.h"

/* ---- lifecycle ------------------------------------------------------------------ */

START_TEST(create_twice_is_eexist) {
  const char *name = tu_name("twice");
  pdshm_seg *a = tu_create_as(name, 0, 0), *b = (pdshm_seg *)1;
  off_t size = stat_of(name).st_size;
  ck_assert_int_eq(pdshm_create(name, NULL, &b), PDSHM_EEXIST);
  ck_assert_ptr_null(b);
  /* the failed create neither removed nor resized the first one */
  ck_assert_int_eq(stat_of(name).st_size, size);
  pdshm_seg *c = tu_attach(name);
  ck_assert_uint_eq(stats_of(c).procs_alive, 2);
  ck_assert_int_eq(pdshm_detach(c), 0);
  ck_assert_int_eq(pdshm_detach(a), 0);
}
END_TEST

START_TEST(attach_missing_is_enoent) {
  pdshm_seg *s = (pdshm_seg *)1;
  const char *name = tu_name("missing");
  ck_assert_int_eq(pdshm_attach(name, NULL, &s), PDSHM_ENOENT);
  ck_assert_ptr_null(s);
  ck_assert(!exists(tu_path(name)));
}
END_TEST

START_TEST(unlink_missing_is_enoent) {
  ck_assert_int_eq(pdshm_unlink(tu_name("missing")), PDSHM_ENOENT);
}
END_TEST

START_TEST(unlinked_segment_keeps_working) {
  const char *name = tu_name("unlinked");
  pdshm_seg *seg = tu_create_as(name, 0, 0);
  ck_assert_int_eq(pdshm_unlink(name), 0);
  ck_assert(!exists(tu_path(name)));
  pdshm_seg *s = (pdshm_seg *)1;
  ck_assert_int_eq(pdshm_attach(name, NULL, &s), PDSHM_ENOENT);
  ck_assert_ptr_null(s);
  /* the old attachment: scopes, variables, tensors, stats, reap */
  pdshm_scope *root, *local;
  pdshm_var *v;
  int64_t dims[1] = {1000};
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  ck_assert_int_eq(pdshm_scope_new(root, NULL, &local), 0);
  ck_assert_int_eq(pdshm_var_create(local, "w", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, dims), 0);
  ((float *)pdshm_tensor_data(v))[999] = 1.5f;
  ck_assert_ptr_eq(pdshm_find_var(local, "w"), v);
  ck_assert_uint_eq(stats_of(seg).vars, 1);
  unsigned reaped = 9;
  ck_assert_int_eq(pdshm_reap(seg, &reaped), 0);
  ck_assert_uint_eq(reaped, 0);
  ck_assert_int_eq(pdshm_scope_release(local), 0);
  ck_assert_int_eq(pdshm_scope_release(root), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  ck_assert_int_eq(pdshm_unlink(name), PDSHM_ENOENT);
}
END_TEST

/* The thread remembers the attachment its last variable was in; a detach
 * ends that memory, so a variable of the detached segment is in no
 * attachment (its pointer is compared, never read), while a variable of
 * another attachment keeps working. */
START_TEST(variable_of_a_detached_attachment_is_einval) {
  const char *name_a = tu_name("gone_a"), *name_b = tu_name("gone_b");
  pdshm_seg *a = tu_create_as(name_a, 0, 0), *b = tu_create_as(name_b, 0, 0);
  pdshm_scope *root_a, *root_b;
  pdshm_var *va, *vb;
  int64_t dims[1] = {4};
  ck_assert_int_eq(pdshm_root(a, &root_a), 0);
  ck_assert_int_eq(pdshm_root(b, &root_b), 0);
  ck_assert_int_eq(pdshm_var_create(root_a, "a", &va), 0);
  ck_assert_int_eq(pdshm_var_create(root_b, "b", &vb), 0);
  ck_assert_int_eq(pdshm_var_lock(vb, 1), 0); /* b remembered, then a */
  ck_assert_int_eq(pdshm_var_unlock(vb), 0);
  ck_assert_int_eq(pdshm_var_lock(va, 1), 0);
  ck_assert_int_eq(pdshm_var_unlock(va), 0);
  ck_assert_int_eq(pdshm_scope_release(root_a), 0);
  ck_assert_int_eq(pdshm_detach(a), 0);
  ck_assert_int_eq(pdshm_var_lock(va, 1), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_var_unlock(va), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_tensor_resize(va, PDSHM_F32, 1, dims), PDSHM_EINVAL);
  ck_assert_ptr_null(pdshm_tensor_data(va));
  ck_assert_int_eq(pdshm_var_lock(vb, 0), 0);
  ck_assert_int_eq(pdshm_var_unlock(vb), 0);
  ck_assert_int_eq(pdshm_tensor_resize(vb, PDSHM_F32, 1, dims), 0);
  ck_assert_int_eq(pdshm_scope_release(root_b), 0);
  ck_assert_int_eq(pdshm_detach(b), 0);
  ck_assert_int_eq(pdshm_unlink(name_a), 0);
  ck_assert_int_eq(pdshm_unlink(name_b), 0);
}
END_TEST

START_TEST(null_arguments_are_einval) {
  const char *name = tu_name("nullout");
  tu_track(name);
  ck_assert_int_eq(pdshm_create(name, NULL, NULL), PDSHM_EINVAL);
  ck_assert(!exists(tu_path(name)));
  ck_assert_int_eq(pdshm_attach(name, NULL, NULL), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_detach(NULL), PDSHM_EINVAL);
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(NULL, &st), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_reap(NULL, NULL), PDSHM_EINVAL);
}
END_TEST

/* ---- names ---------------------------------------------------------------------- */

/* create, attach and unlink all refuse `name` with `want`, creating nothing. */
static void assert_name_refused(const char *name, int want) {
  pdshm_seg *s = (pdshm_seg *)1;
  pdshm_options o = {.size = PDSHM_SIZE_MIN, .max_procs = 4};
  ck_assert_msg(pdshm_create(name, &o, &s) == want, "create \"%s\"", name ? name : "(null)");
  ck_assert_ptr_null(s);
  ck_assert_msg(pdshm_last_error()[0] != '\0', "no detail for a bad name");
  s = (pdshm_seg *)1;
  ck_assert_msg(pdshm_attach(name, NULL, &s) == want, "attach \"%s\"", name ? name : "(null)");
  ck_assert_ptr_null(s);
  ck_assert_msg(pdshm_unlink(name) == want, "unlink \"%s\"", name ? name : "(null)");
}

START_TEST(bad_names_are_refused) {
  char base[64], buf[512];
  snprintf(base, sizeof base, "%s", tu_name("badname"));
  bool had_dot = exists("/dev/shm/pdshm."), had_dotdot = exists("/dev/shm/pdshm..");
  assert_name_refused(NULL, PDSHM_EINVAL);
  assert_name_refused("", PDSHM_EINVAL);
  assert_name_refused(".", PDSHM_EINVAL);
  assert_name_refused("..", PDSHM_EINVAL);
  const char *bad[] = {"/x", "/../x", " x", "\xc3\xa9", "\xff", "\tx", "*", "x\\y", ":x", "\nx"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(buf, sizeof buf, "%s%s", base, bad[i]);
    assert_name_refused(buf, PDSHM_EINVAL);
  }
  snprintf(buf, sizeof buf, "/%s", base); /* a leading slash too */
  assert_name_refused(buf, PDSHM_EINVAL);
  /* 201 bytes: ENAMETOOLONG; exactly 200: fine */
  memset(buf, 'a', sizeof buf);
  memcpy(buf, base, strlen(base));
  buf[PDSHM_SEG_NAME_MAX + 1] = '\0';
  assert_name_refused(buf, PDSHM_ENAMETOOLONG);
  buf[PDSHM_SEG_NAME_MAX] = '\0';
  pdshm_options o = {.size = PDSHM_SIZE_MIN, .max_procs = 4};
  pdshm_seg *s;
  tu_track(buf);
  ck_assert_int_eq(pdshm_create(buf, &o, &s), 0);
  ck_assert(exists(tu_path(buf)));
  ck_assert_int_eq(pdshm_detach(s), 0);
  ck_assert_int_eq(attach_rc(buf, 0), 0);
  ck_assert_int_eq(pdshm_unlink(buf), 0);
  /* nothing was left in /dev/shm by any refused name */
  ck_assert_int_eq(shm_entries_with(base), 0);
  ck_assert(had_dot || !exists("/dev/shm/pdshm."));
  ck_assert(had_dotdot || !exists("/dev/shm/pdshm.."));
}
END_TEST

START_TEST(every_allowed_character) {
  char name[128];
  snprintf(name, sizeof name, "%s.AZaz09_-.", tu_name("chars"));
  pdshm_options o = {.size = PDSHM_SIZE_MIN, .max_procs = 4};
  pdshm_seg *s;
  tu_track(name);
  ck_assert_int_eq(pdshm_create(name, &o, &s), 0);
  ck_assert(exists(tu_path(name)));
  ck_assert_int_eq(pdshm_detach(s), 0);
  ck_assert_int_eq(attach_rc(name, 0), 0);
}
END_TEST

/* ---- options -------------------------------------------------------------------- */

/* create with o fails with `want` and leaves no file. */
static void assert_create_refused(const pdshm_options *o, int want, const char *what) {
  const char *name = tu_name("opt");
  pdshm_seg *s = (pdshm_seg *)1;
  tu_track(name);
  int rc = pdshm_create(name, o, &s);
  ck_assert_msg(rc == want, "%s: create gave %s, want %s", what, pdshm_err_name(rc),
                pdshm_err_name(want));
  ck_assert_ptr_null(s);
  ck_assert_msg(!exists(tu_path(name)), "%s: a refused create left %s", what, tu_path(name));
}

/* What a segment made without a max_size grows to here: /dev/shm's size. */
static uint64_t dev_shm_size(void) {
  struct statvfs vfs;
  ck_assert_int_eq(statvfs("/dev/shm", &vfs), 0);
  uint64_t total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
  return (total > PDSHM_SIZE_MAX ? PDSHM_SIZE_MAX : total) / 4096 * 4096;
}

/* A segment made with no size starts small, at least PDSHM_SIZE_DEFAULT,
 * and grows up to what /dev/shm holds. */
static void assert_default_geometry(const char *name, pdshm_seg *s) {
  off_t size = stat_of(name).st_size;
  ck_assert_int_ge(size, PDSHM_SIZE_DEFAULT);
  ck_assert_int_le(size, 8 << 20);
  ck_assert_uint_eq(s->hdr->max_size, dev_shm_size() < (uint64_t)size ? (uint64_t)size
                                                                        : dev_shm_size());
  ck_assert_uint_eq(s->hdr->arena_end, (uint64_t)size);
  ck_assert_uint_ge(s->hdr->arena_end - s->hdr->arena_off, 1u << 20);
}

START_TEST(null_options_take_defaults) {
  const char *name = tu_name("defaults");
  pdshm_seg *s;
  tu_track(name);
  ck_assert_int_eq(pdshm_create(name, NULL, &s), 0);
  struct stat st = stat_of(name);
  assert_default_geometry(name, s);
  ck_assert_int_eq(st.st_mode & 07777, 0600);
  ck_assert_uint_eq(s->hdr->max_procs, PDSHM_PROCS_DEFAULT);
  ck_assert_uint_ge(s->hdr->max_locks, 1024);
  ck_assert_int_eq(pdshm_detach(s), 0);
  ck_assert_int_eq(pdshm_unlink(name), 0);
  /* an options struct of zeroes is the same as none */
  pdshm_options zero = {0};
  ck_assert_int_eq(pdshm_create(name, &zero, &s), 0);
  assert_default_geometry(name, s);
  ck_assert_uint_eq(s->hdr->max_procs, PDSHM_PROCS_DEFAULT);
  ck_assert_int_eq(pdshm_detach(s), 0);
}
END_TEST

/* Mounts a tmpfs of `mib` MiB over /dev/shm in a mount namespace of this
 * test's own process; false (and why, on stderr) where that is not allowed. */
static bool small_dev_shm(unsigned mib) {
  char opts[32];
  snprintf(opts, sizeof opts, "size=%um", mib);
  if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
      mount("tmpfs", "/dev/shm", "tmpfs", 0, opts) == 0)
    return true;
  fprintf(stderr, "a %u MiB /dev/shm cannot be mounted here (%s): not tested\n", mib,
          strerror(errno));
  return false;
}

/* In a 24 MiB /dev/shm, segments made without a size start small, several
 * fit, and each grows to what it needs until /dev/shm is full: then an
 * allocation's ENOSPC says so, and the segment is intact. */
START_TEST(default_size_fits_a_small_dev_shm) {
  if (!small_dev_shm(24)) return;
  pdshm_seg *s[3];
  const char *names[3];
  for (int i = 0; i < 3; i++) {
    names[i] = tu_name("small");
    ck_assert_int_eq(pdshm_create(names[i], NULL, &s[i]), 0);
    assert_default_geometry(names[i], s[i]);
    ck_assert_uint_eq(s[i]->hdr->max_size, 24u << 20);
  }
  pdshm_scope *root;
  pdshm_var *v;
  ck_assert_int_eq(pdshm_root(s[0], &root), 0);
  ck_assert_int_eq(pdshm_var_create(root, "t", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_U8, 1, (int64_t[]){6 << 20}), 0);
  memset(pdshm_tensor_data(v), 1, 6u << 20);
  ck_assert_int_gt(stat_of(names[0]).st_size, 6 << 20);
  off_t before = stat_of(names[0]).st_size;
  /* within max_size (24 MiB), beyond what /dev/shm has left */
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_U8, 1, (int64_t[]){9 << 20}), PDSHM_ENOSPC);
  ck_assert_msg(strstr(pdshm_last_error(), "--shm-size"), "\"%s\"", pdshm_last_error());
  ck_assert_int_eq(stat_of(names[0]).st_size, before);
  /* beyond max_size */
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_U8, 1, (int64_t[]){20 << 20}), PDSHM_ENOMEM);
  ck_assert_msg(strstr(pdshm_last_error(), "at most 24 MiB"), "\"%s\"", pdshm_last_error());
  ck_assert_int_eq(stat_of(names[0]).st_size, before);
  ck_assert_uint_eq(pdshm_tensor_nbytes(v), 6u << 20);
  ck_assert_int_eq(pdshm_check(s[0], stderr), 0);
  ck_assert_int_eq(pdshm_scope_release(root), 0);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(pdshm_detach(s[i]), 0);
}
END_TEST

START_TEST(full_dev_shm_says_how_big_and_how_to_raise) {
  if (!small_dev_shm(16)) return;
  pdshm_options o = {.size = 32u << 20};
  pdshm_seg *s;
  ck_assert_int_eq(pdshm_create(tu_name("full"), &o, &s), PDSHM_ENOSPC);
  const char *why = pdshm_last_error();
  ck_assert_msg(strstr(why, "cannot hold 32 MiB") && strstr(why, "16 MiB free of 16 MiB") &&
                    strstr(why, "--shm-size"),
                "ENOSPC detail: \"%s\"", why);
}
END_TEST

START_TEST(size_limits) {
  pdshm_options o = {.size = PDSHM_SIZE_MIN - 1, .max_procs = 4};
  assert_create_refused(&o, PDSHM_EINVAL, "size below PDSHM_SIZE_MIN");
  o.size = PDSHM_SIZE_MAX + 1;
  assert_create_refused(&o, PDSHM_EINVAL, "size above PDSHM_SIZE_MAX");
  o.size = SIZE_MAX;
  assert_create_refused(&o, PDSHM_EINVAL, "SIZE_MAX");
  /* the smallest size is accepted for a small geometry */
  o = (pdshm_options){.size = PDSHM_SIZE_MIN, .max_procs = 4, .max_locks = PDSHM_LOCKS_MIN};
  const char *name = tu_name("minsize");
  pdshm_seg *s = tu_create_opts(name, &o);
  ck_assert_int_eq(stat_of(name).st_size, (off_t)PDSHM_SIZE_MIN);
  ck_assert_int_eq(pdshm_detach(s), 0);
  /* max_size: not below the size, not above PDSHM_SIZE_MAX */
  o = (pdshm_options){.size = 4u << 20, .max_procs = 4, .max_size = 2u << 20};
  assert_create_refused(&o, PDSHM_EINVAL, "max_size below size");
  o.max_size = PDSHM_SIZE_MAX + 4096;
  assert_create_refused(&o, PDSHM_EINVAL, "max_size above PDSHM_SIZE_MAX");
  /* == size: fixed; above it: what was asked, rounded up as the size is */
  o.max_size = 4u << 20;
  s = tu_create_opts(name, &o);
  ck_assert_uint_eq(s->hdr->max_size, 4u << 20);
  ck_assert_int_eq(pdshm_detach(s), 0);
  o.max_size = (64u << 20) + 100;
  s = tu_create_opts(name, &o);
  ck_assert_uint_eq(s->hdr->max_size, (64u << 20) + 4096);
  ck_assert_int_eq(stat_of(name).st_size, 4 << 20);
  ck_assert_int_eq(pdshm_detach(s), 0);
  o.size = o.max_size = (4u << 20) + 1; /* equal, unaligned: still fixed */
  s = tu_create_opts(name, &o);
  ck_assert_uint_eq(s->hdr->max_size, s->hdr->size);
  ck_assert_int_eq(stat_of(name).st_size, (4 << 20) + 4096);
  ck_assert_int_eq(pdshm_detach(s), 0);
}
END_TEST

START_TEST(bigger_than_dev_shm_is_enospc) {
  struct statvfs vfs;
  ck_assert_int_eq(statvfs("/dev/shm", &vfs), 0);
  uint64_t total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
  uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
  /* Beyond the file system's total, so that tmpfs refuses at once instead of
   * filling the machine's memory first. */
  uint64_t want = (total + (64ull << 20)) & ~4095ull;
  if (vfs.f_blocks == 0 || want > PDSHM_SIZE_MAX) {
    fprintf(stderr, "bigger_than_dev_shm_is_enospc: /dev/shm has %llu bytes, not tested\n",
            (unsigned long long)total);
    return;
  }
  ck_assert_uint_gt(want, avail);
  pdshm_options o = {.size = want};
  assert_create_refused(&o, PDSHM_ENOSPC, "bigger than /dev/shm");
  ck_assert_msg(strstr(pdshm_last_error(), "/dev/shm") != NULL,
                "ENOSPC detail does not name /dev/shm: \"%s\"", pdshm_last_error());
}
END_TEST

START_TEST(max_procs_limit) {
  pdshm_options o = {.size = 64u << 20, .max_procs = PDSHM_PROCS_MAX + 1};
  assert_create_refused(&o, PDSHM_EINVAL, "max_procs above PDSHM_PROCS_MAX");
  o.max_procs = UINT32_MAX;
  assert_create_refused(&o, PDSHM_EINVAL, "max_procs UINT32_MAX");
}
END_TEST

START_TEST(size_too_small_for_procs) {
  pdshm_options o = {.size = PDSHM_SIZE_MIN, .max_procs = PDSHM_PROCS_MAX};
  assert_create_refused(&o, PDSHM_EINVAL, "1 MiB for 4096 slots");
  o = (pdshm_options){.size = PDSHM_SIZE_MIN, .max_locks = PDSHM_LOCKS_MAX};
  assert_create_refused(&o, PDSHM_EINVAL, "1 MiB for the largest lock table");
}
END_TEST

START_TEST(mode_beyond_0777_is_einval) {
  const unsigned modes[] = {01600, 02600, 04600, 010600, 0x80000000u};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    pdshm_options o = {.size = PDSHM_SIZE_MIN, .max_procs = 4, .mode = modes[i]};
    char what[32];
    snprintf(what, sizeof what, "mode %#o", modes[i]);
    assert_create_refused(&o, PDSHM_EINVAL, what);
  }
}
END_TEST

START_TEST(mode_applied_despite_umask) {
  umask(077);
  const char *name = tu_name("mode");
  pdshm_options o = {.size = PDSHM_SIZE_MIN, .max_procs = 4, .mode = 0640};
  pdshm_seg *s = tu_create_opts(name, &o);
  ck_assert_int_eq(stat_of(name).st_mode & 07777, 0640);
  ck_assert_int_eq(pdshm_detach(s), 0);
  ck_assert_int_eq(attach_rc(name, 0), 0); /* readable by the group is fine */
  const char *name2 = tu_name("mode");
  o.mode = 0604;
  ck_assert_int_eq(pdshm_detach(tu_create_opts(name2, &o)), 0);
  ck_assert_int_eq(stat_of(name2).st_mode & 07777, 0604);
  umask(022);
}
END_TEST

START_TEST(max_locks_limits) {
  pdshm_options o = {.size = 8u << 20, .max_procs = 4, .max_locks = PDSHM_LOCKS_MIN - 1};
  assert_create_refused(&o, PDSHM_EINVAL, "max_locks below PDSHM_LOCKS_MIN");
  o.max_locks = 1;
  assert_create_refused(&o, PDSHM_EINVAL, "max_locks 1");
  o.max_locks = PDSHM_LOCKS_MAX + 1;
  assert_create_refused(&o, PDSHM_EINVAL, "max_locks above PDSHM_LOCKS_MAX");
  o.max_locks = PDSHM_LOCKS_MIN;
  pdshm_seg *s = tu_create_opts(tu_name("locks"), &o);
  ck_assert_uint_eq(s->hdr->max_locks, PDSHM_LOCKS_MIN);
  ck_assert_int_eq(pdshm_detach(s), 0);
}
END_TEST

START_TEST(unknown_create_flag_is_einval) {
  pdshm_options o = {.size = PDSHM_SIZE_MIN, .max_procs = 4, .flags = 0x100};
  assert_create_refused(&o, PDSHM_EINVAL, "flag 0x100 on create");
  o.flags = 0x80000000u;
  assert_create_refused(&o, PDSHM_EINVAL, "flag 0x80000000 on create");
  o.flags = PDSHM_RDONLY; /* an attach flag */
  assert_create_refused(&o, PDSHM_EINVAL, "PDSHM_RDONLY on create");
}
END_TEST

START_TEST(unknown_attach_flag_is_einval) {
  const char *name = made_and_detached("aflag", 0);
  ck_assert_int_eq(attach_rc(name, 0x4), PDSHM_EINVAL);
  ck_assert_int_eq(attach_rc(name, 0x80000000u), PDSHM_EINVAL);
  ck_assert_int_eq(attach_rc(name, PDSHM_RDONLY | 0x100), PDSHM_EINVAL);
  ck_assert_int_eq(attach_rc(name, PDSHM_RDONLY | PDSHM_SHARED_USERS), 0);
  ck_assert_int_eq(attach_rc(name, 0), 0);
}
END_TEST


/* ---- read-only attachments ------------------------------------------------------- */

START_TEST(read_only_attach_claims_no_slot) {
  const char *name = tu_name("rdonly");
  pdshm_seg *w = tu_create_as(name, 0, 0);
  pdshm_stats before = stats_of(w);
  ck_assert_uint_eq(before.procs_alive, 1);
  pdshm_options o = {.flags = PDSHM_RDONLY};
  pdshm_seg *r;
  ck_assert_int_eq(pdshm_attach(name, &o, &r), 0);
  ck_assert_uint_eq(r->slot, PDSHM_NOSLOT);
  pdshm_stats ws = stats_of(w), rs = stats_of(r);
  ck_assert_uint_eq(ws.procs_alive, 1);
  ck_assert_uint_eq(rs.procs_alive, 1);
  ck_assert_uint_eq(rs.procs_dead, 0);
  ck_assert_uint_eq(rs.size, ws.size);
  ck_assert_uint_eq(rs.used, ws.used);
  unsigned reaped = 7;
  ck_assert_int_eq(pdshm_reap(r, &reaped), PDSHM_EROFS);
  ck_assert_uint_eq(reaped, 0);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(r, &root), PDSHM_EROFS);
  ck_assert_int_eq(pdshm_detach(r), 0);
  ck_assert_uint_eq(stats_of(w).procs_alive, 1);
  /* nothing in the slot table changed: every other slot is FREE */
  for (uint32_t i = 0; i < w->hdr->max_procs; i++)
    if (i != w->slot) ck_assert_uint_eq(atomic_load(&pdshm__slot(w, i)->state), PDSHM_SLOT_FREE);
  ck_assert_int_eq(pdshm_detach(w), 0);
}
END_TEST

/* ---- error codes ------------------------------------------------------------------ */

START_TEST(every_code_has_a_name_and_message) {
  int n = 0;
#define CHECK_CODE(name, value, msg)                                                    \
  ck_assert_str_eq(pdshm_strerror(value), msg);                                         \
  ck_assert_str_eq(pdshm_err_name(value), "PDSHM_" #name);                              \
  ck_assert_str_ne(pdshm_strerror(value), "unknown error");                             \
  ck_assert_int_lt(value, 0);                                                           \
  n++;
  PDSHM_ERRNO_MAP(CHECK_CODE)
#undef CHECK_CODE
  ck_assert_int_ge(n, 20);
  const int unknown[] = {1, 42, -4095, -9999, -10000, -20000, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    ck_assert_str_eq(pdshm_strerror(unknown[i]), "unknown error");
    ck_assert_str_eq(pdshm_err_name(unknown[i]), "PDSHM_E?");
  }
  ck_assert_ptr_nonnull(pdshm_strerror(0));
  ck_assert_str_eq(pdshm_err_name(0), "PDSHM_OK");
}
END_TEST

START_TEST(codes_are_negative_errno) {
  ck_assert_int_eq(PDSHM_ENOENT, -ENOENT);
  ck_assert_int_eq(PDSHM_EEXIST, -EEXIST);
  ck_assert_int_eq(PDSHM_ENOMEM, -ENOMEM);
  ck_assert_int_eq(PDSHM_EINVAL, -EINVAL);
  ck_assert_int_eq(PDSHM_ENAMETOOLONG, -ENAMETOOLONG);
  ck_assert_int_eq(PDSHM_ESTALE, -ESTALE);
  ck_assert_int_eq(PDSHM_EACCES, -EACCES);
  ck_assert_int_eq(PDSHM_EBUSY, -EBUSY);
  ck_assert_int_eq(PDSHM_ENOSPC, -ENOSPC);
  ck_assert_int_eq(PDSHM_EROFS, -EROFS);
  ck_assert_int_eq(PDSHM_EUSERS, -EUSERS);
  ck_assert_int_eq(PDSHM_ENOLCK, -ENOLCK);
  ck_assert_int_eq(PDSHM_EDEADLK, -EDEADLK);
  ck_assert_int_eq(PDSHM_EPERM, -EPERM);
  ck_assert_int_eq(PDSHM_ENOTRECOVERABLE, -ENOTRECOVERABLE);
  ck_assert_int_eq(PDSHM_EOVERFLOW, -EOVERFLOW);
  /* pdshm's own codes collide with no errno */
  ck_assert_int_lt(PDSHM_EBADSEG, -4095);
  ck_assert_int_lt(PDSHM_ETYPE, -4095);
  ck_assert_int_lt(PDSHM_EFORKED, -4095);
  /* all distinct */
  const int codes[] = {
#define LIST_CODE(name, value, msg) value,
      PDSHM_ERRNO_MAP(LIST_CODE)
#undef LIST_CODE
  };
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
    for (size_t j = i + 1; j < sizeof codes / sizeof codes[0]; j++)
      ck_assert_int_ne(codes[i], codes[j]);
}
END_TEST

/* ---- fork() ---------------------------------------------------------------------- */

/* In a fork child: the inherited handle answers EFORKED and touches nothing;
 * a fresh attachment works. */
static int forked_child(void *arg) {
  (void)arg;
  pdshm_stats st;
  unsigned reaped = 5;
  pdshm_scope *root;
  if (pdshm_seg_stats(g_seg, &st) != PDSHM_EFORKED) return 10;
  if (pdshm_reap(g_seg, &reaped) != PDSHM_EFORKED || reaped != 0) return 11;
  if (pdshm_root(g_seg, &root) != PDSHM_EFORKED) return 12;
  pdshm_seg *mine;
  if (pdshm_attach(g_name, NULL, &mine)) return 13;
  if (mine->slot == g_seg->slot) return 14;
  pdshm_var *v;
  if (pdshm_root(mine, &root) || pdshm_var_create(root, "from-child", &v)) return 15;
  if (pdshm_scope_release(root)) return 16;
  if (pdshm_seg_stats(mine, &st) || st.procs_alive != 2 || st.procs_dead != 0) return 17;
  if (pdshm_detach(g_seg) != PDSHM_EFORKED) return 18;
  if (pdshm_seg_stats(mine, &st) || st.procs_alive != 2) return 19;
  return pdshm_detach(mine) ? 20 : 0;
}

START_TEST(fork_child_gets_eforked) {
  snprintf(g_name, sizeof g_name, "%s", tu_name("fork"));
  g_seg = tu_create_as(g_name, 0, 0);
  struct pdshm_slot *mine = pdshm__slot(g_seg, g_seg->slot), before = {0};
  before.pid = mine->pid;
  before.attach_ns = mine->attach_ns;
  uint64_t epoch = atomic_load(&mine->epoch);
  ck_assert_int_eq(tu_wait(tu_spawn(forked_child, NULL)), 0);
  /* our slot: untouched, still ours, still live */
  ck_assert_uint_eq(atomic_load(&mine->state), PDSHM_SLOT_LIVE);
  ck_assert_uint_eq(mine->pid, before.pid);
  ck_assert_uint_eq(mine->attach_ns, before.attach_ns);
  ck_assert_uint_eq(atomic_load(&mine->epoch), epoch);
  pdshm_stats st = stats_of(g_seg);
  ck_assert_uint_eq(st.procs_alive, 1);
  ck_assert_uint_eq(st.procs_dead, 0);
  /* seen from a third attachment: our slot is held by a live attachment */
  pdshm_seg *third = tu_attach(g_name);
  ck_assert_int_eq(pdshm__slot_alive(third, g_seg->slot), 1);
  st = stats_of(third);
  ck_assert_uint_eq(st.procs_alive, 2);
  ck_assert_uint_eq(st.procs_dead, 0);
  unsigned reaped = 9;
  ck_assert_int_eq(pdshm_reap(third, &reaped), 0);
  ck_assert_uint_eq(reaped, 0);
  ck_assert_int_eq(pdshm_detach(third), 0);
  /* the child's fresh attachment really worked */
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(g_seg, &root), 0);
  ck_assert_ptr_nonnull(pdshm_find_var(root, "from-child"));
  ck_assert_int_eq(pdshm_scope_release(root), 0);
  ck_assert_int_eq(pdshm_check(g_seg, stderr), 0);
  ck_assert_int_eq(pdshm_detach(g_seg), 0);
}
END_TEST

struct killed_parent {
  int to_test[2]; /* middle -> test: its slot and the grandchild's pid  */
  int g_ready[2]; /* grandchild -> test: it runs                         */
  int hold[2];    /* the test keeps the write end: the grandchild's leash */
};

/* The grandchild: lives on, holding nothing, until the test lets go. */
static int grandchild(struct killed_parent *kp) {
  char c = 'g';
  if (write(kp->g_ready[1], &c, 1) != 1) return 1;
  while (read(kp->hold[0], &c, 1) > 0) continue;
  return 0;
}

/* The middle process: attaches, forks the grandchild, waits to be killed. */
static int middle(void *arg) {
  struct killed_parent *kp = arg;
  close(kp->hold[1]);
  pdshm_seg *s;
  if (pdshm_attach(g_name, NULL, &s)) return 1;
  fflush(NULL);
  pid_t g = fork();
  if (g < 0) return 2;
  if (g == 0) _exit(grandchild(kp));
  uint64_t msg[2] = {s->slot, (uint64_t)g};
  if (write(kp->to_test[1], msg, sizeof msg) != sizeof msg) return 3;
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

START_TEST(parent_killed_child_lives_on) {
  snprintf(g_name, sizeof g_name, "%s", tu_name("orphan"));
  g_seg = tu_create_as(g_name, 0, 0);
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0); /* to wait for the orphan */
  struct killed_parent kp;
  ck_assert_int_eq(pipe(kp.to_test), 0);
  ck_assert_int_eq(pipe(kp.hold), 0);
  ck_assert_int_eq(pipe(kp.g_ready), 0);
  pid_t mid = tu_spawn(middle, &kp);
  close(kp.hold[0]);
  close(kp.to_test[1]); /* so that a helper's early death reads as EOF */
  close(kp.g_ready[1]);
  uint64_t msg[2];
  char c;
  read_full(kp.to_test[0], msg, sizeof msg);
  read_full(kp.g_ready[0], &c, 1);
  uint32_t slot = (uint32_t)msg[0];
  pid_t g = (pid_t)msg[1];
  ck_assert_uint_eq(stats_of(g_seg).procs_alive, 2);
  ck_assert_int_eq(kill(mid, SIGKILL), 0);
  ck_assert_int_eq(tu_wait(mid), 128 + SIGKILL);
  ck_assert_int_eq(kill(g, 0), 0); /* the grandchild lives on */
  /* The kernel drops the OFD lock when the last reference to the open file
   * description goes, which may trail waitpid() a little (a /proc reader
   * holding the dead process's mm); a grandchild that kept it would keep it
   * for good. */
  for (uint64_t end = tu_now_ns() + 5000000000ull;
       pdshm__slot_alive(g_seg, slot) > 0 && tu_now_ns() < end;)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  /* ... and did not keep the middle process's slot alive */
  pdshm_stats st = stats_of(g_seg);
  ck_assert_uint_eq(st.procs_alive, 1);
  ck_assert_uint_eq(st.procs_dead, 1);
  ck_assert_int_eq(pdshm__slot_alive(g_seg, slot), 0);
  unsigned reaped = 0;
  ck_assert_int_eq(pdshm_reap(g_seg, &reaped), 0);
  ck_assert_uint_eq(reaped, 1);
  ck_assert_uint_eq(atomic_load(&pdshm__slot(g_seg, slot)->state), PDSHM_SLOT_FREE);
  ck_assert_int_eq(kill(g, 0), 0);
  close(kp.hold[1]);
  ck_assert_int_eq(tu_wait(g), 0);
  st = stats_of(g_seg);
  ck_assert_uint_eq(st.procs_alive, 1);
  ck_assert_uint_eq(st.procs_dead, 0);
  ck_assert_int_eq(pdshm_detach(g_seg), 0);
}
END_TEST

/* ---- many processes at once ------------------------------------------------------- */

#define NATTACH 8

struct barrier {
  int go[2], ready[2], release[2];
};

static int concurrent_attacher(void *arg) {
  struct barrier *b = arg;
  char c;
  close(b->go[1]);
  close(b->release[1]);
  while (read(b->go[0], &c, 1) > 0) continue; /* EOF: everybody go */
  pdshm_seg *s;
  int rc = pdshm_attach(g_name, NULL, &s);
  int8_t r = (int8_t)(rc ? 1 : 0);
  if (write(b->ready[1], &r, 1) != 1) return 2;
  if (rc) return 1;
  while (read(b->release[0], &c, 1) > 0) continue;
  return pdshm_detach(s) ? 3 : 0;
}

START_TEST(eight_attach_at_once) {
  snprintf(g_name, sizeof g_name, "%s", tu_name("crowd"));
  g_seg = tu_create_as(g_name, 0, 0);
  struct barrier b;
  ck_assert_int_eq(pipe(b.go), 0);
  ck_assert_int_eq(pipe(b.ready), 0);
  ck_assert_int_eq(pipe(b.release), 0);
  pid_t pids[NATTACH];
  for (int i = 0; i < NATTACH; i++) pids[i] = tu_spawn(concurrent_attacher, &b);
  close(b.go[1]); /* go */
  for (int i = 0; i < NATTACH; i++) {
    int8_t r;
    read_full(b.ready[0], &r, 1);
    ck_assert_int_eq(r, 0);
  }
  pdshm_stats st = stats_of(g_seg);
  ck_assert_uint_eq(st.procs_alive, NATTACH + 1);
  ck_assert_uint_eq(st.procs_dead, 0);
  /* every attachment has a slot of its own */
  unsigned live = 0;
  for (uint32_t i = 0; i < g_seg->hdr->max_procs; i++)
    live += atomic_load(&pdshm__slot(g_seg, i)->state) == PDSHM_SLOT_LIVE;
  ck_assert_uint_eq(live, NATTACH + 1);
  close(b.release[1]);
  for (int i = 0; i < NATTACH; i++) ck_assert_int_eq(tu_wait(pids[i]), 0);
  st = stats_of(g_seg);
  ck_assert_uint_eq(st.procs_alive, 1);
  ck_assert_uint_eq(st.procs_dead, 0);
  ck_assert_int_eq(pdshm_detach(g_seg), 0);
}
END_TEST

/* A child attaches in a loop while the test creates and unlinks the segment
 * over and over: every attach is a success or ENOENT, never EBADSEG (a
 * creator in progress is waited for) and never a crash. */
#define RACE_ROUNDS 300
#define RACERS 2

struct race {
  _Atomic int stop;
  _Atomic unsigned ok, enoent, bad;
  int bad_rc;
  char bad_detail[256];
};

static int racer(void *arg) {
  struct race *r = arg;
  while (!atomic_load(&r->stop)) {
    pdshm_seg *s;
    int rc = pdshm_attach(g_name, NULL, &s);
    if (rc == 0) {
      atomic_fetch_add(&r->ok, 1);
      if (pdshm_detach(s)) return 2;
    } else if (rc == PDSHM_ENOENT) {
      atomic_fetch_add(&r->enoent, 1);
    } else if (atomic_fetch_add(&r->bad, 1) == 0) {
      r->bad_rc = rc;
      snprintf(r->bad_detail, sizeof r->bad_detail, "%s", pdshm_last_error());
    }
  }
  return 0;
}

START_TEST(create_races_attach) {
  snprintf(g_name, sizeof g_name, "%s", tu_name("race"));
  tu_track(g_name);
  struct race *r = tu_shared(sizeof *r);
  pid_t pids[RACERS];
  for (int i = 0; i < RACERS; i++) pids[i] = tu_spawn(racer, r);
  pdshm_options o = {.size = 4u << 20, .max_procs = 16};
  for (int round = 0; round < RACE_ROUNDS; round++) {
    pdshm_seg *s;
    int rc = pdshm_create(g_name, &o, &s);
    ck_assert_msg(rc == 0, "round %d: create: %s (%s)", round, pdshm_err_name(rc),
                  pdshm_last_error());
    ck_assert_int_eq(pdshm_detach(s), 0);
    ck_assert_int_eq(pdshm_unlink(g_name), 0);
  }
  atomic_store(&r->stop, 1);
  for (int i = 0; i < RACERS; i++) ck_assert_int_eq(tu_wait(pids[i]), 0);
  fprintf(stderr, "create_races_attach: %u attached, %u ENOENT, %u other\n", r->ok, r->enoent,
          r->bad);
  ck_assert_msg(r->bad == 0, "%u attaches racing a create failed, first with %s (%s)", r->bad,
                pdshm_err_name(r->bad_rc), r->bad_detail);
  ck_assert_uint_gt(r->ok + r->enoent, 0);
  munmap(r, sizeof *r);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------ */

static Suite *seg_suite(void) {
  Suite *s = suite_create("segments");
  TCase *tc = tu_tcase(s, "lifecycle", 10, setup, teardown);
  tcase_add_test(tc, create_twice_is_eexist);
  tcase_add_test(tc, attach_missing_is_enoent);
  tcase_add_test(tc, unlink_missing_is_enoent);
  tcase_add_test(tc, unlinked_segment_keeps_working);
  tcase_add_test(tc, variable_of_a_detached_attachment_is_einval);
  tcase_add_test(tc, null_arguments_are_einval);
  tc = tu_tcase(s, "names", 10, setup, teardown);
  tcase_add_test(tc, bad_names_are_refused);
  tcase_add_test(tc, every_allowed_character);
  tc = tu_tcase(s, "options", 10, setup, teardown);
  tcase_add_test(tc, null_options_take_defaults);
  tcase_add_test(tc, default_size_fits_a_small_dev_shm);
  tcase_add_test(tc, full_dev_shm_says_how_big_and_how_to_raise);
  tcase_add_test(tc, size_limits);
  tcase_add_test(tc, bigger_than_dev_shm_is_enospc);
  tcase_add_test(tc, max_procs_limit);
  tcase_add_test(tc, size_too_small_for_procs);
  tcase_add_test(tc, mode_beyond_0777_is_einval);
  tcase_add_test(tc, mode_applied_despite_umask);
  tcase_add_test(tc, max_locks_limits);
  tcase_add_test(tc, unknown_create_flag_is_einval);
  tcase_add_test(tc, unknown_attach_flag_is_einval);
  tc = tu_tcase(s, "read-only", 10, setup, teardown);
  tcase_add_test(tc, read_only_attach_claims_no_slot);
  tc = tu_tcase(s, "errors", 10, setup, teardown);
  tcase_add_test(tc, every_code_has_a_name_and_message);
  tcase_add_test(tc, codes_are_negative_errno);
  tc = tu_tcase(s, "fork", 15, setup, teardown);
  tcase_add_test(tc, fork_child_gets_eforked);
  tcase_add_test(tc, parent_killed_child_lives_on);
  tc = tu_tcase(s, "many processes", 30, setup, teardown);
  tcase_add_test(tc, eight_attach_at_once);
  tcase_add_test(tc, create_races_attach);
  return s;
}

int main(void) { return tu_run(seg_suite()) ? 1 : 0; }
