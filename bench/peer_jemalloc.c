/*
 * peer_jemalloc.c - jemalloc's malloc/free as an allocator (Debian's jemalloc
 * has no prefix: linked in, it is plain malloc), and the check that malloc
 * really is jemalloc's before anything is measured against it.
 */
#include "config.h"

#include <dlfcn.h>
#include <jemalloc/jemalloc.h>
#include <stdint.h>
#include <stdlib.h>

#include "bench.h"

bool peer_malloc_is_jemalloc(FILE *out) {
  const char *ver = "?";
  size_t len = sizeof ver;
  if (mallctl("version", &ver, &len, NULL, 0)) return false;
  Dl_info di = {0};
  void *(*volatile mp)(size_t) = malloc;
  dladdr((void *)mp, &di);
  uint64_t before = 0, after = 0;
  len = sizeof before;
  mallctl("thread.allocated", &before, &len, NULL, 0);
  void *volatile p = malloc(1u << 16);
  len = sizeof after;
  mallctl("thread.allocated", &after, &len, NULL, 0);
  free(p);
  bool ok = after - before >= (1u << 16);
  fprintf(out, "jemalloc   %s; malloc resolves to %s (%s)\n", ver, di.dli_fname ? di.dli_fname : "?",
          ok ? "jemalloc: its thread.allocated counted a malloc" : "NOT jemalloc");
  return ok;
}

static void *je_open(const char *tag) { return (void *)(uintptr_t)1; }
static void *je_alloc(void *ctx, size_t n) { return malloc(n); }
static void je_free(void *ctx, void *p) { free(p); }
static void je_close(void *ctx) {}

const struct alloc_ops alloc_jemalloc = {.name = "jemalloc", .open = je_open, .alloc = je_alloc,
                                         .free = je_free, .close = je_close};
