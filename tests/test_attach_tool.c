/* test_attach_tool.c - pdshm-attach, the built program, on a live
 * multi-process segment (every view, text and JSON, against what the test
 * built), on usage errors, and on damaged segments (exit 2 and one line). */
#include "config.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "world.h"

/* ---- running the tool ------------------------------------------------------------- */

struct run {
  int status;                  /* exit status, 128+signal when killed        */
  char *out, *err;             /* what it wrote (malloc'd, NUL-terminated)   */
};

static char *slurp(int fd) {
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  ck_assert_ptr_nonnull(buf);
  for (ssize_t r; (r = read(fd, buf + n, cap - n - 1)) > 0;) {
    n += (size_t)r;
    if (cap - n < 2) buf = realloc(buf, cap *= 2);
    ck_assert_ptr_nonnull(buf);
  }
  buf[n] = '\0';
  close(fd);
  return buf;
}

/* How often marker occurs in what fd (a file) holds so far. */
static int occurrences(int fd, const char *marker) {
  char buf[65536];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  int count = 0;
  buf[n > 0 ? n : 0] = '\0';
  for (const char *p = buf; (p = strstr(p, marker)); p += strlen(marker)) count++;
  return count;
}

static void interrupt(pid_t pid) { kill(pid, SIGINT); }

/* Runs the tool with argv (NULL-terminated, without the program); with a
 * marker, calls then(pid) once its output holds that marker `times` times
 * (within 10 s). */
static struct run tool_argv(const char *const *argv, const char *marker, int times,
                            void (*then)(pid_t pid)) {
  const char *args[16] = {ATTACH_TOOL};
  for (int i = 0; argv[i]; i++) args[i + 1] = argv[i];
  char outp[] = "/tmp/attach-out-XXXXXX", errp[] = "/tmp/attach-err-XXXXXX";
  int out = mkstemp(outp), err = mkstemp(errp);
  ck_assert(out >= 0 && err >= 0);
  unlink(outp);
  unlink(errp);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    dup2(out, 1);
    dup2(err, 2);
    execv(ATTACH_TOOL, (char *const *)args);
    _exit(127);
  }
  for (uint64_t end = tu_now_ns() + 10000000000ull; marker && occurrences(out, marker) < times;) {
    ck_assert_msg(tu_now_ns() < end, "no %d x \"%s\" from the tool in 10 s", times, marker);
    nanosleep(&(struct timespec){0, 5000000}, NULL);
  }
  if (marker) then(pid);
  struct run r = {.status = tu_wait(pid)};
  lseek(out, 0, SEEK_SET);
  lseek(err, 0, SEEK_SET);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

#define TOOL(...) tool_argv((const char *const[]){__VA_ARGS__, NULL}, NULL, 0, NULL)

static void run_free(struct run *r) {
  free(r->out);
  free(r->err);
}

static void has(const char *text, const char *what) {
  ck_assert_msg(strstr(text, what), "expected \"%s\" in:\n%s", what, text);
}

/* Exit 2, nothing on stdout, exactly one line on stderr, naming the tool. */
static void one_line_failure(struct run *r) {
  ck_assert_msg(r->status == 2, "status %d, stderr: %s", r->status, r->err);
  ck_assert_str_eq(r->out, "");
  size_t n = strlen(r->err);
  ck_assert_msg(n > 0 && r->err[n - 1] == '\n' && !memchr(r->err, '\n', n - 1),
                "not one line: \"%s\"", r->err);
  ck_assert(!strncmp(r->err, "pdshm-attach: ", 14));
}

/* ---- a JSON validator (RFC 8259 grammar; no semantic checks) ---------------------- */

static const char *js_value(const char *p, int depth);

static const char *js_ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

static const char *js_string(const char *p) {
  if (*p++ != '"') return NULL;
  for (; *p != '"'; p++) {
    if ((unsigned char)*p < 0x20) return NULL;
    if (*p != '\\') continue;
    p++;
    if (*p == 'u') {
      for (int i = 1; i <= 4; i++)
        if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i]) return NULL;
      p += 4;
    } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
      return NULL;
    }
  }
  return p + 1;
}

static const char *js_number(const char *p) {
  const char *s = p;
  if (*p == '-') p++;
  if (*p == '0') p++;
  else if (*p >= '1' && *p <= '9') while (*p >= '0' && *p <= '9') p++;
  else return NULL;
  if (*p == '.') {
    if (!(*++p >= '0' && *p <= '9')) return NULL;
    while (*p >= '0' && *p <= '9') p++;
  }
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (!(*p >= '0' && *p <= '9')) return NULL;
    while (*p >= '0' && *p <= '9') p++;
  }
  return p > s ? p : NULL;
}

/* Members of an object (pairs) or elements of an array, up to `close`. */
static const char *js_list(const char *p, char close, int pairs, int depth) {
  p = js_ws(p);
  if (*p == close) return p + 1;
  for (;;) {
    if (pairs) {
      if (!(p = js_string(js_ws(p)))) return NULL;
      if (*(p = js_ws(p)) != ':') return NULL;
      p++;
    }
    if (!(p = js_value(p, depth + 1))) return NULL;
    p = js_ws(p);
    if (*p == close) return p + 1;
    if (*p++ != ',') return NULL;
  }
}

static const char *js_value(const char *p, int depth) {
  if (depth > 64) return NULL;
  p = js_ws(p);
  if (*p == '{') return js_list(p + 1, '}', 1, depth);
  if (*p == '[') return js_list(p + 1, ']', 0, depth);
  if (*p == '"') return js_string(p);
  for (const char *const *k = (const char *const[]){"true", "false", "null", NULL}; *k; k++)
    if (!strncmp(p, *k, strlen(*k))) return p + strlen(*k);
  return js_number(p);
}

/* Each line of text is one complete JSON document; returns how many. */
static int json_lines(const char *text) {
  int n = 0;
  for (const char *p = text; *p; n++) {
    const char *end = js_value(p, 0);
    ck_assert_msg(end && *end == '\n', "not JSON at \"%.60s\"", end ? end : p);
    p = end + 1;
  }
  return n;
}

START_TEST(json_validator_rejects_what_it_should) {
  ck_assert_int_eq(json_lines("{\"a\":[1,-2.5e3,true,null,\"x\\u00e9\"],\"b\":{}}\n"), 1);
  const char *bad[] = {"{\"a\":1,}", "[1 2]", "{a:1}", "\"\\x\"", "01", "[1,]", "{\"a\"}",
                       "\"tab\there\""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *end = js_value(bad[i], 0);
    ck_assert_msg(!end || *end, "accepted %s", bad[i]);
  }
}
END_TEST

/* ---- views on the live world --------------------------------------------------------- */

static void json_view(const char *view, const char *const *want) {
  struct run r = view[0] ? TOOL(g_name, view, "--json") : TOOL(g_name, "--json");
  ck_assert_msg(r.status == 0, "%s --json: %d %s", view, r.status, r.err);
  ck_assert_int_eq(json_lines(r.out), 1);
  has(r.out, "{\"schema\":1,");
  for (int i = 0; want[i]; i++) has(r.out, want[i]);
  run_free(&r);
}

START_TEST(summary_and_tree) {
  struct world wd;
  char line[128];
  world_build(&wd);
  struct run r = TOOL(g_name);
  ck_assert_msg(r.status == 0, "%s", r.err);
  has(r.out, "processes   2 alive, 1 dead (not yet reaped)"); /* we and the live kid */
  has(r.out, "contents    6 scopes, 7 variables");
  has(r.out, "\n/  ");
  has(r.out, "\u251c\u2500\u2500 params ");
  has(r.out, "\u2502   \u2514\u2500\u2500 fc ");
  snprintf(line, sizeof line, "\u2514\u2500\u2500 #%llu ", (unsigned long long)wd.dead_scope_id);
  has(r.out, line);
  snprintf(line, sizeof line, "pid %d\n", (int)wd.dead.pid);
  has(r.out, line);
  run_free(&r);
  char dead[64], scope[64];
  snprintf(dead, sizeof dead, "\"holders\":[%d]", (int)wd.dead.pid);
  snprintf(scope, sizeof scope, "\"path\":\"#%llu\"", (unsigned long long)wd.live_scope_id);
  json_view("", (const char *const[]){"\"view\":\"summary\"", "\"procs_dead\":1", "\"scopes\":6",
                                      "\"path\":\"params/fc\"", dead, scope, NULL});
  world_end(&wd);
}
END_TEST

/* What the header says about the daemon and poisoning reaches the summary. */
START_TEST(daemon_and_poison_shown) {
  make(8u << 20, 8, 0);
  struct run r = TOOL(g_name);
  has(r.out, "daemon      none\n");
  ck_assert_ptr_null(strstr(r.out, "POISONED"));
  run_free(&r);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  g_seg->hdr->daemon_pid = 4242; /* as pdshmd stores them */
  g_seg->hdr->daemon_beat_ns = ((uint64_t)now.tv_sec - 75) * 1000000000ull;
  g_seg->hdr->poisoned = 1;
  r = TOOL(g_name);
  has(r.out, "daemon      pid 4242, last heartbeat 1m1");
  has(r.out, "state       POISONED");
  run_free(&r);
  json_view("", (const char *const[]){"\"daemon_pid\":4242", "\"poisoned\":true", NULL});
  g_seg->hdr->poisoned = 0;
  g_seg->hdr->daemon_pid = 0;
}
END_TEST

START_TEST(vars_view) {
  struct world wd;
  char held[64], anon[32];
  world_build(&wd);
  struct run r = TOOL(g_name, "--vars", "params/fc");
  ck_assert_msg(r.status == 0, "%s", r.err);
  snprintf(held, sizeof held, "excl pid %d\n", (int)wd.live.pid);
  has(r.out, "params/fc  (scope #");
  has(r.out, "  W     tensor  f32    [13, 1]   52 B  parameter  fc,fc_grad  sgd");
  has(r.out, held);
  ck_assert_ptr_null(strstr(r.out, "step")); /* only that scope */
  run_free(&r);
  snprintf(anon, sizeof anon, "--vars=#%llu", (unsigned long long)wd.dead_scope_id);
  r = TOOL(g_name, anon);
  has(r.out, "  h1    tensor  i32    [10]");
  run_free(&r);
  r = TOOL(g_name, "--vars");
  has(r.out, "step");
  has(r.out, "shared x1");
  run_free(&r);
  r = TOOL(g_name, "--vars", "no/such");
  one_line_failure(&r);
  run_free(&r);
  json_view("--vars", (const char *const[]){"\"view\":\"vars\"", "\"readers\":[\"fc\",\"fc_grad\"]",
                                            "\"lock\":{\"state\":\"exclusive\"",
                                            "\"shape\":[64,13]", "\"type\":\"empty\"", NULL});
  world_end(&wd);
}
END_TEST

/* Names are bytes: text shows '?' for what is not printable, JSON escapes
 * control characters and turns invalid UTF-8 into U+FFFD. */
START_TEST(odd_names_stay_readable) {
  make(8u << 20, 8, 0);
  pdshm_scope *root;
  pdshm_var *v;
  ck_assert_int_eq(pdshm_root(g_seg, &root), 0);
  ck_assert_int_eq(pdshm_var_create(root, "tab\there\xff \"q\" \xc3\xa9", &v), 0);
  ck_assert_int_eq(pdshm_var_set_label(v, "\x1b[31mred"), 0);
  struct run r = TOOL(g_name, "--vars");
  ck_assert_int_eq(r.status, 0);
  has(r.out, "tab?here? \"q\" \xc3\xa9 ");
  has(r.out, "?[31mred");
  run_free(&r);
  r = TOOL(g_name, "--vars", "--json");
  ck_assert_int_eq(json_lines(r.out), 1);
  has(r.out, "\"name\":\"tab\\u0009here\\ufffd \\\"q\\\" \xc3\xa9\"");
  has(r.out, "\"label\":\"\\u001b[31mred\"");
  run_free(&r);
  pdshm_scope_release(root);
}
END_TEST

START_TEST(procs_locks_alloc_check_reap) {
  struct world wd;
  char live[64], dead[64], holder[64];
  world_build(&wd);
  struct run r = TOOL(g_name, "--procs");
  snprintf(live, sizeof live, "%d  alive", (int)wd.live.pid);
  snprintf(dead, sizeof dead, "%d  dead", (int)wd.dead.pid);
  has(r.out, live);
  has(r.out, dead);
  run_free(&r);
  snprintf(dead, sizeof dead, "\"pid\":%d,\"state\":\"dead\"", (int)wd.dead.pid);
  json_view("--procs", (const char *const[]){dead, NULL});
  r = TOOL(g_name, "--locks");
  has(r.out, "scope params/fc");
  has(r.out, "heap");
  /* a variable's lock is a word of its record: --vars shows its holder */
  snprintf(holder, sizeof holder, "var params/fc/W");
  ck_assert_msg(!strstr(r.out, holder), "a variable lock in the lock table:\n%s", r.out);
  run_free(&r);
  json_view("--locks", (const char *const[]){"\"kind\":\"heap\"", "\"guards\":\"scope params/fc\"",
                                             "\"contended_share\":", NULL});
  r = TOOL(g_name, "--alloc");
  has(r.out, "fragmentation");
  has(r.out, "tensor");
  run_free(&r);
  json_view("--alloc", (const char *const[]){"\"classes\":[{\"block_size\":32,", NULL});
  r = TOOL(g_name, "--check");
  ck_assert_msg(r.status == 0, "%s%s", r.out, r.err);
  run_free(&r);
  json_view("--check", (const char *const[]){"\"clean\":true", NULL});
  r = TOOL(g_name, "--reap");
  ck_assert_int_eq(r.status, 0);
  has(r.out, "reaped 1 dead process slot\n");
  run_free(&r);
  r = TOOL(g_name);
  has(r.out, "2 alive, 0 dead");
  run_free(&r);
  world_end(&wd);
}
END_TEST

/* A buffer pinned by us and erased underneath: our slot shows the pin,
 * --alloc the orphan (text and JSON), --check stays clean; the last unpin
 * gives it back. */
START_TEST(pins_and_orphans_shown) {
  struct world wd;
  char mine[96];
  world_build(&wd);
  pdshm_var *v = mk_tensor(wd.root, "viewed", PDSHM_F32, 1, (const int64_t[]){1000}, NULL);
  pdshm_pin *p;
  ck_assert_int_eq(pdshm_tensor_pin(v, &p, NULL), 0);
  ck_assert_int_eq(pdshm_var_erase(wd.root, "viewed"), 0);
  struct run r = TOOL(g_name, "--procs");
  has(r.out, "PINS");
  run_free(&r);
  snprintf(mine, sizeof mine, "\"pid\":%d,\"state\":\"alive\",", (int)getpid());
  json_view("--procs", (const char *const[]){mine, "\"handles\":4,\"pins\":1,", NULL});
  r = TOOL(g_name, "--alloc");
  has(r.out, "orphans        1 pinned buffers no variable holds, 4");
  has(r.out, "pin   ");
  run_free(&r);
  json_view("--alloc", (const char *const[]){"\"orphan_blocks\":1,\"orphan_bytes\":4", NULL});
  r = TOOL(g_name, "--check");
  ck_assert_msg(r.status == 0, "%s%s", r.out, r.err);
  run_free(&r);
  ck_assert_int_eq(pdshm_tensor_unpin(p), 0);
  json_view("--alloc", (const char *const[]){"\"orphan_blocks\":0,\"orphan_bytes\":0,", NULL});
  json_view("--procs", (const char *const[]){mine, "\"handles\":4,\"pins\":0,", NULL});
  world_end(&wd);
}
END_TEST

static int join_and_die(void *arg) {
  pdshm_seg *s;
  pdshm_group *g;
  (void)arg;
  if (pdshm_attach(g_name, NULL, &s) || pdshm_group_join(s, "trainers", 3, 2, &g)) return 1;
  raise(SIGKILL);
  return 2;
}

static int enlist_and_leave(void *arg) {
  pdshm_seg *s;
  pdshm_group *g;
  (void)arg;
  if (pdshm_attach(g_name, NULL, &s) || pdshm_group_enlist(s, "trainers", 20000000000ll, &g))
    return 1;
  return pdshm_group_leave(g) || pdshm_detach(s) ? 2 : 0;
}

static int candidates_of(const pdshm_group_info *gi, void *arg) {
  *(uint32_t *)arg = gi->candidates;
  return 0;
}

START_TEST(groups_shown) {
  struct world wd;
  world_build(&wd);
  struct run r = TOOL(g_name, "--groups");
  has(r.out, "(no group)");
  run_free(&r);
  pdshm_group *g;
  ck_assert_int_eq(pdshm_group_join(g_seg, "trainers", 3, 0, &g), 0);
  ck_assert_int_eq(tu_wait(tu_fork(join_and_die, NULL)), 128 + SIGKILL);
  tu_await_dead(g_seg, 1); /* its attach reaped the world's dead kid */
  r = TOOL(g_name, "--groups");
  ck_assert_msg(r.status == 0, "%s", r.err);
  has(r.out, "group trainers  (id ");
  has(r.out, "3 ranks: 1 alive, 1 dead;");
  has(r.out, "round 1: 0 of 3 arrived");
  has(r.out, "free");
  run_free(&r);
  char mine[96];
  snprintf(mine, sizeof mine, "{\"rank\":0,\"state\":\"alive\",\"slot\":%u,\"pid\":%d,",
           g_seg->slot, (int)getpid());
  json_view("--groups", (const char *const[]){"\"view\":\"groups\"", "\"name\":\"trainers\"",
                                             "\"size\":3,\"alive\":1,\"dead\":1,", mine,
                                             "{\"rank\":1,\"state\":\"free\"",
                                             "{\"rank\":2,\"state\":\"dead\"", NULL});
  /* a candidate waits; a regroup drops the free and dead ranks, takes it in */
  pid_t nc = tu_fork(enlist_and_leave, NULL);
  uint32_t waiting = 0;
  for (int i = 0; i < 20000 && !waiting; i++, usleep(1000))
    ck_assert_int_eq(pdshm_inspect_groups(g_seg, candidates_of, &waiting), 0);
  r = TOOL(g_name, "--groups");
  has(r.out, "1 candidate waiting; last regroup at round 0");
  run_free(&r);
  json_view("--groups", (const char *const[]){"\"candidates\":1,\"regrouped\":0,"
                                             "\"regroup_pending\":0,", NULL});
  int nr, ns;
  ck_assert_int_eq(pdshm_group_regroup(g, 20000000000ll, &nr, &ns), 0);
  ck_assert_int_eq(ns, 2);
  ck_assert_int_eq(tu_wait(nc), 0);
  r = TOOL(g_name, "--groups");
  has(r.out, "2 ranks: 1 alive, 0 dead;");
  has(r.out, "0 candidates waiting; last regroup at round "); /* 1, or 2 after a break */
  run_free(&r);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  world_end(&wd);
  r = TOOL(g_name, "--groups");
  has(r.out, "(no group)");
  run_free(&r);
}
END_TEST

START_TEST(watch_repeats_until_interrupted) {
  make(8u << 20, 8, 0);
  struct run r = tool_argv((const char *const[]){g_name, "--procs", "--json", "--watch", "0.1",
                                                 NULL}, "\n", 2, interrupt);
  ck_assert_int_eq(r.status, 0);
  ck_assert_int_ge(json_lines(r.out), 2);
  run_free(&r);
  r = tool_argv((const char *const[]){g_name, "--watch", "0.1", NULL}, "\033[H\033[2J", 2,
                interrupt);
  ck_assert_int_eq(r.status, 0);
  has(r.out, "\033[H\033[2J");
  run_free(&r);
}
END_TEST

static void shrink_segment(pid_t pid) {
  (void)pid;
  ck_assert_int_eq(truncate(tu_path(g_name), 4096), 0);
}

START_TEST(file_truncated_while_watching) {
  make(8u << 20, 8, 0);
  pdshm_detach(g_seg); /* nobody but the tool maps it when it shrinks */
  g_seg = NULL;
  struct run r = tool_argv((const char *const[]){g_name, "--procs", "--watch", "0.1", NULL},
                           "SLOT", 2, shrink_segment);
  ck_assert_int_eq(r.status, 2);
  has(r.err, "shrank while being read");
  ck_assert_ptr_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1);
  run_free(&r);
}
END_TEST

/* ---- usage ------------------------------------------------------------------------ */

START_TEST(usage_errors_exit_2) {
  const char *const *bad[] = {
      (const char *const[]){NULL},
      (const char *const[]){"x", "--nope", NULL},
      (const char *const[]){"x", "--procs", "--locks", NULL},
      (const char *const[]){"x", "--watch", "0", NULL},
      (const char *const[]){"x", "--watch", NULL},
      (const char *const[]){"x", "--procs=y", NULL},
      (const char *const[]){"x", "y", NULL},
      (const char *const[]){"x", "--reap", "--watch", "1", NULL},
      (const char *const[]){"no-such-segment-here", NULL},
      (const char *const[]){"bad/name", NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct run r = tool_argv(bad[i], NULL, 0, NULL);
    one_line_failure(&r);
    run_free(&r);
  }
  struct run r = TOOL("--help");
  ck_assert_int_eq(r.status, 0);
  has(r.out, "--vars [PATH]");
  run_free(&r);
  r = TOOL("--version");
  ck_assert_int_eq(r.status, 0);
  has(r.out, PACKAGE_VERSION);
  run_free(&r);
}
END_TEST

/* ---- damaged segments ------------------------------------------------------------------- */

/* Every view of the tool on the segment as it is now: exit 2 and one line
 * (--check: 1, its report on stdout). */
static void every_view_refuses(void) {
  const char *views[] = {"", "--vars", "--procs", "--locks", "--alloc"};
  for (size_t i = 0; i < sizeof views / sizeof views[0]; i++)
    for (int json = 0; json < 2; json++) {
      const char *argv[4] = {g_name, NULL, NULL, NULL};
      int n = 1;
      if (views[i][0]) argv[n++] = views[i];
      if (json) argv[n++] = "--json";
      struct run r = tool_argv(argv, NULL, 0, NULL);
      one_line_failure(&r);
      run_free(&r);
    }
  struct run r = TOOL(g_name, "--check");
  ck_assert_int_eq(r.status, 1);
  has(r.out, "pdshm_check: ");
  run_free(&r);
}

START_TEST(damaged_segments_exit_2) {
  struct world wd;
  world_build(&wd);
  struct pdshm_blk *first = pdshm__blk(g_seg, g_seg->hdr->arena_off + PDSHM_BLK_HDR);
  uint64_t word = first->word;
  first->word = 0x10; /* a block of 16 bytes: the chain breaks */
  every_view_refuses();
  first->word = word;
  struct pdshm_scope_rec *fc = pdshm__scope_at(g_seg, wd.fc->rec);
  pdshm_off_t parent = fc->parent;
  fc->parent = wd.fc->rec; /* its own parent */
  struct run r = TOOL(g_name);
  one_line_failure(&r);
  has(r.err, "parent");
  run_free(&r);
  fc->parent = parent;
  struct pdshm_var_rec *w = pdshm__var_at(g_seg, pdshm_var_ref(wd.w).off);
  struct pdshm_oplist *ol = PDSHM_AT(g_seg->base, w->readers, struct pdshm_oplist);
  uint64_t bytes = ol->bytes;
  ol->bytes = 1ull << 40;
  r = TOOL(g_name, "--vars", "params/fc");
  one_line_failure(&r);
  has(r.err, "operator list");
  run_free(&r);
  r = TOOL(g_name, "--check");
  ck_assert_int_eq(r.status, 1);
  has(r.out, "readers list");
  run_free(&r);
  ol->bytes = bytes;
  r = TOOL(g_name, "--check");
  ck_assert_int_eq(r.status, 0);
  run_free(&r);
  world_end(&wd);
}
END_TEST

START_TEST(hostile_files_exit_2) {
  make(8u << 20, 8, 0);
  pdshm_detach(g_seg);
  g_seg = NULL;
  int fd = open(tu_path(g_name), O_RDWR);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, "garbage!", 8, 0), 8); /* the magic */
  struct run r = TOOL(g_name);
  one_line_failure(&r);
  has(r.err, "magic");
  run_free(&r);
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  r = TOOL(g_name, "--json");
  one_line_failure(&r);
  run_free(&r);
  close(fd);
}
END_TEST

static Suite *attach_suite(void) {
  Suite *s = suite_create("attach_tool");
  TCase *tc = kid_tcase(s, "tool", 60);
  tcase_add_test(tc, json_validator_rejects_what_it_should);
  tcase_add_test(tc, summary_and_tree);
  tcase_add_test(tc, daemon_and_poison_shown);
  tcase_add_test(tc, vars_view);
  tcase_add_test(tc, odd_names_stay_readable);
  tcase_add_test(tc, procs_locks_alloc_check_reap);
  tcase_add_test(tc, pins_and_orphans_shown);
  tcase_add_test(tc, groups_shown);
  tcase_add_test(tc, watch_repeats_until_interrupted);
  tcase_add_test(tc, file_truncated_while_watching);
  tcase_add_test(tc, usage_errors_exit_2);
  tcase_add_test(tc, damaged_segments_exit_2);
  tcase_add_test(tc, hostile_files_exit_2);
  return s;
}

int main(void) { return tu_run(attach_suite()) ? 1 : 0; }
