/*
 * report.c - the figures of one run, the targets evaluated on them, and their
 * output: a Markdown table (stdout), JSON, CSV, and gnuplot charts of the
 * multi-process scenarios.
 *
 * A row is (scenario, param); its cells are the subjects measured on it, in
 * the order they first appear.  The ratio printed beside a peer's figure is
 * pdshm's figure over the peer's in the row's unit: for ns/op a time ratio
 * (below 1: pdshm is faster), for M ops/s and GB/s a throughput ratio (above
 * 1: pdshm is faster).
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"

#define RESULTS_MAX 1024
#define TARGETS_MAX 32
#define SUBJECTS_MAX 16
#define SKIPPED_MAX 8

struct result {
  char scenario[64], param[16], subject[32];
  double value;
  enum bench_unit unit;
};

struct target {
  char what[128];
  char note[128]; /* context: what a peer did on the same machine */
  double ratio, bound;
  bool at_least;
};

static struct result results[RESULTS_MAX];
static int nresults;
static struct result paired[RESULTS_MAX]; /* ratio_add's: value is the ratio */
static int npaired;
static struct target targets[TARGETS_MAX];
static int ntargets;
static char skipped[SKIPPED_MAX][128];
static int nskipped;
static const char *const unit_names[] = {[U_NS] = "ns/op", [U_MOPS] = "M ops/s", [U_GBS] = "GB/s"};

static struct result *result_fill(struct result *r, const char *scenario, const char *param,
                                  const char *subject, double value) {
  snprintf(r->scenario, sizeof r->scenario, "%s", scenario);
  snprintf(r->param, sizeof r->param, "%s", param);
  snprintf(r->subject, sizeof r->subject, "%s", subject);
  r->value = value;
  return r;
}

void result_add(const char *scenario, const char *param, const char *subject, double value,
                enum bench_unit unit) {
  if (nresults == RESULTS_MAX) bench_die("too many results");
  struct result *r = result_fill(&results[nresults++], scenario, param, subject, value);
  r->unit = unit;
  bench_progress("  %-40s %-6s %-9s %10.3f %s", scenario, param, subject, value, unit_names[unit]);
}

static const struct result *find_result(const char *scenario, const char *param, const char *subject) {
  for (int i = 0; i < nresults; i++)
    if (!strcmp(results[i].scenario, scenario) && !strcmp(results[i].param, param) &&
        (!subject || !strcmp(results[i].subject, subject)))
      return &results[i];
  return NULL;
}

double result_get(const char *scenario, const char *param, const char *subject) {
  const struct result *r = find_result(scenario, param, subject);
  return r ? r->value : 0;
}

void ratio_add(const char *scenario, const char *param, const char *subject, double ratio) {
  if (npaired == RESULTS_MAX) bench_die("too many ratios");
  result_fill(&paired[npaired++], scenario, param, subject, ratio);
  bench_progress("  %-40s %-6s %-9s %10.3fx (a ratio of the same rounds)", scenario, param,
                 subject, ratio);
}

double ratio_get(const char *scenario, const char *param, const char *subject) {
  for (int i = 0; i < npaired; i++)
    if (!strcmp(paired[i].scenario, scenario) && !strcmp(paired[i].param, param) &&
        !strcmp(paired[i].subject, subject))
      return paired[i].value;
  return 0;
}

void target_add(const char *what, double ratio, double bound, bool at_least, const char *note) {
  if (ntargets == TARGETS_MAX) bench_die("too many targets");
  struct target *t = &targets[ntargets++];
  snprintf(t->what, sizeof t->what, "%s", what);
  snprintf(t->note, sizeof t->note, "%s", note ? note : "");
  t->ratio = ratio;
  t->bound = bound;
  t->at_least = at_least;
}

void peer_skipped(const char *name, const char *why) {
  if (nskipped < SKIPPED_MAX) snprintf(skipped[nskipped++], sizeof skipped[0], "%s (%s)", name, why);
}

static bool target_pass(const struct target *t) {
  if (!(t->ratio > 0) || !isfinite(t->ratio)) return false; /* not measured */
  return t->at_least ? t->ratio >= t->bound : t->ratio <= t->bound;
}

/* ---- the table ------------------------------------------------------------- */

/* The subjects in order of first appearance. */
static int subjects(const char *list[SUBJECTS_MAX]) {
  int n = 0;
  for (int i = 0; i < nresults; i++) {
    int k = 0;
    while (k < n && strcmp(list[k], results[i].subject)) k++;
    if (k == n && n < SUBJECTS_MAX) list[n++] = results[i].subject;
  }
  return n;
}

/* Is results[i] the first of its row? */
static bool row_first(int i) {
  return find_result(results[i].scenario, results[i].param, NULL) == &results[i];
}

/* Is results[i] the first of its scenario? */
static bool scenario_first(int i) {
  for (int j = 0; j < i; j++)
    if (!strcmp(results[j].scenario, results[i].scenario)) return false;
  return true;
}

static void table_row(FILE *f, const struct result *first, const char **subj, int ns) {
  const struct result *me = find_result(first->scenario, first->param, "pdshm");
  fprintf(f, "| %s | %s | %s |", first->scenario, first->param, unit_names[first->unit]);
  for (int k = 0; k < ns; k++) {
    const struct result *r = find_result(first->scenario, first->param, subj[k]);
    if (!r) fprintf(f, " |");
    else if (!me || r == me) fprintf(f, " %.4g |", r->value);
    else fprintf(f, " %.4g (%.2fx) |", r->value, me->value / r->value);
  }
  fputc('\n', f);
}

static void write_table(FILE *f) {
  const char *subj[SUBJECTS_MAX];
  int ns = subjects(subj);
  fprintf(f, "| scenario | names / procs | unit |");
  for (int k = 0; k < ns; k++) fprintf(f, " %s%s |", subj[k], k ? " (pdshm/peer)" : "");
  fprintf(f, "\n|---|---|---|");
  for (int k = 0; k < ns; k++) fprintf(f, "---|");
  fputc('\n', f);
  for (int i = 0; i < nresults; i++) /* rows grouped by scenario */
    if (scenario_first(i))
      for (int j = i; j < nresults; j++)
        if (!strcmp(results[j].scenario, results[i].scenario) && row_first(j))
          table_row(f, &results[j], subj, ns);
  fprintf(f, "\nTargets (ratios measured in this run):\n\n");
  for (int i = 0; i < ntargets; i++) {
    const struct target *t = &targets[i];
    fprintf(f, "- %s %s: %.3fx (target %s %.2fx)%s%s\n", target_pass(t) ? "PASS" : "MISS",
            t->what, t->ratio, t->at_least ? ">=" : "<=", t->bound, *t->note ? "; " : "", t->note);
  }
  if (nskipped) fprintf(f, "\nPeers skipped:");
  for (int i = 0; i < nskipped; i++) fprintf(f, "%s %s", i ? "," : "", skipped[i]);
  if (nskipped) fputc('\n', f);
}

/* ---- JSON and CSV --------------------------------------------------------------- */

static void write_json(FILE *f) {
  fprintf(f, "{\"seconds_per_figure\": %g, \"full\": %s,\n \"skipped\": [", bconf.secs,
          bconf.full ? "true" : "false");
  for (int i = 0; i < nskipped; i++) fprintf(f, "%s\"%s\"", i ? ", " : "", skipped[i]);
  fprintf(f, "],\n \"results\": [\n");
  for (int i = 0; i < nresults; i++) {
    const struct result *r = &results[i];
    fprintf(f, "  {\"scenario\": \"%s\", \"param\": \"%s\", \"subject\": \"%s\", "
            "\"value\": %.6g, \"unit\": \"%s\"}%s\n", r->scenario, r->param, r->subject,
            r->value, unit_names[r->unit], i + 1 < nresults ? "," : "");
  }
  fprintf(f, " ],\n \"targets\": [\n");
  for (int i = 0; i < ntargets; i++) {
    const struct target *t = &targets[i];
    fprintf(f, "  {\"what\": \"%s\", \"ratio\": %.4f, \"bound\": %.2f, \"at_least\": %s, "
            "\"pass\": %s, \"note\": \"%s\"}%s\n", t->what, t->ratio, t->bound,
            t->at_least ? "true" : "false", target_pass(t) ? "true" : "false", t->note,
            i + 1 < ntargets ? "," : "");
  }
  fprintf(f, " ]\n}\n");
}

static void write_csv(FILE *f) {
  fprintf(f, "kind,scenario,param,subject,value,unit,bound,pass,note\n");
  for (int i = 0; i < nresults; i++) {
    const struct result *r = &results[i];
    fprintf(f, "result,\"%s\",%s,%s,%.6g,%s,,,\n", r->scenario, r->param, r->subject, r->value,
            unit_names[r->unit]);
  }
  for (int i = 0; i < ntargets; i++) {
    const struct target *t = &targets[i];
    fprintf(f, "target,\"%s\",,,%.4f,ratio,%s%.2f,%s,\"%s\"\n", t->what, t->ratio,
            t->at_least ? ">=" : "<=", t->bound, target_pass(t) ? "PASS" : "MISS", t->note);
  }
}

void report_write(FILE *f, enum bench_format fmt) {
  if (fmt == F_JSON) write_json(f);
  else if (fmt == F_CSV) write_csv(f);
  else write_table(f);
  fflush(f);
}

/* ---- charts ----------------------------------------------------------------- */

/* One chart: the scenario's throughput against processes, a line per subject. */
static void plot_one(FILE *gp, const char *dir, int chart, const struct result *first,
                     const char **subj, int ns) {
  char path[512];
  snprintf(path, sizeof path, "%s/contention-%d.dat", dir, chart);
  FILE *d = fopen(path, "w");
  if (!d) bench_die("%s: cannot write", path);
  for (int i = 0; i < nresults; i++) {
    if (strcmp(results[i].scenario, first->scenario) || !row_first(i)) continue;
    fprintf(d, "%s", results[i].param);
    for (int k = 0; k < ns; k++) {
      const struct result *r = find_result(first->scenario, results[i].param, subj[k]);
      if (r) fprintf(d, " %.6g", r->value);
      else fprintf(d, " NaN");
    }
    fputc('\n', d);
  }
  fclose(d);
  fprintf(gp, "set output '%s/contention-%d.png'\nset title \"%s\"\nplot ", dir, chart,
          first->scenario);
  for (int k = 0, n = 0; k < ns; k++)
    if (find_result(first->scenario, first->param, subj[k]))
      fprintf(gp, "%s'%s' using 1:%d with linespoints title '%s'", n++ ? ", " : "", path, k + 2,
              subj[k]);
  fputc('\n', gp);
}

int report_plot(const char *dir) {
  if (system("command -v gnuplot >/dev/null 2>&1")) {
    fprintf(stderr, "pdshm-bench: --plot: gnuplot is not installed (apt-get install gnuplot-nox)\n");
    return -1;
  }
  mkdir(dir, 0777);
  FILE *gp = popen("gnuplot", "w");
  if (!gp) return -1;
  fprintf(gp, "set terminal pngcairo size 800,500\nset xlabel 'processes'\n"
              "set ylabel 'M ops/s (aggregate)'\nset logscale x 2\nset key outside\n"
              "set datafile missing 'NaN'\n");
  const char *subj[SUBJECTS_MAX];
  int ns = subjects(subj), chart = 0;
  for (int i = 0; i < nresults; i++)
    if (results[i].unit == U_MOPS && scenario_first(i))
      plot_one(gp, dir, ++chart, &results[i], subj, ns);
  int rc = pclose(gp);
  if (rc) fprintf(stderr, "pdshm-bench: --plot: gnuplot failed\n");
  else bench_progress("%d charts in %s", chart, dir);
  return rc ? -1 : 0;
}
