/*
 * peer_mutex.c - the plain alternatives for the lock scenarios, each with its
 * counter in a shared anonymous mapping made before the fork:
 *  mutex   one robust, process-shared pthread mutex; shared and exclusive
 *          takes are the same exclusive lock (glibc has no robust
 *          reader-writer lock);
 *  rwlock  one process-shared pthread reader-writer lock: shared takes are
 *          shared, but it is not robust (a holder that dies leaves it taken
 *          for good), so it does less than pdshm's lock or the mutex.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"

struct hot {
  pthread_mutex_t mu;          /* robust, process-shared                    */
  unsigned long long counter;  /* what the lock protects                    */
};

static void *mu_open(const char *tag, void *made) {
  if (made) return made; /* inherited across fork */
  struct hot *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (h == MAP_FAILED) return NULL;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(&h->mu, &a);
  pthread_mutexattr_destroy(&a);
  if (rc) bench_die("pthread_mutex_init: %s", strerror(rc));
  h->counter = 0;
  return h;
}

static void mu_lock(void *ctx, bool exclusive) {
  struct hot *h = ctx;
  int rc = pthread_mutex_lock(&h->mu);
  if (rc == EOWNERDEAD) rc = pthread_mutex_consistent(&h->mu);
  if (rc) bench_die("pthread_mutex_lock: %s", strerror(rc));
}

static void mu_unlock(void *ctx) { pthread_mutex_unlock(&((struct hot *)ctx)->mu); }
static unsigned long long *mu_counter(void *ctx) { return &((struct hot *)ctx)->counter; }

static void mu_close(void *ctx, bool destroy) {
  if (!destroy) return;
  pthread_mutex_destroy(&((struct hot *)ctx)->mu);
  munmap(ctx, sizeof(struct hot));
}

const struct lock_ops lock_mutex = {.name = "mutex", .open = mu_open, .lock = mu_lock,
                                    .unlock = mu_unlock, .counter = mu_counter, .close = mu_close};

struct hot_rw {
  pthread_rwlock_t rw;         /* process-shared, not robust                */
  unsigned long long counter;  /* what the lock protects                    */
};

static void *rw_open(const char *tag, void *made) {
  if (made) return made; /* inherited across fork */
  struct hot_rw *h =
      mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (h == MAP_FAILED) return NULL;
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  int rc = pthread_rwlock_init(&h->rw, &a);
  pthread_rwlockattr_destroy(&a);
  if (rc) bench_die("pthread_rwlock_init: %s", strerror(rc));
  h->counter = 0;
  return h;
}

static void rw_lock(void *ctx, bool exclusive) {
  struct hot_rw *h = ctx;
  int rc = exclusive ? pthread_rwlock_wrlock(&h->rw) : pthread_rwlock_rdlock(&h->rw);
  if (rc) bench_die("pthread_rwlock_%slock: %s", exclusive ? "wr" : "rd", strerror(rc));
}

static void rw_unlock(void *ctx) { pthread_rwlock_unlock(&((struct hot_rw *)ctx)->rw); }
static unsigned long long *rw_counter(void *ctx) { return &((struct hot_rw *)ctx)->counter; }

static void rw_close(void *ctx, bool destroy) {
  if (!destroy) return;
  pthread_rwlock_destroy(&((struct hot_rw *)ctx)->rw);
  munmap(ctx, sizeof(struct hot_rw));
}

const struct lock_ops lock_rwlock = {.name = "rwlock (not robust)", .open = rw_open,
                                     .lock = rw_lock, .unlock = rw_unlock,
                                     .counter = rw_counter, .close = rw_close};
