/*
 * fuzz_inspect.c - segment images through the inspector's read path.
 *
 * An input is a sparse segment image (fuzz_image.h).  It becomes a real
 * segment file, is attached read-only, and every introspection call and
 * every view of pdshm-attach runs over it.  Anything but a crash, a hang or
 * a sanitizer report is a pass.
 *
 * Built by `make fuzz` as a libFuzzer target, and as the plain replay driver
 * `tests/fuzz_replay` that `make check` runs over the stored corpus and
 * regression images (fuzz_replay.c).
 */
#include <stdint.h>
#include <stdio.h>

#include "attach.h"
#include "fuzz_image.h"
#include "lifecycle/lifecycle.h"

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
  const char *name = fuzz_image_put(data, n, NULL);
  pdshm_seg *seg;
  pdshm_options o = {.flags = PDSHM_RDONLY};
  if (pdshm_attach(name, &o, &seg)) return 0;
  fuzz_inspect(seg, name);
  pdshm_detach(seg);
  return 0;
}
