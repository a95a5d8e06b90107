/*
 * fuzz_inspect.c - segment images through the inspector's read path.
 *
 * An input is a sparse segment image: records of a 4-byte offset, a 2-byte
 * length (both little-endian) and that many bytes, laid over zeros (a real
 * segment is mostly zeros: its images are a fifth of its size this way).  The
 * image is as long as its header's size field says when that is a multiple of
 * the region alignment up to FUZZ_IMAGE_MAX, else as long as its records
 * reach (attach then refuses it).  It becomes a real segment file, is
 * attached read-only, and every introspection call and every view of
 * pdshm-attach runs over it.  Anything but a crash, a hang or a sanitizer
 * report is a pass.
 *
 * The harness writes the current layout version and fingerprint into every
 * image, so that a stored corpus keeps reaching past attach's checks when the
 * layout's version changes (test_hostile tests the refusal of a foreign one).
 *
 * Built by `make fuzz` as a libFuzzer target, and as the plain replay driver
 * `tests/fuzz_replay` that `make check` runs over the stored corpus and
 * regression images (fuzz_replay.c).
 */
#include <fcntl.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attach.h"
#include "internal.h"

#define FUZZ_IMAGE_MAX (2u << 20)
#define FUZZ_REC_HDR 6u

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

/* Lays the records over fuzz_img (lay) or zeros those bytes again (!lay);
 * returns how far they reach. */
static uint64_t fuzz_records(const uint8_t *data, size_t n, int lay) {
  uint64_t hi = 0;
  for (size_t at = 0; at + FUZZ_REC_HDR <= n;) {
    uint32_t off = (uint32_t)data[at] | (uint32_t)data[at + 1] << 8 |
                   (uint32_t)data[at + 2] << 16 | (uint32_t)data[at + 3] << 24;
    size_t len = (size_t)data[at + 4] | (size_t)data[at + 5] << 8;
    at += FUZZ_REC_HDR;
    if (len > n - at) len = n - at;
    if (off < FUZZ_IMAGE_MAX) {
      size_t fit = len < FUZZ_IMAGE_MAX - off ? len : FUZZ_IMAGE_MAX - off;
      if (lay) memcpy(fuzz_img + off, data + at, fit);
      else memset(fuzz_img + off, 0, fit);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

/* Every view of pdshm-attach but --reap, as text and as JSON, into
 * /dev/null (reasons too): the views call every introspection function. */
static void fuzz_inspect(pdshm_seg *seg, const char *name) {
  static int (*const views[])(struct ctx *) = {view_summary, view_vars,  view_procs,
                                               view_locks,   view_groups, view_alloc,
                                               view_check};
  static FILE *sink;
  if (!sink) sink = fopen("/dev/null", "w");
  attach_err = sink;
  for (size_t v = 0; v < sizeof views / sizeof views[0]; v++)
    for (int json = 0; json < 2; json++) {
      struct ctx c = {.name = name, .seg = seg, .json = json, .out = sink};
      views[v](&c);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  if (fuzz_fd < 0) fuzz_open();
  uint64_t hi = fuzz_records(data, n, 1), size = fuzz_image_size(hi);
  struct pdshm_hdr *h = (struct pdshm_hdr *)fuzz_img;
  h->layout_version = PDSHM_LAYOUT_VERSION;
  h->fingerprint = pdshm__layout_fingerprint();
  size_t put = hi < size ? hi : size;
  int bad = ftruncate(fuzz_fd, 0) || ftruncate(fuzz_fd, (off_t)size) ||
            pwrite(fuzz_fd, fuzz_img, put, 0) != (ssize_t)put;
  fuzz_records(data, n, 0);
  h->layout_version = 0;
  h->fingerprint = 0;
  if (bad) {
    perror(fuzz_path);
    abort();
  }
  pdshm_seg *seg;
  pdshm_options o = {.flags = PDSHM_RDONLY};
  if (pdshm_attach(fuzz_name, &o, &seg)) return 0;
  fuzz_inspect(seg, fuzz_name);
  pdshm_detach(seg);
  return 0;
}
