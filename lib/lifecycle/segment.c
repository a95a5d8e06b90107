/*
 * segment.c - create, attach, detach and unlink segments; the header.
 *
 * Owns: the segment file, its mapping and the header's immutable part.
 * The process's list of attachments, which fork() children walk, is
 * attach_list.c's.
 *
 * Invariants:
 *  1. A segment file either has no magic (being created, or half-made by a
 *     creator that died: attach answers EBADSEG) or a complete header: create
 *     reserves every byte of its first size (posix_fallocate), lays out
 *     slots, locks and arena, and stores the magic last with a release store.
 *  2. Attach trusts nothing it has not checked: the header is read with pread
 *     and validated (magic, version, fingerprint, sizes, and a layout
 *     recomputed from them) against the file's real size before it is mapped:
 *     size <= arena_end <= file size <= max_size.
 *  5. Every attachment maps max_size bytes (MAP_NORESERVE), of which only
 *     those below the published arena_end are ever touched (pdshm__seg_end):
 *     a growth (heap_grow.c) extends the file, and every process sees the new
 *     bytes at the same offsets with no remap.
 *  3. A creator holds a write lock on byte PDSHM_OFD_INIT while it builds the
 *     segment; attach waits for it, so a racing attach sees a finished header.
 *  4. fork(): the child inherits neither the mapping (MADV_DONTFORK) nor the
 *     descriptor (closed at fork), since either would keep the parent's open
 *     file description, hence its slot's OFD lock, alive after the parent's
 *     death.  The child maps the same file at the same address again through
 *     an open file description of its own (attach_inherit.c), so that pointers
 *     taken before the fork stay valid; pdshm__forkgen is bumped, so every
 *     inherited handle answers PDSHM_EFORKED and touches nothing, and
 *     pdshm_detach of one only unmaps its range and frees it.
 */
#define PDSHM_LAYER 8 /* lifecycle/ (lib/LAYERS) */
#include "config.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lifecycle/lifecycle.h"

#define SEG_PREFIX "/pdshm."
#define SEG_ARENA_MIN (256u << 10) /* smallest arena a segment may have      */
#define SEG_INIT_WAIT_MS 2000      /* how long attach waits for a creator     */
#define SEG_LOCK_BYTES (16u << 10) /* default: one robust lock per 16 KiB     */
#define SEG_GROW_LOCKS 8192u       /* ... of max_size when it grows: at most  */
#define SEG_ARENA_START (2u << 20) /* a segment made with no size: this arena */

static pthread_once_t seg_once = PTHREAD_ONCE_INIT;

/* ---- names and options ---------------------------------------------------- */

static int seg_path(const char *name, char *path, size_t cap) {
  if (!name || !*name) return pdshm__fail(PDSHM_EINVAL, "empty segment name");
  size_t n = strlen(name);
  if (n > PDSHM_SEG_NAME_MAX)
    return pdshm__fail(PDSHM_ENAMETOOLONG, "segment name of %zu bytes (at most %d)", n,
                       PDSHM_SEG_NAME_MAX);
  if (!strcmp(name, ".") || !strcmp(name, ".."))
    return pdshm__fail(PDSHM_EINVAL, "segment name \"%s\" is reserved", name);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    if (!ok)
      return pdshm__fail(PDSHM_EINVAL, "segment name has byte 0x%02x at %zu: use [A-Za-z0-9._-]",
                         c, i);
  }
  snprintf(path, cap, SEG_PREFIX "%s", name);
  return 0;
}

struct seg_geometry {
  uint64_t size, max_size, slots_off, locks_off, arena_off;
  uint32_t max_procs, max_locks;
};

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Where slots, locks and the arena start. */
static void seg_offsets(uint32_t procs, uint32_t locks, struct seg_geometry *g) {
  g->max_procs = procs;
  g->max_locks = locks;
  g->slots_off = round_up(sizeof(struct pdshm_hdr), PDSHM_REGION_ALIGN);
  g->locks_off = round_up(g->slots_off + (uint64_t)procs * sizeof(struct pdshm_slot),
                          PDSHM_REGION_ALIGN);
  g->arena_off = round_up(g->locks_off + (uint64_t)locks * sizeof(struct pdshm_lock),
                          PDSHM_REGION_ALIGN);
}

/* Where everything goes, from the three numbers the header records. */
static int seg_geometry(uint64_t size, uint32_t procs, uint32_t locks, struct seg_geometry *g) {
  g->size = size;
  seg_offsets(procs, locks, g);
  if (g->arena_off + SEG_ARENA_MIN > size)
    return pdshm__fail(PDSHM_EINVAL,
                       "%llu bytes cannot hold %u process slots, %u locks and a %u KiB arena",
                       (unsigned long long)size, procs, locks, SEG_ARENA_MIN >> 10);
  return 0;
}

/* The robust locks by default: one per SEG_LOCK_BYTES of the first size (at
 * least 1024), and for a segment that grows, of max_size up to
 * SEG_GROW_LOCKS: the table cannot grow with the arena. */
static uint64_t seg_default_locks(uint64_t size, uint64_t max_size) {
  uint64_t locks = size / SEG_LOCK_BYTES, grow = max_size / SEG_LOCK_BYTES;
  if (grow > SEG_GROW_LOCKS) grow = SEG_GROW_LOCKS;
  if (locks < grow) locks = grow;
  return locks < 1024 ? 1024 : locks > PDSHM_LOCKS_MAX ? PDSHM_LOCKS_MAX : locks;
}

/* Without a size: what slots and locks take, and a small arena, at least
 * PDSHM_SIZE_DEFAULT; the segment grows from there. */
static uint64_t seg_default_size(unsigned procs, const pdshm_options *o, uint64_t max_size) {
  struct seg_geometry g;
  uint64_t locks = o && o->max_locks ? o->max_locks : seg_default_locks(PDSHM_SIZE_DEFAULT, max_size);
  seg_offsets(procs, (uint32_t)locks, &g);
  uint64_t size = round_up(g.arena_off + SEG_ARENA_START, 1u << 20);
  return size < PDSHM_SIZE_DEFAULT ? PDSHM_SIZE_DEFAULT : size;
}

static int seg_options(const pdshm_options *o, struct seg_geometry *g, unsigned *mode) {
  *mode = o && o->mode ? o->mode : 0600;
  unsigned procs = o && o->max_procs ? o->max_procs : PDSHM_PROCS_DEFAULT;
  uint64_t max_size = o && o->max_size ? o->max_size : pdshm__shmfs_max_size();
  if (max_size > PDSHM_SIZE_MAX) max_size = PDSHM_SIZE_MAX;
  if (procs > PDSHM_PROCS_MAX)
    return pdshm__fail(PDSHM_EINVAL, "max_procs %u exceeds %u", procs, PDSHM_PROCS_MAX);
  uint64_t size = o && o->size ? o->size : seg_default_size(procs, o, max_size);
  unsigned flags = o ? o->flags : 0;
  if (size < PDSHM_SIZE_MIN || size > PDSHM_SIZE_MAX)
    return pdshm__fail(PDSHM_EINVAL, "size %llu is outside [%llu, %llu]",
                       (unsigned long long)size, PDSHM_SIZE_MIN, PDSHM_SIZE_MAX);
  if (*mode & ~0777u) return pdshm__fail(PDSHM_EINVAL, "mode %#o has bits beyond 0777", *mode);
  if (flags) return pdshm__fail(PDSHM_EINVAL, "flags %#x do not apply to create", flags);
  size = round_up(size, PDSHM_REGION_ALIGN);
  if (o && o->max_size > PDSHM_SIZE_MAX)
    return pdshm__fail(PDSHM_EINVAL, "max_size %llu exceeds %llu",
                       (unsigned long long)o->max_size, PDSHM_SIZE_MAX);
  if (o && o->max_size) { /* rounded as the size is: == size stays a fixed size */
    max_size = round_up(o->max_size, PDSHM_REGION_ALIGN);
    if (max_size < size)
      return pdshm__fail(PDSHM_EINVAL, "max_size %llu is less than the size %llu",
                         (unsigned long long)o->max_size, (unsigned long long)size);
  } else { /* /dev/shm smaller than the size asked: create's reservation says so */
    max_size = max_size / PDSHM_REGION_ALIGN * PDSHM_REGION_ALIGN;
    if (max_size < size) max_size = size;
  }
  uint64_t locks = seg_default_locks(size, o && o->size ? size : max_size);
  if (o && o->max_locks) locks = o->max_locks;
  if (locks < PDSHM_LOCKS_MIN || locks > PDSHM_LOCKS_MAX)
    return pdshm__fail(PDSHM_EINVAL, "max_locks %llu is outside [%u, %u]",
                       (unsigned long long)locks, PDSHM_LOCKS_MIN, PDSHM_LOCKS_MAX);
  int rc = seg_geometry(size, procs, (uint32_t)locks, g);
  g->max_size = max_size;
  return rc;
}

/* ---- the layout fingerprint ------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; i++, v >>= 8) h = (h ^ (v & 0xff)) * 0x100000001b3ull;
  return h;
}

uint64_t pdshm__layout_fingerprint(void) {
  const uint64_t facts[] = {
      PDSHM_LAYOUT_VERSION, sizeof(struct pdshm_hdr), sizeof(struct pdshm_slot),
      sizeof(struct pdshm_lane), sizeof(struct pdshm_journal), sizeof(struct pdshm_lock),
      sizeof(struct pdshm_blk), sizeof(struct pdshm_heap), sizeof(pthread_mutex_t),
      offsetof(struct pdshm_hdr, poisoned), offsetof(struct pdshm_hdr, heap),
      offsetof(struct pdshm_lock, alloc), offsetof(struct pdshm_slot, lane),
      PDSHM_NCLASSES, PDSHM_NBINS, PDSHM_LANES, PDSHM_J_REDO, PDSHM_J_BLOCKS, PDSHM_ALIGN,
      _Alignof(struct pdshm_slot), sizeof(struct pdshm_tensor_buf), sizeof(struct pdshm_pin_rec),
      PDSHM_T_COUNT, sizeof(struct pdshm_group_rec), sizeof(struct pdshm_group_rank),
      offsetof(struct pdshm_hdr, groups), offsetof(struct pdshm_var_rec, vwaiters),
      offsetof(struct pdshm_hdr, max_size), offsetof(struct pdshm_heap, tail),
      PDSHM_GROUP_MAX, 0x0102030405060708ull /* byte order */};
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++) h = fnv1a(h, facts[i]);
  return h;
}

/* ---- once per process ------------------------------------------------------ */

/* Before the process's first segment: the fork handlers (attach_list.c), and
 * the function pointers by which lower layers reach the layers above them:
 * the lock repairs of the heap and the journal (lock.c, invariant 2), the
 * heap's reclaim and the slots' reaper (reap.c). */
static void seg_init_process(void) {
  pdshm__seg_list_atfork();
  pdshm__heap_init_process();
  pdshm__journal_init_process();
  pdshm__reap_init_process();
}

/* ---- the private handle ------------------------------------------------------ */

static pdshm_seg *seg_handle_new(const char *name, int fd, unsigned flags) {
  pdshm_seg *seg = pdshm__zalloc(sizeof *seg);
  if (!seg) return NULL;
  seg->fd = fd;
  seg->flags = flags;
  seg->slot = PDSHM_NOSLOT;
  seg->forkgen = atomic_load(&pdshm__forkgen);
  seg->pid = (uint32_t)getpid();
  struct stat st;
  if (fstat(fd, &st) == 0) { /* the file's identity, for a fork child (attach_inherit.c) */
    seg->dev = (uint64_t)st.st_dev;
    seg->ino = (uint64_t)st.st_ino;
  }
  snprintf(seg->name, sizeof seg->name, "%s", name);
  pthread_mutex_init(&seg->reap_mu, NULL);
  for (unsigned i = 0; i < PDSHM_LANES; i++) {
    seg->lanes[i].index = i;
  }
  return seg;
}

static void seg_handle_free(pdshm_seg *seg) {
  if (seg->mapped) munmap(seg->base, seg->size);
  if (seg->fd >= 0) close(seg->fd);
  pthread_mutex_destroy(&seg->reap_mu);
  pdshm__xfree(seg);
}

/* The mapping is not inherited by fork() children: it holds a reference to
 * the open file description, which would keep our slot's OFD lock, and so
 * our slot, alive after our death (invariant 4).  It covers max_size, past
 * the file's end: those pages cost nothing until the file grows under them
 * (invariant 5). */
static int seg_map(pdshm_seg *seg, size_t size, uint64_t end, int prot) {
  void *p = mmap(NULL, size, prot, MAP_SHARED | MAP_NORESERVE, seg->fd, 0);
  if (p == MAP_FAILED) return pdshm__fail(-errno, "mmap of %zu bytes: %s", size, strerror(errno));
  if (madvise(p, size, MADV_DONTFORK) < 0) {
    int err = errno;
    munmap(p, size);
    return pdshm__fail(-err, "madvise(MADV_DONTFORK): %s", strerror(err));
  }
  seg->base = p;
  seg->hdr = p;
  seg->size = size;
  atomic_store(&seg->end, end);
  seg->mapped = true;
  return 0;
}

/* ---- OFD byte locks ------------------------------------------------------------ */

static int seg_ofd(int fd, int cmd, short type, off_t byte) {
  struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1};
  return fcntl(fd, cmd, &fl);
}

/* Waits (bounded) while a creator holds the init lock. */
static void seg_wait_creator(int fd) {
  for (int ms = 0; ms < SEG_INIT_WAIT_MS; ms++) {
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = PDSHM_OFD_INIT,
                       .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &fl) < 0 || fl.l_type == F_UNLCK) return;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
}

/* ---- create ------------------------------------------------------------------------ */

static int seg_reserve(int fd, uint64_t size) {
  int err = posix_fallocate(fd, 0, (off_t)size);
  if (!err) return 0;
  if (err == ENOSPC || err == EFBIG) return pdshm__shmfs_full(fd, size);
  return pdshm__fail(-err, "posix_fallocate: %s", strerror(err));
}

static void seg_init_header(pdshm_seg *seg, const struct seg_geometry *g) {
  struct pdshm_hdr *h = seg->hdr;
  h->layout_version = PDSHM_LAYOUT_VERSION;
  h->hdr_bytes = sizeof *h;
  h->fingerprint = pdshm__layout_fingerprint();
  h->size = g->size;
  h->max_procs = g->max_procs;
  h->max_locks = g->max_locks;
  h->page_size = (uint32_t)sysconf(_SC_PAGESIZE);
  h->creator_uid = (uint32_t)geteuid();
  h->creator_pid = (uint32_t)getpid();
  h->slots_off = g->slots_off;
  h->locks_off = g->locks_off;
  h->arena_off = g->arena_off;
  h->arena_end = g->size;
  h->max_size = g->max_size;
  h->created_ns = pdshm__now_ns(CLOCK_REALTIME);
  atomic_store(&h->id_counter, 1);
}

/* Everything but the magic; the caller stores the magic last. */
static int seg_build(pdshm_seg *seg, const struct seg_geometry *g) {
  int rc = seg_reserve(seg->fd, g->size);
  if (rc) return rc;
  if ((rc = seg_map(seg, g->max_size, g->size, PROT_READ | PROT_WRITE))) return rc;
  seg_init_header(seg, g);
  pdshm__lock_init_table(seg);
  pdshm__heap_init(seg);
  int rc2 = pdshm__reap_claim_own(seg);
  return rc2 ? rc2 : pdshm__scope_init_root(seg);
}

static void seg_publish_magic(struct pdshm_hdr *h) {
  uint64_t magic;
  memcpy(&magic, PDSHM_MAGIC, sizeof magic);
  __atomic_store_n((uint64_t *)(void *)h->magic, magic, __ATOMIC_RELEASE);
}

PDSHM_API int pdshm_create(const char *name, const pdshm_options *o, pdshm_seg **out) {
  char path[PDSHM_SEG_NAME_MAX + 16];
  struct seg_geometry g;
  unsigned mode;
  int rc;
  pdshm__fail_clear();
  if (!out) return pdshm__fail(PDSHM_EINVAL, "NULL out pointer");
  *out = NULL;
  if ((rc = seg_path(name, path, sizeof path)) || (rc = seg_options(o, &g, &mode))) return rc;
  pthread_once(&seg_once, seg_init_process);
  int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return pdshm__fail(-errno, "shm_open %s: %s", path, strerror(errno));
  pdshm_seg *seg = seg_handle_new(name, fd, 0);
  if (!seg) {
    rc = pdshm__fail(PDSHM_ENOMEM, "out of private memory");
    close(fd);
    goto fail_unlink;
  }
  if (seg_ofd(fd, F_OFD_SETLK, F_WRLCK, PDSHM_OFD_INIT) < 0 || fchmod(fd, mode) < 0) {
    rc = pdshm__fail(-errno, "preparing %s: %s", path, strerror(errno));
    goto fail;
  }
  if ((rc = seg_build(seg, &g))) goto fail;
  seg_publish_magic(seg->hdr);
  seg_ofd(fd, F_OFD_SETLK, F_UNLCK, PDSHM_OFD_INIT);
  pdshm__seg_list_add(seg);
  *out = seg;
  return 0;
fail:
  seg_handle_free(seg);
fail_unlink:
  shm_unlink(path);
  return rc;
}

/* ---- attach ------------------------------------------------------------------------ */

static int seg_check_owner(const struct stat *st, unsigned flags, const char *path) {
  if (flags & PDSHM_SHARED_USERS) return 0;
  if (st->st_uid != geteuid())
    return pdshm__fail(PDSHM_EACCES, "%s belongs to uid %u (pass PDSHM_SHARED_USERS to trust it)",
                       path, (unsigned)st->st_uid);
  if (st->st_mode & 022)
    return pdshm__fail(PDSHM_EACCES,
                       "%s is writable by group or others (mode %03o; pass PDSHM_SHARED_USERS)",
                       path, (unsigned)(st->st_mode & 0777));
  return 0;
}

/* Invariant 2: the header, as read from the file, describes this file. */
static int seg_validate(const struct pdshm_hdr *h, uint64_t file_size) {
  struct seg_geometry g;
  if (memcmp(h->magic, PDSHM_MAGIC, PDSHM_MAGIC_LEN))
    return pdshm__fail(PDSHM_EBADSEG, "no pdshm magic (not a segment, or its creator died)");
  if (h->layout_version != PDSHM_LAYOUT_VERSION || h->hdr_bytes != sizeof *h)
    return pdshm__fail(PDSHM_EBADSEG, "layout version %u, this library reads %u",
                       h->layout_version, PDSHM_LAYOUT_VERSION);
  if (h->fingerprint != pdshm__layout_fingerprint())
    return pdshm__fail(PDSHM_EBADSEG, "layout fingerprint differs (built with another ABI)");
  if (h->max_size > PDSHM_SIZE_MAX || h->max_size % PDSHM_REGION_ALIGN || h->max_size < h->size ||
      h->arena_end < h->size || h->arena_end > h->max_size || h->arena_end % PDSHM_ALIGN)
    return pdshm__fail(PDSHM_EBADSEG, "header says %llu bytes now, %llu at first, %llu at most",
                       (unsigned long long)h->arena_end, (unsigned long long)h->size,
                       (unsigned long long)h->max_size);
  if (file_size < h->arena_end || file_size > h->max_size)
    return pdshm__fail(PDSHM_EBADSEG, "header says %llu bytes (at most %llu), the file has %llu",
                       (unsigned long long)h->arena_end, (unsigned long long)h->max_size,
                       (unsigned long long)file_size);
  if (h->size % PDSHM_REGION_ALIGN || h->max_procs == 0 || h->max_procs > PDSHM_PROCS_MAX ||
      h->max_locks < PDSHM_LOCKS_MIN || h->max_locks > PDSHM_LOCKS_MAX ||
      seg_geometry(h->size, h->max_procs, h->max_locks, &g) || g.slots_off != h->slots_off ||
      g.locks_off != h->locks_off || g.arena_off != h->arena_off)
    return pdshm__fail(PDSHM_EBADSEG, "header geometry is inconsistent");
  if (h->page_size < 512 || h->page_size & (h->page_size - 1)) /* the heap divides by it */
    return pdshm__fail(PDSHM_EBADSEG, "header says pages of %u bytes", h->page_size);
  return 0;
}

static int seg_read_header(int fd, struct pdshm_hdr *h, struct stat *st) {
  for (int tries = 0;; tries++) {
    if (fstat(fd, st) < 0) return pdshm__fail(-errno, "fstat: %s", strerror(errno));
    if ((uint64_t)st->st_size >= sizeof *h) break;
    /* A creator that has opened the file but not yet locked it: give it time. */
    if (tries >= 100)
      return pdshm__fail(PDSHM_EBADSEG, "file has %lld bytes, less than a header",
                         (long long)st->st_size);
    nanosleep(&(struct timespec){0, 1000000}, NULL);
    seg_wait_creator(fd);
  }
  ssize_t n = pread(fd, h, sizeof *h, 0);
  if (n != (ssize_t)sizeof *h) return pdshm__fail(PDSHM_EIO, "short read of the header");
  return 0;
}

/* O_NONBLOCK: whatever sits at that name (a FIFO, say) must not block the
 * open; anything but a regular file is refused right after. */
static int seg_open_file(const char *path, unsigned flags) {
  int fd = shm_open(path, (flags & PDSHM_RDONLY ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK, 0);
  if (fd < 0 && errno == ELOOP) /* shm_open follows no symbolic link */
    return pdshm__fail(PDSHM_EBADSEG, "%s is a symbolic link", path);
  if (fd < 0) return pdshm__fail(-errno, "shm_open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return pdshm__fail(PDSHM_EBADSEG, "%s is not a regular file", path);
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

static int seg_open_existing(const char *path, unsigned flags, struct pdshm_hdr *hp, int *fdp) {
  int fd = seg_open_file(path, flags);
  if (fd < 0) return fd;
  seg_wait_creator(fd);
  struct stat st;
  struct pdshm_hdr h;
  int rc = seg_read_header(fd, &h, &st);
  if (!rc) rc = seg_check_owner(&st, flags, path);
  if (!rc) rc = seg_validate(&h, (uint64_t)st.st_size);
  *hp = h;
  if (rc) {
    close(fd);
    return rc;
  }
  *fdp = fd;
  return 0;
}

PDSHM_API int pdshm_attach(const char *name, const pdshm_options *o, pdshm_seg **out) {
  char path[PDSHM_SEG_NAME_MAX + 16];
  struct pdshm_hdr h;
  int fd = -1, rc;
  pdshm__fail_clear();
  if (!out) return pdshm__fail(PDSHM_EINVAL, "NULL out pointer");
  *out = NULL;
  unsigned flags = o ? o->flags : 0;
  if (flags & ~(PDSHM_RDONLY | PDSHM_SHARED_USERS))
    return pdshm__fail(PDSHM_EINVAL, "unknown attach flags %#x", flags);
  if ((rc = seg_path(name, path, sizeof path))) return rc;
  pthread_once(&seg_once, seg_init_process);
  if ((rc = seg_open_existing(path, flags, &h, &fd))) return rc;
  pdshm_seg *seg = seg_handle_new(name, fd, flags);
  if (!seg) {
    close(fd);
    return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  }
  int prot = flags & PDSHM_RDONLY ? PROT_READ : PROT_READ | PROT_WRITE;
  rc = seg_map(seg, (size_t)h.max_size, h.arena_end, prot);
  if (!rc && !(flags & PDSHM_RDONLY)) rc = pdshm__reap_claim_own(seg);
  if (rc) {
    seg_handle_free(seg);
    return rc;
  }
  pdshm__seg_list_add(seg);
  *out = seg;
  return 0;
}

/* ---- detach, unlink ---------------------------------------------------------------- */

PDSHM_API int pdshm_detach(pdshm_seg *seg) {
  if (!seg) return pdshm__fail(PDSHM_EINVAL, "NULL segment handle");
  pdshm__fail_clear();
  int rc = pdshm__seg_usable(seg);
  pdshm__seg_list_remove(seg);
  /* In a fork child the slot is the parent's: touch nothing, unmap the range
   * and free the copy. */
  if (!rc) pdshm__daemon_drop(seg);
  bool left = pdshm__group_leave_all(seg);
  pdshm__pin_drop_all(seg);
  if (!rc && seg->slot != PDSHM_NOSLOT) {
    if (left) rc = pdshm__reap_release_own(seg);
    else /* a seat only the reaper can give up now (group.c, invariant 5): the slot stays
            LIVE, and is dead once seg_handle_free closes the file that holds its lock */
      rc = pdshm__fail(PDSHM_ETIMEDOUT, "a group's rank could not be given up (the groups "
                       "lock stayed held for 1 s: its holder stopped?); the slot is left to "
                       "the reaper, as a dead process's");
  }
  pdshm__scope_free_handles(seg);
  seg_handle_free(seg);
  return rc;
}

PDSHM_API int pdshm_unlink(const char *name) {
  char path[PDSHM_SEG_NAME_MAX + 16];
  pdshm__fail_clear();
  int rc = seg_path(name, path, sizeof path);
  if (rc) return rc;
  if (shm_unlink(path) < 0) return pdshm__fail(-errno, "shm_unlink %s: %s", path, strerror(errno));
  return 0;
}
