/*
 * bench.h - the harness of pdshm-bench: time-boxed measurement in one or
 * several processes (runner.c), the results and targets and their output
 * (report.c), the scenarios (sc_single.c, sc_procs.c).
 */
#ifndef PDSHM_BENCH_H
#define PDSHM_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "peers.h"

#define BENCH_MAX_PROCS 8

/* ---- runner.c ------------------------------------------------------------- */
struct bench_conf {
  double secs;     /* time box of one measurement                           */
  bool full;       /* --full: also the longer cases                         */
  char tag[64];    /* "pdshm-bench-PID": prefix of every name this run makes */
};
extern struct bench_conf bconf;

double bench_now(void); /* CLOCK_MONOTONIC, seconds */
void bench_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
__attribute__((noreturn, format(printf, 1, 2))) void bench_die(const char *fmt, ...);
/* A name of this run: "<tag>-<what>". */
const char *bench_tag(char *buf, size_t cap, const char *what);
/* Removes whatever this run left in /dev/shm (the parent only); bench_die
 * and SIGINT/SIGTERM call it too. */
void bench_cleanup(void);

/* n names "<prefix>_<i><suffix>", shaped like Paddle's ("fc_12.w_0"). */
char **bench_names(int n, const char *prefix, const char *suffix);
void bench_names_free(char **names, int n);
uint64_t bench_rand(uint64_t *state); /* xorshift64 */
#define BENCH_ORDER_LEN 65536            /* a power of two */
/* BENCH_ORDER_LEN random indices below n, the same sequence in every run. */
uint32_t *bench_order(int n);

/* The median of v[0..n) (sorts v). */
double bench_median(double *v, int n);

/* Does n operations of a measurement on ctx. */
typedef void (*bench_fn)(void *ctx, uint64_t n);
/* Runs fn for bconf.secs in this process; operations per second (the best
 * of three windows). */
double bench_rate(bench_fn fn, void *ctx);

/* A measurement in nproc forked processes: each runs setup (attaching what
 * it uses), waits at a barrier in shared memory, runs work for bconf.secs
 * from one common start, then teardown. */
struct mp_job {
  void *(*setup)(void *arg, int proc); /* NULL: the process fails */
  bench_fn work;
  void (*teardown)(void *ctx);
  void *arg;
  double secs; /* the time box; 0: bconf.secs */
};
/* Aggregate operations per second of the nproc processes; dies on failure. */
double bench_mp_rate(const struct mp_job *job, int nproc);

/* ---- report.c ------------------------------------------------------------- */
enum bench_unit { U_NS, U_MOPS, U_GBS }; /* ns/op, M ops/s aggregate, GB/s */

/* One figure: scenario (a row's name), param (names or processes), subject. */
void result_add(const char *scenario, const char *param, const char *subject, double value,
                enum bench_unit unit);
/* The figure, or 0 when it was not measured. */
double result_get(const char *scenario, const char *param, const char *subject);
/* A target: ratio measured against bound (at_least: ratio >= bound); note
 * (may be NULL): context printed with it. */
/* A ratio of two figures taken in the same rounds, the median over the
 * rounds: a subject's rate at param processes over its rate at 1 (a
 * scaling), or pdshm's figure over its bound's (sc_procs.c). */
void ratio_add(const char *scenario, const char *param, const char *subject, double ratio);
/* The ratio, or 0 when it was not measured. */
double ratio_get(const char *scenario, const char *param, const char *subject);
void target_add(const char *what, double ratio, double bound, bool at_least, const char *note);
void peer_skipped(const char *name, const char *why);

enum bench_format { F_TABLE, F_JSON, F_CSV };
void report_write(FILE *f, enum bench_format fmt);
/* gnuplot charts of the multi-process scenarios into dir; 0, or -1 when
 * gnuplot is missing or failed (a message on stderr). */
int report_plot(const char *dir);

/* ---- scenarios ---------------------------------------------------------- */
/* The subjects of this build, NULL-terminated; those left out are reported. */
extern const struct store_ops *const bench_stores[];
extern const struct alloc_ops *const bench_allocs[];

/* Gets (creates) each of the n names in scope; dies on failure. */
void bench_fill(const struct store_ops *ops, void *scope, char **names, int n);

void sc_names(void);
void sc_step_cycle(void);
void sc_alloc(void);
void sc_contention_stores(void);
void sc_contention_locks(void);
void sc_contention_trainer(void);
void sc_tensor_read(void);

#endif
