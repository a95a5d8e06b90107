/* elfinfo.h - facts about a shared object's ELF file (64-bit, this host's
 * byte order), read from the file: what the dynamic loader will see. */
#ifndef PDSHM_ELFINFO_H
#define PDSHM_ELFINFO_H

#include <stdbool.h>
#include <stdint.h>

struct elfinfo {
  uint8_t *img;      /* the file, mapped read-only */
  uint64_t size;
};

/* 0, or -errno / -EINVAL when path is not a 64-bit ELF file. */
int elfinfo_open(struct elfinfo *e, const char *path);
void elfinfo_close(struct elfinfo *e);
/* p_memsz of the PT_TLS segment, 0 when there is none. */
uint64_t elfinfo_tls_size(const struct elfinfo *e);
/* Whether a DT_NEEDED entry contains `part` (e.g. "jemalloc"). */
bool elfinfo_needs(const struct elfinfo *e, const char *part);
/* Whether the dynamic symbol table defines (not merely references) `name`. */
bool elfinfo_defines(const struct elfinfo *e, const char *name);
/* How many symbols the dynamic symbol table defines (a sanity count). */
unsigned elfinfo_defined_count(const struct elfinfo *e);

#endif
