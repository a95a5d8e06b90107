/*
 * attach_util.c - pdshm-attach's output helpers: reasons, human units,
 * times, text that is safe to print, JSON strings.
 */
#include "config.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attach.h"

FILE *attach_err;

int fail(const char *fmt, ...) {
  FILE *f = attach_err ? attach_err : stderr;
  va_list ap;
  va_start(ap, fmt);
  fputs(PROG ": ", f);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  va_end(ap);
  return 2;
}

int fail_rc(const struct ctx *c, const char *what, int rc) {
  const char *detail = pdshm_last_error();
  return fail("%s: %s%s%s%s", c->name, what, pdshm_strerror(rc), *detail ? ": " : "", detail);
}

const char *human(uint64_t bytes, char *buf, size_t cap) {
  static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  unsigned u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

const char *when(uint64_t ns, char *buf, size_t cap) {
  time_t t = (time_t)(ns / 1000000000u);
  struct tm tm;
  if (!ns || !gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M:%S UTC", &tm))
    snprintf(buf, cap, "-");
  return buf;
}

const char *ago(uint64_t ns, char *buf, size_t cap) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
  uint64_t s = ns && ns <= now_ns ? (now_ns - ns) / 1000000000u : 0;
  if (!ns || ns > now_ns) snprintf(buf, cap, "-");
  else if (s < 60) snprintf(buf, cap, "%llus", (unsigned long long)s);
  else if (s < 3600) snprintf(buf, cap, "%llum%02llus", (unsigned long long)(s / 60),
                              (unsigned long long)(s % 60));
  else if (s < 86400) snprintf(buf, cap, "%lluh%02llum", (unsigned long long)(s / 3600),
                               (unsigned long long)(s / 60 % 60));
  else snprintf(buf, cap, "%llud%02lluh", (unsigned long long)(s / 86400),
                (unsigned long long)(s / 3600 % 24));
  return buf;
}

/* Bytes of the valid UTF-8 sequence at s (1..4), or 0. */
static size_t utf8_len(const unsigned char *s) {
  size_t n = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
             : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
  for (size_t i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if (n == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0))) return 0;
  if (n == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))) return 0;
  return n;
}

const char *printable(const char *s, char *buf, size_t cap) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && o + 5 < cap;) {
    size_t n = utf8_len(p);
    if (n == 1 && (*p < 0x20 || *p == 0x7f)) n = 0;
    if (!n) {
      buf[o++] = '?';
      p++;
      continue;
    }
    memcpy(buf + o, p, n);
    o += n;
    p += n;
  }
  buf[o] = '\0';
  return buf;
}

void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t n = utf8_len(p);
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (n == 1 && *p < 0x20) fprintf(f, "\\u%04x", *p);
    else if (n) fwrite(p, 1, n, f);
    else fputs("\\ufffd", f);
    p += n ? n : 1;
  }
  fputc('"', f);
}

const char *dtype_name(int dtype) {
  static const char *names[] = {"bool", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32",
                                "f64"};
  return dtype >= 0 && dtype < (int)(sizeof names / sizeof names[0]) ? names[dtype] : "?";
}

void *grow(void *array, size_t n, size_t *cap, size_t size) {
  if (n < *cap) return array;
  *cap = *cap ? 2 * *cap : 64;
  array = realloc(array, *cap * size);
  if (!array) abort();
  return array;
}
