/*
 * pdshm-bench - pdshm against the peers a user would otherwise pick, every
 * scenario and every peer in the same run, and the targets evaluated on the
 * ratios of that run.
 *
 * usage: pdshm-bench [--quick | --full] [--json | --csv] [--plot DIR]
 *                    [--only LIST]
 *   --quick   short figures (0.1 s each; the default; make bench)
 *   --full    1 s per figure
 *   --json, --csv   machine-readable output instead of the table
 *   --plot DIR      gnuplot PNG charts of throughput against processes
 *   --only LIST     some of: names,step,alloc,stores,locks,trainer,read
 * Progress on stderr, the table (or JSON/CSV) on stdout.  Every segment, Boost
 * object and LMDB environment is named after this process's pid and removed
 * at the end, also on failure or SIGINT.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

const struct store_ops *const bench_stores[] = {&store_pdshm, &store_hash,
#if HAVE_CXX
                                                &store_paddle,
#endif
#if HAVE_BOOST
                                                &store_boost,
#endif
#if HAVE_LMDB
                                                &store_lmdb,
#endif
                                                NULL};

const struct alloc_ops *const bench_allocs[] = {&alloc_pdshm, &alloc_jemalloc,
#if HAVE_BOOST
                                                &alloc_boost,
#endif
                                                NULL};

static void say_skipped(void) {
#if !HAVE_CXX
  peer_skipped("paddle", "no C++ compiler at configure");
#endif
#if !HAVE_BOOST
  peer_skipped("boost", "no C++ compiler or Boost.Interprocess headers at configure");
#endif
#if !HAVE_LMDB
  peer_skipped("lmdb", "liblmdb not found at configure");
#endif
}

static const struct {
  const char *key;
  void (*run)(void);
} scenarios[] = {{"names", sc_names},
                 {"step", sc_step_cycle},
                 {"alloc", sc_alloc},
                 {"stores", sc_contention_stores},
                 {"locks", sc_contention_locks},
                 {"trainer", sc_contention_trainer},
                 {"read", sc_tensor_read}};

/* ---- the targets, on this run's figures ------------------------------------- */

/* a / b, or 0 when either was not measured. */
static double ratio(double a, double b) { return a > 0 && b > 0 ? a / b : 0; }

static void lookup_targets(void) {
  static const char hit[] = "lookup hit, in the scope";
  static const struct {
    const char *peer;
    double bound;
  } peers[] = {{"paddle", 0.5}, {"lmdb", 0.2}, {"boost", 0.15}};
  double me = result_get(hit, "10000", "pdshm");
  for (size_t i = 0; i < sizeof peers / sizeof peers[0]; i++) {
    double them = result_get(hit, "10000", peers[i].peer);
    if (!them) continue; /* peer skipped or scenario not run */
    char what[96];
    snprintf(what, sizeof what, "lookup hit at 10k names, time vs %s", peers[i].peer);
    target_add(what, ratio(me, them), peers[i].bound, false, NULL);
  }
}

/* "the private C hash table: 1.93x": the same scaling of a peer that shares
 * nothing, i.e. what this machine gives at that moment. */
static const char *machine_note(char *buf, size_t cap, const char *scenario, const char *procs) {
  double r = ratio_get(scenario, procs, "hash");
  if (!r) return NULL;
  snprintf(buf, cap, "the private C hash table, sharing nothing, did %.2fx", r);
  return buf;
}

/* pdshm's rate at procs processes over its rate at one, in the same rounds. */
static double scaling(const char *scenario, const char *procs) {
  return ratio_get(scenario, procs, "pdshm");
}

static void scaling_targets(void) {
  static const char a[] = "5a lookups, one shared scope (10k names)";
  static const char c[] = "5c get-or-create + erase, own local scopes";
  static const char d[] = "5d exclusive lock hand-off, one variable";
  char note[128];
  if (result_get(a, "1", "pdshm")) {
    target_add("lookups: 2 processes vs 1", scaling(a, "2"), 1.8, true,
               machine_note(note, sizeof note, a, "2"));
    target_add("lookups: 8 processes vs 1 (2 cores)", scaling(a, "8"), 1.6, true,
               machine_note(note, sizeof note, a, "8"));
    if (result_get(a, "2", "lmdb"))
      target_add("lookups: 2 processes, pdshm vs lmdb aggregate",
                 ratio(result_get(a, "2", "pdshm"), result_get(a, "2", "lmdb")), 2.0, true, NULL);
  }
  if (result_get(c, "1", "pdshm"))
    target_add("create/erase in local scopes: 2 processes vs 1", scaling(c, "2"), 1.7, true,
               machine_note(note, sizeof note, c, "2"));
  static const char *const procs[] = {"2", "4", "8"};
  for (size_t i = 0; i < 3 && result_get(d, "2", "pdshm"); i++) {
    char what[96];
    snprintf(what, sizeof what, "lock hand-off, %s processes: pdshm vs robust mutex", procs[i]);
    target_add(what, ratio(result_get(d, procs[i], "pdshm"), result_get(d, procs[i], "mutex")), 1.0,
               true, NULL);
  }
}

/* A time ratio pdshm / peer on one row (ns/op: at most bound to pass). */
static void time_target(const char *what, const char *scenario, const char *param,
                        const char *peer, double bound) {
  double me = result_get(scenario, param, "pdshm"), them = result_get(scenario, param, peer);
  if (me && them) target_add(what, ratio(me, them), bound, false, NULL);
}

/* A throughput ratio pdshm / peer on one row (M ops/s: at least bound). */
static void rate_target(const char *what, const char *scenario, const char *param,
                        const char *peer, double bound) {
  double me = result_get(scenario, param, "pdshm"), them = result_get(scenario, param, peer);
  if (me && them) target_add(what, ratio(me, them), bound, true, NULL);
}

/* The hot paths, each against its peer of the same run. */
static void hot_path_targets(void) {
  time_target("lookup hit at 10k names, time vs the private hash table",
              "lookup hit, in the scope", "10000", "hash", 1.25);
  time_target("get-or-create + erase at 10k names, time vs paddle",
              "get-or-create + erase (a pair)", "10000", "paddle", 1.0);
  time_target("rename at 10k names, time vs paddle", "rename", "10000", "paddle", 1.0);
  time_target("step cycle (new scope, 10 x 4 KiB, release), time vs paddle",
              "step cycle: new scope, 10 vars x 4 KiB, release", "10", "paddle", 1.0);
  static const struct {
    const char *size;
    double bound;
  } sizes[] = {{"64 B", 3.0}, {"4 KiB", 3.0}, {"16 MiB", 2.0}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char what[96];
    snprintf(what, sizeof what, "tensor alloc + free %s, time vs jemalloc", sizes[i].size);
    time_target(what, "tensor alloc + free (a pair)", sizes[i].size, "jemalloc", sizes[i].bound);
  }
  static const char e[] = "5e shared locks, one variable";
  static const char *const procs[] = {"2", "4", "8"};
  for (size_t i = 0; i < 3; i++) {
    char what[96];
    snprintf(what, sizeof what, "shared locks, %s processes: pdshm vs robust mutex", procs[i]);
    rate_target(what, e, procs[i], "mutex", 1.0);
    snprintf(what, sizeof what, "shared locks, %s processes: pdshm vs rwlock (not robust)",
             procs[i]);
    rate_target(what, e, procs[i], lock_rwlock.name, 1.0);
  }
  static const char f[] = "5f trainer step (scope, 10 finds, 4 tensors, 2 locks)";
  rate_target("trainer step, 1 process: pdshm vs paddle + mutex", f, "1", "paddle", 1.0);
  rate_target("trainer step, 2 processes: pdshm vs paddle + mutex", f, "2", "paddle", 1.0);
}

static void read_target(void) {
  static const char s[] = "6 read a 256 MiB tensor, vs the same read of private memory";
  if (ratio_get(s, "1", "pdshm"))
    target_add("tensor read from another process vs the same read of private memory",
               ratio_get(s, "1", "pdshm"), 0.9, true, "the median of the rounds' ratios");
}

/* ---- main ----------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr, "usage: pdshm-bench [--quick | --full] [--json | --csv] [--plot DIR] "
                  "[--only names,step,alloc,stores,locks,trainer,read]\n");
  exit(2);
}

static bool wanted(const char *only, const char *key) {
  if (!only) return true;
  size_t n = strlen(key);
  for (const char *p = only; (p = strstr(p, key)); p += n)
    if ((p == only || p[-1] == ',') && (p[n] == ',' || !p[n])) return true;
  return false;
}

int main(int argc, char **argv) {
  enum bench_format fmt = F_TABLE;
  const char *plot = NULL, *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) bconf.secs = 0.1, bconf.full = false;
    else if (!strcmp(argv[i], "--full")) bconf.secs = 1.0, bconf.full = true;
    else if (!strcmp(argv[i], "--json")) fmt = F_JSON;
    else if (!strcmp(argv[i], "--csv")) fmt = F_CSV;
    else if (!strcmp(argv[i], "--plot") && i + 1 < argc) plot = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else usage();
  }
  if (!peer_malloc_is_jemalloc(stderr)) {
    fprintf(stderr, "pdshm-bench: malloc is not jemalloc's: the jemalloc peer would be wrong\n");
    return 1;
  }
  say_skipped();
  char peers[128] = "";
  for (int k = 1; bench_stores[k]; k++) /* [0] is pdshm */
    snprintf(peers + strlen(peers), sizeof peers - strlen(peers), " %s", bench_stores[k]->name);
  bench_progress("peers built:%s jemalloc mutex rwlock private-read", peers);
  bench_progress("%s run, %.2f s per figure, %ld cores online", bconf.full ? "full" : "quick",
                 bconf.secs, sysconf(_SC_NPROCESSORS_ONLN));
  double t0 = bench_now();
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
    if (wanted(only, scenarios[i].key)) scenarios[i].run();
  lookup_targets();
  scaling_targets();
  hot_path_targets();
  read_target();
  report_write(stdout, fmt);
  bench_progress("done in %.0f s", bench_now() - t0);
  int rc = plot && report_plot(plot) ? 1 : 0;
  bench_cleanup();
  return rc;
}
