/*
 * attach_inherit.c - what a fork child keeps of an attachment its parent made.
 *
 * The parent's mapping is MADV_DONTFORK and its descriptor is closed in the
 * child: either would share the parent's open file description, whose OFD
 * lock on the parent's slot says the parent lives (segment.c, invariant 4).  Yet
 * memory the parent handed out before the fork (a tensor's bytes under a
 * Python view) should stay valid in the child.  So the child maps the same
 * file again, at the same address, through an open file description of its
 * own, which holds no lock.
 *
 * Invariants:
 *  1. After pdshm__seg_inherit, seg->fd is -1 or a descriptor of the child's
 *     own open file description of the segment's file (same st_dev and
 *     st_ino as at attach), never one shared with the parent.
 *  2. seg->mapped says whether [base, base + size) maps that file here.  When
 *     no descriptor of the same file could be had, or the range could not be
 *     mapped at the same address, it stays unmapped, as the parent's mapping
 *     left it.
 *  3. The new mapping is MADV_DONTFORK as well and the new descriptor stays
 *     open, so that a grandchild inherits the child's handle the same way.
 *  4. Nothing here touches the segment's contents: the handle answers
 *     PDSHM_EFORKED to every call (its forkgen is the parent's).
 */
#define PDSHM_LAYER 1 /* attach/ (lib/LAYERS) */
#include "config.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach/attach.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000 /* Linux 4.17; older kernels take it as a hint */
#endif

static bool inherit_same_file(int fd, const pdshm_seg *seg) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_dev == seg->dev &&
         (uint64_t)st.st_ino == seg->ino && (uint64_t)st.st_size >= atomic_load(&seg->end);
}

/* "/proc/self/fd/<fd>", without stdio (we run in an atfork handler). */
static void inherit_fd_path(int fd, char *path, size_t cap) {
  static const char prefix[] = "/proc/self/fd/";
  char digits[16];
  int n = 0;
  do digits[n++] = (char)('0' + fd % 10);
  while ((fd /= 10) && n < (int)sizeof digits);
  size_t at = sizeof prefix - 1;
  memcpy(path, prefix, at);
  while (n && at + 1 < cap) path[at++] = digits[--n];
  path[at] = '\0';
}

/* A new open file description of the segment's file, or -1.  Through the
 * inherited descriptor first (that works after the name was unlinked), then
 * through the name, if it still names the same file. */
static int inherit_reopen(const pdshm_seg *seg) {
  int acc = (seg->flags & PDSHM_RDONLY ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK;
  char path[PDSHM_SEG_NAME_MAX + 32];
  if (seg->fd >= 0) {
    inherit_fd_path(seg->fd, path, sizeof path);
    int fd = open(path, acc);
    if (fd >= 0 && inherit_same_file(fd, seg)) return fd;
    if (fd >= 0) close(fd);
  }
  memcpy(path, "/pdshm.", 7);
  memcpy(path + 7, seg->name, strlen(seg->name) + 1);
  int fd = shm_open(path, acc, 0);
  if (fd >= 0 && inherit_same_file(fd, seg)) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

static bool inherit_map(pdshm_seg *seg, int fd) {
  int prot = seg->flags & PDSHM_RDONLY ? PROT_READ : PROT_READ | PROT_WRITE;
  void *p = mmap(seg->base, seg->size, prot, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
  if (p == MAP_FAILED) return false;
  if (p != seg->base || madvise(p, seg->size, MADV_DONTFORK) < 0) {
    munmap(p, seg->size);
    return false;
  }
  return true;
}

void pdshm__seg_inherit(pdshm_seg *seg) {
  int fd = seg->mapped ? inherit_reopen(seg) : -1;
  if (seg->fd >= 0) close(seg->fd);
  seg->fd = fd;
  seg->mapped = fd >= 0 && inherit_map(seg, fd);
}
