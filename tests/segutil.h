/* segutil.h - helpers of the segment suites (test_seg, test_hostile). */
#ifndef PDSHM_TEST_SEGUTIL_H
#define PDSHM_TEST_SEGUTIL_H

#include <stdbool.h>
#include <sys/stat.h>

#include "testutil.h"

/* The segment a test works on, for the helper processes it forks. */
extern char g_name[PDSHM_SEG_NAME_MAX + 1];
extern pdshm_seg *g_seg;

bool exists(const char *path);
struct stat stat_of(const char *name);
int shm_entries_with(const char *prefix);
pdshm_stats stats_of(pdshm_seg *seg);
int attach_rc(const char *name, unsigned flags);
void read_hdr(const char *name, struct pdshm_hdr *h);
void write_at(const char *name, off_t at, const void *p, size_t n);
void resize_file(const char *name, off_t size);
void assert_badseg(const char *name, const char *what);
const char *made_and_detached(const char *tag, size_t size);
void setup(void);
void teardown(void);

#endif
