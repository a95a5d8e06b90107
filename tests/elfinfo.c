/* elfinfo.c - see elfinfo.h.  Every offset read from the file is checked
 * against its size before it is followed. */
#include "config.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "elfinfo.h"

static bool fits(const struct elfinfo *e, uint64_t off, uint64_t len) {
  return off <= e->size && len <= e->size - off;
}

int elfinfo_open(struct elfinfo *e, const char *path) {
  struct stat st;
  *e = (struct elfinfo){0};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
    close(fd);
    return -EINVAL;
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return -errno;
  e->img = p;
  e->size = (uint64_t)st.st_size;
  const Elf64_Ehdr *h = p;
  if (memcmp(h->e_ident, ELFMAG, SELFMAG) || h->e_ident[EI_CLASS] != ELFCLASS64 ||
      !fits(e, h->e_phoff, (uint64_t)h->e_phnum * sizeof(Elf64_Phdr)) ||
      !fits(e, h->e_shoff, (uint64_t)h->e_shnum * sizeof(Elf64_Shdr))) {
    elfinfo_close(e);
    return -EINVAL;
  }
  return 0;
}

void elfinfo_close(struct elfinfo *e) {
  if (e->img) munmap(e->img, e->size);
  e->img = NULL;
}

static const Elf64_Ehdr *ehdr(const struct elfinfo *e) { return (const Elf64_Ehdr *)(void *)e->img; }

uint64_t elfinfo_tls_size(const struct elfinfo *e) {
  const Elf64_Phdr *ph = (const Elf64_Phdr *)(void *)(e->img + ehdr(e)->e_phoff);
  for (unsigned i = 0; i < ehdr(e)->e_phnum; i++)
    if (ph[i].p_type == PT_TLS) return ph[i].p_memsz;
  return 0;
}

/* The section of that type, or NULL; *strs its linked string table. */
static const Elf64_Shdr *section(const struct elfinfo *e, uint32_t type, const char **strs,
                                 uint64_t *strs_len) {
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(void *)(e->img + ehdr(e)->e_shoff);
  for (unsigned i = 0; i < ehdr(e)->e_shnum; i++) {
    if (sh[i].sh_type != type || sh[i].sh_link >= ehdr(e)->e_shnum) continue;
    const Elf64_Shdr *st = &sh[sh[i].sh_link];
    if (!fits(e, sh[i].sh_offset, sh[i].sh_size) || !fits(e, st->sh_offset, st->sh_size)) continue;
    *strs = (const char *)e->img + st->sh_offset;
    *strs_len = st->sh_size;
    return &sh[i];
  }
  return NULL;
}

static const char *str_at(const char *strs, uint64_t len, uint64_t off) {
  return off < len && memchr(strs + off, 0, len - off) ? strs + off : "";
}

bool elfinfo_needs(const struct elfinfo *e, const char *part) {
  const char *strs;
  uint64_t len;
  const Elf64_Shdr *s = section(e, SHT_DYNAMIC, &strs, &len);
  const Elf64_Dyn *d = s ? (const Elf64_Dyn *)(void *)(e->img + s->sh_offset) : NULL;
  for (uint64_t i = 0; d && i < s->sh_size / sizeof *d && d[i].d_tag != DT_NULL; i++)
    if (d[i].d_tag == DT_NEEDED && strstr(str_at(strs, len, d[i].d_un.d_val), part)) return true;
  return false;
}

static unsigned defined(const struct elfinfo *e, const char *name) {
  const char *strs;
  uint64_t len;
  unsigned n = 0;
  const Elf64_Shdr *s = section(e, SHT_DYNSYM, &strs, &len);
  const Elf64_Sym *sym = s ? (const Elf64_Sym *)(void *)(e->img + s->sh_offset) : NULL;
  for (uint64_t i = 0; sym && i < s->sh_size / sizeof *sym; i++)
    if (sym[i].st_shndx != SHN_UNDEF && (!name || !strcmp(str_at(strs, len, sym[i].st_name), name)))
      n++;
  return n;
}

bool elfinfo_defines(const struct elfinfo *e, const char *name) { return defined(e, name) > 0; }
unsigned elfinfo_defined_count(const struct elfinfo *e) { return defined(e, NULL); }
