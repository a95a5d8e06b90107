/*
 * fuzz_image.h - the fuzz targets' inputs as segment files.
 *
 * An input's image is a sparse segment image: records of a 4-byte offset, a
 * 2-byte length (both little-endian) and that many bytes, laid over zeros (a
 * real segment is mostly zeros: its images are a fifth of its size this
 * way).  The image is as long as its header's size field says when that is
 * a multiple of the region alignment up to FUZZ_IMAGE_MAX, else as long as
 * its records reach (attach then refuses it); its max_size at most 4 times
 * FUZZ_IMAGE_MAX (fuzz_image.c).  The current layout version
 * and fingerprint are written into every image, so that a stored corpus
 * keeps reaching past attach's checks when the layout's version changes
 * (test_hostile tests the refusal of a foreign one).
 */
#ifndef PDSHM_FUZZ_IMAGE_H
#define PDSHM_FUZZ_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#define FUZZ_IMAGE_MAX (2u << 20)

/* Called on the image before it is written: may change any of its `size`
 * bytes; returns how far it wrote (0: nothing). */
typedef uint64_t (*fuzz_image_fix)(uint8_t *img, uint64_t size);

/* The segment file of this process (made at the first call, unlinked at
 * exit) now holds the image of the records in data[0, n), edited by fix
 * when not NULL; returns the segment's name.  Aborts when the file cannot
 * be written (the harness's failure, not the library's). */
const char *fuzz_image_put(const uint8_t *data, size_t n, fuzz_image_fix fix);

#endif
