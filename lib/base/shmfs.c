/*
 * shmfs.c - the shared-memory file system under the segments (/dev/shm on
 * Linux): how big it is, how much is free, the most a segment grows to by
 * default, and the one way every part of pdshm says that it is full.
 *
 * Containers commonly give /dev/shm 64 MiB (Docker's default), so a full
 * /dev/shm is a normal condition: the message always names its size, what is
 * free, and the flag that raises it.
 */
#define PDSHM_LAYER 1 /* base/ (lib/LAYERS) */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/statvfs.h>

#include "base/base.h"

#define SHMFS_DIR "/dev/shm"
#define MIB(b) ((unsigned long long)((b) >> 20))

/* Fills *total and *avail (bytes) for the file system of fd, or of /dev/shm
 * when fd < 0.  -errno when it cannot be asked. */
int pdshm__shmfs_space(int fd, uint64_t *total, uint64_t *avail) {
  struct statvfs vfs;
  if ((fd >= 0 ? fstatvfs(fd, &vfs) : statvfs(SHMFS_DIR, &vfs)) < 0) return -errno;
  *total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
  *avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
  return 0;
}

int pdshm__shmfs_full(int fd, uint64_t wanted) {
  uint64_t total = 0, avail = 0;
  if (pdshm__shmfs_space(fd, &total, &avail))
    return pdshm__fail(PDSHM_ENOSPC, "%s cannot hold %llu MiB more (its size is unknown); "
                       "in a container, raise it with --shm-size",
                       SHMFS_DIR, MIB(wanted + (1u << 20) - 1));
  return pdshm__fail(PDSHM_ENOSPC,
                     "%s cannot hold %llu MiB more: it has %llu MiB free of %llu MiB; "
                     "in a container, raise it with --shm-size (e.g. docker run --shm-size=1g)",
                     SHMFS_DIR, MIB(wanted + (1u << 20) - 1), MIB(avail), MIB(total));
}

/* What a segment grows to when no max_size is given: the size of the file
 * system (what it has free changes; a growth that finds it full says so),
 * PDSHM_SIZE_MAX when it cannot be asked. */
uint64_t pdshm__shmfs_max_size(void) {
  uint64_t total = 0, avail = 0;
  if (pdshm__shmfs_space(-1, &total, &avail) || total > PDSHM_SIZE_MAX) return PDSHM_SIZE_MAX;
  return total;
}
