/*
 * mkseeds - writes images of real segments, the fuzz corpora's seeds.
 *
 *   mkseeds [-w] DIR
 *
 * Builds small segments (1 MiB, 4 slots, 64 locks) in the states the
 * inspector must read: empty; a named tree of tensors with labels, readers
 * and writers; a process that died holding anonymous scopes; variable locks
 * held; churn that leaves tombstones and free blocks; a grown variable table;
 * pinned buffers, one still hooked and one orphaned by an erase; a trainer
 * group with a live member, a free rank and a killed one.
 * Each image is written in the fuzz harness's sparse form (fuzz_image.h):
 * the file's nonzero runs (gaps of fewer than 32 zeros included), each as a
 * 4-byte offset, a 2-byte length and the bytes.
 *
 * With -w, the seeds of fuzz_rw: each image is followed by a script of
 * operations (fuzz_rw.c), and more states follow, each of a process killed
 * (through the crash points of the library it links, crashpoint.h) in the
 * middle of a journal, of a split of a block, of a scope's destruction, of a
 * shared lock's take, or holding variable locks and a pin.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/crashpoint.h"
#include "pdshm.h"

static char seg_name[64];
static int with_script; /* -w */

static void die_rc(const char *what, int rc) {
  fprintf(stderr, "mkseeds: %s: %s (%s)\n", what, pdshm_strerror(rc), pdshm_last_error());
  pdshm_unlink(seg_name);
  exit(1);
}
#define TRY(call)                              \
  do {                                         \
    int rc_ = (call);                          \
    if (rc_ < 0) die_rc(#call, rc_);           \
  } while (0)

static pdshm_var *tensor(pdshm_scope *s, const char *name, pdshm_dtype dt, int ndim,
                         const int64_t *dims, const char *label) {
  pdshm_var *v;
  TRY(pdshm_var_get(s, name, &v));
  TRY(pdshm_tensor_resize(v, dt, ndim, dims));
  if (label) TRY(pdshm_var_set_label(v, label));
  return v;
}

/* params/fc (W, b), params/emb, data (x, y) with readers and writers. */
static void build_tree(pdshm_scope *root) {
  pdshm_scope *params, *fc, *emb, *data;
  TRY(pdshm_scope_new(root, "params", &params));
  TRY(pdshm_scope_new(params, "fc", &fc));
  TRY(pdshm_scope_new(params, "emb", &emb));
  TRY(pdshm_scope_new(root, "data", &data));
  int64_t wd[2] = {13, 1}, bd[1] = {1}, ed[2] = {32, 8}, xd[2] = {64, 13};
  pdshm_var *w = tensor(fc, "W", PDSHM_F32, 2, wd, "parameter");
  tensor(fc, "b", PDSHM_F32, 1, bd, "parameter");
  tensor(emb, "table", PDSHM_BF16, 2, ed, "parameter");
  pdshm_var *x = tensor(data, "x", PDSHM_F64, 2, xd, "feed");
  tensor(data, "y", PDSHM_I64, 0, NULL, NULL);
  TRY(pdshm_var_add_reader(w, "fc"));
  TRY(pdshm_var_add_writer(w, "sgd"));
  TRY(pdshm_var_add_reader(x, "fc"));
  pdshm_var *plain;
  TRY(pdshm_var_get(root, "step", &plain));
  pdshm_scope_release(params);
  pdshm_scope_release(fc);
  pdshm_scope_release(emb);
  pdshm_scope_release(data);
}

/* A child that attaches, takes two anonymous scopes with a tensor, tells us,
 * and is killed: its slot stays dead and unreaped in the image. */
static void dead_holder(void) {
  int p[2];
  if (pipe(p)) exit(1);
  pid_t pid = fork();
  if (pid == 0) {
    pdshm_seg *seg;
    pdshm_scope *root, *a, *b;
    int64_t d = 100;
    close(p[0]);
    if (pdshm_attach(seg_name, NULL, &seg) || pdshm_root(seg, &root) ||
        pdshm_scope_new(root, NULL, &a) || pdshm_scope_new(a, NULL, &b))
      _exit(1);
    tensor(b, "h", PDSHM_F16, 1, &d, "state");
    if (write(p[1], "x", 1) != 1) _exit(1);
    for (;;) pause();
  }
  char c;
  close(p[1]);
  if (read(p[0], &c, 1) != 1) die_rc("dead holder", PDSHM_EIO);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(p[0]);
}

static void churn(pdshm_scope *root) {
  pdshm_scope *tmp;
  char name[32];
  TRY(pdshm_scope_new(root, "tmp", &tmp));
  for (int i = 0; i < 40; i++) {
    int64_t d = 16 * i;
    snprintf(name, sizeof name, "v%d", i);
    tensor(tmp, name, PDSHM_U8, 1, &d, i % 3 ? NULL : "scratch");
  }
  for (int i = 0; i < 40; i += 2) {
    snprintf(name, sizeof name, "v%d", i);
    TRY(pdshm_var_erase(tmp, name));
  }
  TRY(pdshm_var_rename(tmp, "v1", "renamed"));
  pdshm_scope_release(tmp);
}

static void many_vars(pdshm_scope *root) {
  pdshm_scope *big;
  pdshm_var *v;
  TRY(pdshm_scope_new(root, "big", &big));
  for (int i = 0; i < 200; i++) TRY(pdshm_var_new(big, &v));
  pdshm_scope_release(big);
}

static void put_run(FILE *out, const unsigned char *img, size_t from, size_t to) {
  while (from < to) {
    size_t len = to - from < 65535 ? to - from : 65535;
    unsigned char h[6] = {(unsigned char)from, (unsigned char)(from >> 8),
                          (unsigned char)(from >> 16), (unsigned char)(from >> 24),
                          (unsigned char)len, (unsigned char)(len >> 8)};
    fwrite(h, 1, sizeof h, out);
    fwrite(img + from, 1, len, out);
    from += len;
  }
}

/* fuzz_rw's script: pairs of an operation and its argument, then their
 * length.  params/fc/W locked, pinned, resized, unlocked, unpinned, pinned
 * again; groups "trainers" and "g" joined, a barrier nobody else reaches,
 * "trainers" left; data/x locked shared and erased, data/y renamed; an
 * anonymous scope with a tensor; a walk, stats and a check, a reap, tmp
 * unlinked, a unique name, a label and a wait; the root's kids dropped and
 * a check again. */
static void put_script(FILE *out) {
  static const unsigned char script[] = {
      0,  0x01, 2,  0x1e, 8,  0x07, 10, 0x0c, 5,  0x93, 9,  0x03, 11, 0x00, 5,  0x53,
      10, 0x0d, 12, 0x04, 12, 0x99, 12, 0x07, 12, 0x04, 0,  0x0b, 3,  0x21, 8,  0x00,
      6,  0x21, 7,  0x22, 1,  0x0d, 4,  0x24, 5,  0x61, 14, 0x01, 19, 0x00, 18, 0x00,
      15, 0x04, 17, 0x00, 13, 0x01, 16, 0x01, 19, 0x00};
  fwrite(script, 1, sizeof script, out);
  fputc((int)sizeof script, out);
}

/* The segment file's nonzero runs, into DIR/seed-NAME. */
static void dump(const char *dir, const char *name) {
  static unsigned char img[1 << 20];
  char path[512];
  snprintf(path, sizeof path, "/dev/shm/pdshm.%s", seg_name);
  FILE *in = fopen(path, "rb");
  if (!in) die_rc(path, PDSHM_ENOENT);
  size_t n = fread(img, 1, sizeof img, in);
  fclose(in);
  snprintf(path, sizeof path, "%s/seed-%s", dir, name);
  FILE *out = fopen(path, "wb");
  if (!out) die_rc(path, PDSHM_EIO);
  for (size_t i = 0; i < n;) {
    if (!img[i]) {
      i++;
      continue;
    }
    size_t j = i, zeros = 0;
    for (; j < n && zeros < 32; j++) zeros = img[j] ? 0 : zeros + 1;
    put_run(out, img, i, j - zeros);
    i = j;
  }
  if (with_script) put_script(out);
  if (ferror(out) || fclose(out)) die_rc(path, PDSHM_EIO);
  printf("%s\n", path);
}

/* A member of the group "trainers" (rank 2 of 3) killed after joining. */
static void dead_member(void) {
  pid_t pid = fork();
  if (pid == 0) {
    pdshm_seg *seg;
    pdshm_group *g;
    if (pdshm_attach(seg_name, NULL, &seg) || pdshm_group_join(seg, "trainers", 3, 2, &g))
      _exit(1);
    raise(SIGKILL);
  }
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFSIGNALED(st)) die_rc("dead member", PDSHM_EIO);
}

/* A child that attaches and runs `what`, killed at the k-th hit of crash
 * point `point` (or, point NULL, by us once it says it is done). */
static void killed_in(const char *point, unsigned k, void (*what)(pdshm_seg *seg, pdshm_scope *root)) {
  int p[2];
  if (pipe(p)) exit(1);
  pid_t pid = fork();
  if (pid == 0) {
    pdshm_seg *seg;
    pdshm_scope *root;
    close(p[0]);
    if (pdshm_attach(seg_name, NULL, &seg) || pdshm_root(seg, &root)) _exit(1);
    if (point) pdshm__crash_arm(k, point);
    what(seg, root);
    if (point) _exit(3); /* the point was never reached */
    if (write(p[1], "x", 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(p[1]);
  char c;
  if (!point && read(p[0], &c, 1) != 1) die_rc("killed child", PDSHM_EIO);
  if (!point) kill(pid, SIGKILL);
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFSIGNALED(st)) die_rc(point ? point : "child", PDSHM_EIO);
  close(p[0]);
}

static void make_scope(pdshm_seg *seg, pdshm_scope *root) {
  (void)seg;
  pdshm_scope *s;
  pdshm_scope_new(root, "jmid", &s);
}

static void make_tensor(pdshm_seg *seg, pdshm_scope *root) {
  (void)seg;
  pdshm_var *v;
  if (!pdshm_var_get(root, "grown", &v))
    pdshm_tensor_resize(v, PDSHM_F32, 1, (int64_t[]){3000});
}

/* params/fc/W locked exclusive, data/x shared and pinned. */
static void lock_two(pdshm_seg *seg, pdshm_scope *root) {
  pdshm_scope *fc, *data;
  pdshm_pin *pin;
  (void)root;
  if (pdshm_scope_open(seg, "params/fc", &fc) || pdshm_scope_open(seg, "data", &data)) return;
  pdshm_var_lock(pdshm_find_var(fc, "W"), 1);
  pdshm_var_lock(pdshm_find_var(data, "x"), 0);
  pdshm_tensor_pin(pdshm_find_var(data, "x"), &pin, NULL);
}

static void share_step(pdshm_seg *seg, pdshm_scope *root) {
  (void)seg;
  pdshm_var_lock(pdshm_find_var(root, "step"), 0);
}

static void drop_scope(pdshm_seg *seg, pdshm_scope *root) {
  (void)seg;
  pdshm_scope *s;
  pdshm_var *v;
  if (pdshm_scope_new(root, NULL, &s) || pdshm_var_get(s, "a", &v) ||
      pdshm_var_get(s, "b", &v))
    return;
  pdshm_tensor_resize(v, PDSHM_U8, 1, (int64_t[]){500});
  pdshm_scope_release(s);
}

/* fuzz_rw's extra states: processes killed in the middle of things. */
static void dead_states(const char *dir) {
  killed_in("j.apply.store", 2, make_scope);
  dump(dir, "journal-commit");
  killed_in("j.set", 1, make_tensor);
  dump(dir, "journal-armed");
  killed_in("heap.carve.tail", 1, make_tensor);
  dump(dir, "heap-split");
  killed_in(NULL, 0, lock_two);
  dump(dir, "varlocks");
  killed_in("varlock.shared.taking", 1, share_step);
  dump(dir, "varlock-taking");
  killed_in("scope.destroy.vars", 1, drop_scope);
  dump(dir, "destroying");
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "-w")) {
    with_script = 1;
    argv++;
    argc--;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: mkseeds [-w] DIR\n");
    return 2;
  }
  pdshm_options o = {.size = 1u << 20, .max_procs = 4, .max_locks = 64};
  snprintf(seg_name, sizeof seg_name, "mkseeds-%d", (int)getpid());
  pdshm_seg *seg;
  pdshm_scope *root, *anon;
  pdshm_var *v;
  pdshm_unlink(seg_name);
  TRY(pdshm_create(seg_name, &o, &seg));
  TRY(pdshm_root(seg, &root));
  dump(argv[1], "empty");
  build_tree(root);
  dump(argv[1], "tree");
  dead_holder();
  dump(argv[1], "dead");
  TRY(pdshm_scope_new(root, NULL, &anon));
  TRY(pdshm_var_create(anon, "held", &v));
  TRY(pdshm_var_lock(v, 1));
  TRY(pdshm_var_lock(pdshm_find_var(root, "step"), 0));
  dump(argv[1], "locks");
  churn(root);
  dump(argv[1], "churn");
  many_vars(root);
  dump(argv[1], "many");
  pdshm_pin *hooked, *orphan;
  TRY(pdshm_tensor_pin(tensor(root, "shown", PDSHM_F32, 1, (int64_t[]){64}, NULL), &hooked, NULL));
  TRY(pdshm_tensor_pin(tensor(root, "viewed", PDSHM_U8, 1, (int64_t[]){4000}, NULL), &orphan, NULL));
  TRY(pdshm_var_erase(root, "viewed"));
  dump(argv[1], "pins");
  pdshm_group *g;
  TRY(pdshm_group_join(seg, "trainers", 3, 0, &g));
  dead_member();
  dump(argv[1], "groups");
  if (with_script) dead_states(argv[1]);
  pdshm_unlink(seg_name);
  return 0;
}
