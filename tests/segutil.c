/* segutil.c - helpers of the segment suites (test_seg, test_hostile). */
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

char g_name[PDSHM_SEG_NAME_MAX + 1];
pdshm_seg *g_seg;

/* ---- helpers ------------------------------------------------------------------- */

bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

struct stat stat_of(const char *name) {
  struct stat st;
  ck_assert_msg(stat(tu_path(name), &st) == 0, "stat %s: %s", tu_path(name), strerror(errno));
  return st;
}

/* Every entry of /dev/shm whose name starts with "pdshm.<prefix>". */
int shm_entries_with(const char *prefix) {
  char want[PDSHM_SEG_NAME_MAX + 16];
  snprintf(want, sizeof want, "pdshm.%s", prefix);
  DIR *d = opendir("/dev/shm");
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (!strncmp(e->d_name, want, strlen(want))) n++;
  closedir(d);
  return n;
}

pdshm_stats stats_of(pdshm_seg *seg) {
  pdshm_stats st;
  int rc = pdshm_seg_stats(seg, &st);
  ck_assert_msg(rc == 0, "stats: %s", pdshm_strerror(rc));
  return st;
}

int attach_rc(const char *name, unsigned flags) {
  pdshm_options o = {.flags = flags};
  pdshm_seg *s = (pdshm_seg *)1;
  int rc = pdshm_attach(name, &o, &s);
  if (rc == 0) {
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(pdshm_detach(s), 0);
  } else {
    ck_assert_ptr_null(s); /* a failure leaves *out NULL */
  }
  return rc;
}

/* A segment made and detached, so that its file can be tampered with. */
const char *made_and_detached(const char *tag, size_t size) {
  static char name[PDSHM_SEG_NAME_MAX + 1];
  snprintf(name, sizeof name, "%s", tu_name(tag));
  ck_assert_int_eq(pdshm_detach(tu_create_as(name, size, 0)), 0);
  return name;
}

void read_hdr(const char *name, struct pdshm_hdr *h) {
  int fd = open(tu_path(name), O_RDONLY);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pread(fd, h, sizeof *h, 0), (ssize_t)sizeof *h);
  close(fd);
}

void write_at(const char *name, off_t at, const void *p, size_t n) {
  int fd = open(tu_path(name), O_RDWR);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, p, n, at), (ssize_t)n);
  close(fd);
}

void resize_file(const char *name, off_t size) {
  int fd = open(tu_path(name), O_RDWR);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, size), 0);
  close(fd);
}

/* Attaching `name` gives EBADSEG and says which check failed. */
void assert_badseg(const char *name, const char *what) {
  int rc = attach_rc(name, 0);
  ck_assert_msg(rc == PDSHM_EBADSEG, "%s: attach gave %s, want PDSHM_EBADSEG", what,
                pdshm_err_name(rc));
  ck_assert_msg(pdshm_last_error()[0] != '\0', "%s: EBADSEG without a detail", what);
}

void setup(void) {}
void teardown(void) { tu_cleanup(); }
