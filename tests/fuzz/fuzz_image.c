/*
 * fuzz_image.c - the fuzz targets' inputs as segment files (fuzz_image.h).
 */
#include <fcntl.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_image.h"
#include "lifecycle/lifecycle.h"

#define FUZZ_REC_HDR 6u
/* A segment grows up to its max_size, and the targets' writes make it grow:
 * an input's max_size is held to this, so that no input takes more of
 * /dev/shm (a test machine's may be 64 MiB in all) or of the address space.
 * Values below it, valid or not, reach attach's checks unchanged. */
#define FUZZ_GROW_MAX (4ull * FUZZ_IMAGE_MAX)

static alignas(PDSHM_CACHELINE) uint8_t fuzz_img[FUZZ_IMAGE_MAX];

static char fuzz_name[64];
static char fuzz_path[128];
static int fuzz_fd = -1;

static void fuzz_cleanup(void) { pdshm_unlink(fuzz_name); }

static void fuzz_open(void) {
  snprintf(fuzz_name, sizeof fuzz_name, "fuzz-%d", (int)getpid());
  snprintf(fuzz_path, sizeof fuzz_path, "/dev/shm/pdshm.%s", fuzz_name);
  fuzz_fd = open(fuzz_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fuzz_fd < 0) {
    perror(fuzz_path);
    abort();
  }
  atexit(fuzz_cleanup);
}

/* Lays the records over fuzz_img; returns how far they reach. */
static uint64_t fuzz_records(const uint8_t *data, size_t n) {
  uint64_t hi = 0;
  for (size_t at = 0; at + FUZZ_REC_HDR <= n;) {
    uint32_t off = (uint32_t)data[at] | (uint32_t)data[at + 1] << 8 |
                   (uint32_t)data[at + 2] << 16 | (uint32_t)data[at + 3] << 24;
    size_t len = (size_t)data[at + 4] | (size_t)data[at + 5] << 8;
    at += FUZZ_REC_HDR;
    if (len > n - at) len = n - at;
    if (off < FUZZ_IMAGE_MAX) {
      size_t fit = len < FUZZ_IMAGE_MAX - off ? len : FUZZ_IMAGE_MAX - off;
      memcpy(fuzz_img + off, data + at, fit);
      if (off + fit > hi) hi = off + fit;
    }
    at += len;
  }
  return hi;
}

static uint64_t fuzz_image_size(uint64_t hi) {
  uint64_t own = (hi + PDSHM_REGION_ALIGN - 1) / PDSHM_REGION_ALIGN * PDSHM_REGION_ALIGN, said;
  if (own == 0) own = PDSHM_REGION_ALIGN;
  memcpy(&said, fuzz_img + offsetof(struct pdshm_hdr, size), sizeof said);
  if (said == 0 || said % PDSHM_REGION_ALIGN || said > FUZZ_IMAGE_MAX) return own;
  return said;
}

const char *fuzz_image_put(const uint8_t *data, size_t n, fuzz_image_fix fix) {
  if (fuzz_fd < 0) fuzz_open();
  uint64_t hi = fuzz_records(data, n), size = fuzz_image_size(hi);
  struct pdshm_hdr *h = (struct pdshm_hdr *)fuzz_img;
  h->layout_version = PDSHM_LAYOUT_VERSION;
  h->fingerprint = pdshm__layout_fingerprint();
  if (!h->max_size) h->max_size = size; /* inputs older than growth: a fixed segment */
  else if (h->max_size > FUZZ_GROW_MAX) h->max_size = FUZZ_GROW_MAX;
  if (hi < sizeof *h) hi = sizeof *h; /* the version and fingerprint zeroed again below */
  if (fix) {
    uint64_t reach = fix(fuzz_img, size);
    if (reach > hi) hi = reach;
  }
  size_t put = hi < size ? hi : size;
  int bad = ftruncate(fuzz_fd, 0) || ftruncate(fuzz_fd, (off_t)size) ||
            pwrite(fuzz_fd, fuzz_img, put, 0) != (ssize_t)put;
  memset(fuzz_img, 0, hi); /* zeros again for the next input */
  if (bad) {
    perror(fuzz_path);
    abort();
  }
  return fuzz_name;
}
