/*
 * test_load.c - the built libpdshm.so as a plugin host sees it: loaded with
 * dlopen(RTLD_NOW | RTLD_LOCAL) into a program that does not link it, used
 * through dlsym, from threads that then exit; and its ELF file: a TLS segment
 * within PDSHM_TLS_BUDGET (glibc gives a dlopen()ed library only a small
 * static TLS surplus), no libjemalloc among its needs, no malloc of its own.
 *
 * This program links neither libpdshm nor its objects (only the header's
 * types and constants), so the library it uses is the one dlopen() loads.
 */
#include "config.h"

#include <check.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elfinfo.h"
#include "base/base.h" /* PDSHM_TLS_BUDGET (no code of it is linked) */

/* The library's functions, looked up by name. */
struct lib {
  void *dl;
  int (*create)(const char *, const pdshm_options *, pdshm_seg **);
  int (*attach)(const char *, const pdshm_options *, pdshm_seg **);
  int (*detach)(pdshm_seg *);
  int (*unlink)(const char *);
  int (*root)(pdshm_seg *, pdshm_scope **);
  int (*scope_release)(pdshm_scope *);
  int (*var_create)(pdshm_scope *, const char *, pdshm_var **);
  pdshm_var *(*find_var)(pdshm_scope *, const char *);
  int (*var_lock)(pdshm_var *, int);
  int (*var_unlock)(pdshm_var *);
  uint64_t (*var_version)(const pdshm_var *);
  int (*tensor_resize)(pdshm_var *, pdshm_dtype, int, const int64_t *);
  void *(*tensor_data)(const pdshm_var *);
  const char *(*last_error)(void);
};

static void *sym(void *dl, const char *name) {
  void *p = dlsym(dl, name);
  ck_assert_msg(p != NULL, "dlsym(%s): %s", name, dlerror());
  return p;
}

static void lib_open(struct lib *l) {
  l->dl = dlopen(LIBPDSHM_PATH, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(l->dl != NULL, "dlopen: %s", dlerror());
  *(void **)&l->create = sym(l->dl, "pdshm_create");
  *(void **)&l->attach = sym(l->dl, "pdshm_attach");
  *(void **)&l->detach = sym(l->dl, "pdshm_detach");
  *(void **)&l->unlink = sym(l->dl, "pdshm_unlink");
  *(void **)&l->root = sym(l->dl, "pdshm_root");
  *(void **)&l->scope_release = sym(l->dl, "pdshm_scope_release");
  *(void **)&l->var_create = sym(l->dl, "pdshm_var_create");
  *(void **)&l->find_var = sym(l->dl, "pdshm_find_var");
  *(void **)&l->var_lock = sym(l->dl, "pdshm_var_lock");
  *(void **)&l->var_unlock = sym(l->dl, "pdshm_var_unlock");
  *(void **)&l->var_version = sym(l->dl, "pdshm_var_version");
  *(void **)&l->tensor_resize = sym(l->dl, "pdshm_tensor_resize");
  *(void **)&l->tensor_data = sym(l->dl, "pdshm_tensor_data");
  *(void **)&l->last_error = sym(l->dl, "pdshm_last_error");
}

#define OK(l, call)                                                                              \
  do {                                                                                           \
    int rc_ = (call);                                                                            \
    ck_assert_msg(rc_ == 0, "%s: %d (%s)", #call, rc_, (l)->last_error());                       \
  } while (0)

struct worker {
  struct lib *l;
  pdshm_var *v;
  int rounds, failures;
};

/* Takes and drops v's lock, exclusive and shared, then exits: the thread's
 * private block (thread.c) is made by the first lock and freed at exit. */
static void *worker_run(void *arg) {
  struct worker *w = arg;
  for (int i = 0; i < w->rounds; i++) {
    int excl = i % 2;
    if (w->l->var_lock(w->v, excl) || w->l->var_unlock(w->v)) w->failures++;
  }
  return NULL;
}

/* Two attachments of one segment, a variable locked by the main thread and
 * by threads that come and go, bytes written through one attachment seen
 * through the other. */
START_TEST(dlopen_create_attach_lock) {
  struct lib l;
  char name[64];
  snprintf(name, sizeof name, "t-load-%d", (int)getpid());
  lib_open(&l);
  l.unlink(name); /* a stale one from a killed run */
  pdshm_seg *a, *b;
  pdshm_scope *ra, *rb;
  pdshm_var *va;
  OK(&l, l.create(name, &(pdshm_options){.size = 4u << 20}, &a));
  OK(&l, l.attach(name, NULL, &b));
  OK(&l, l.root(a, &ra));
  OK(&l, l.root(b, &rb));
  OK(&l, l.var_create(ra, "w", &va));
  OK(&l, l.tensor_resize(va, PDSHM_F32, 1, (int64_t[]){4}));
  pdshm_var *vb = l.find_var(rb, "w");
  ck_assert_ptr_nonnull(vb);
  OK(&l, l.var_lock(va, 1));
  ((float *)l.tensor_data(va))[3] = 2.5f;
  OK(&l, l.var_unlock(va));
  ck_assert(((float *)l.tensor_data(vb))[3] == 2.5f);
  ck_assert_uint_ge(l.var_version(vb), 2); /* the resize and the unlock */
  struct worker w = {.l = &l, .v = vb, .rounds = 50};
  for (int round = 0; round < 4; round++) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, worker_run, &w), 0);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  }
  ck_assert_int_eq(w.failures, 0);
  OK(&l, l.scope_release(rb));
  OK(&l, l.scope_release(ra));
  OK(&l, l.detach(b));
  OK(&l, l.detach(a));
  OK(&l, l.unlink(name));
  ck_assert_int_eq(dlclose(l.dl), 0);
  /* Linked -z nodelete: still there, so a thread that used it can exit. */
  ck_assert_ptr_nonnull(dlopen(LIBPDSHM_PATH, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD));
}
END_TEST

struct tls_find {
  const char *path;
  size_t tls;
  bool found, jemalloc;
};

static int tls_visit(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct tls_find *f = arg;
  if (info->dlpi_name && strstr(info->dlpi_name, "jemalloc")) f->jemalloc = true;
  if (!info->dlpi_name || strcmp(info->dlpi_name, f->path)) return 0;
  f->found = true;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_TLS) f->tls = info->dlpi_phdr[i].p_memsz;
  return 0;
}

/* As loaded: its PT_TLS within budget, and nothing brought jemalloc in. */
START_TEST(loaded_tls_within_budget_no_jemalloc) {
  struct lib l;
  lib_open(&l);
  struct tls_find f = {.path = LIBPDSHM_PATH};
  dl_iterate_phdr(tls_visit, &f);
  ck_assert_msg(f.found, "%s is not among the loaded objects", LIBPDSHM_PATH);
  ck_assert_msg(f.tls > 0 && f.tls <= PDSHM_TLS_BUDGET, "TLS segment of %zu bytes (budget %d)",
                f.tls, PDSHM_TLS_BUDGET);
  ck_assert_msg(!f.jemalloc, "loading libpdshm brought libjemalloc into the process");
}
END_TEST

START_TEST(elf_file_tls_needs_exports) {
  struct elfinfo e;
  int rc = elfinfo_open(&e, LIBPDSHM_PATH);
  ck_assert_msg(rc == 0, "%s: %s", LIBPDSHM_PATH, strerror(-rc));
  uint64_t tls = elfinfo_tls_size(&e);
  ck_assert_msg(tls <= PDSHM_TLS_BUDGET, "TLS segment of %llu bytes (budget %d)",
                (unsigned long long)tls, PDSHM_TLS_BUDGET);
  ck_assert_msg(!elfinfo_needs(&e, "jemalloc"), "libpdshm.so has a DT_NEEDED on jemalloc");
  ck_assert(elfinfo_needs(&e, "libc.so")); /* the reader does find DT_NEEDED entries */
  ck_assert(elfinfo_defines(&e, "pdshm_create") && elfinfo_defined_count(&e) > 50);
  static const char *const allocator[] = {"malloc", "free", "calloc", "realloc", "posix_memalign",
                                          "aligned_alloc", "memalign", "valloc", "mallocx",
                                          "malloc_usable_size"};
  for (size_t i = 0; i < sizeof allocator / sizeof allocator[0]; i++)
    ck_assert_msg(!elfinfo_defines(&e, allocator[i]), "libpdshm.so exports %s", allocator[i]);
  elfinfo_close(&e);
}
END_TEST

int main(void) {
  if (access(LIBPDSHM_PATH, R_OK)) {
    printf("SKIP: %s was not built (configured --disable-shared?)\n", LIBPDSHM_PATH);
    return 77;
  }
  Suite *s = suite_create("load");
  TCase *tc = tcase_create("load");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, dlopen_create_attach_lock);
  tcase_add_test(tc, loaded_tls_within_budget_no_jemalloc);
  tcase_add_test(tc, elf_file_tls_needs_exports);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_FORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
