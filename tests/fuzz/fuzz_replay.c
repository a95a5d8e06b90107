/*
 * fuzz_replay.c - the fuzz target without libFuzzer: runs every file named
 * on the command line (a directory: every file in it) through
 * LLVMFuzzerTestOneInput once; without arguments, the directories FUZZ_DIRS
 * names (the stored corpus and the regression images), which is how `make
 * check` runs it.  A crash, a hang or a sanitizer report fails it.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return 1;
  }
  static uint8_t buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  int err = ferror(f) || !feof(f);
  fclose(f);
  if (err) {
    fprintf(stderr, "fuzz_replay: %s: unreadable or over %zu bytes\n", path, sizeof buf);
    return 1;
  }
  LLVMFuzzerTestOneInput(buf, n);
  return 0;
}

static int replay_dir(const char *dir, unsigned *count) {
  DIR *d = opendir(dir);
  if (!d) {
    perror(dir);
    return 1;
  }
  int bad = 0;
  char path[4096];
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    bad |= replay_file(path);
    ++*count;
  }
  closedir(d);
  return bad;
}

int main(int argc, char **argv) {
  static const char *dirs[] = {FUZZ_DIRS};
  unsigned count = 0;
  int bad = 0, n = argc > 1 ? argc - 1 : (int)(sizeof dirs / sizeof dirs[0]);
  for (int i = 0; i < n; i++) {
    const char *arg = argc > 1 ? argv[i + 1] : dirs[i];
    struct stat st;
    if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
      bad |= replay_dir(arg, &count);
    } else {
      bad |= replay_file(arg);
      count++;
    }
  }
  printf("fuzz_replay: %u inputs replayed\n", count);
  return bad;
}
