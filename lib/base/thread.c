/*
 * thread.c - each thread's private block (struct pdshm_thread): what is too
 * big for the static TLS block (base.h, PDSHM_TLS_HOT).
 *
 * Invariants:
 *  1. pdshm__self is NULL or the calling thread's block, which came from
 *     malloc and is the value of thread_key for that thread.
 *  2. A thread's block goes when the thread exits (the key's destructor), and
 *     pdshm__self with it; first pdshm__thread_exit_hook, once set, lets go
 *     of what the thread still holds and keeps (varlock.c).  A fork child's thread keeps its parent thread's
 *     block: the memory and the thread-local are copied by fork().
 *  3. The library is never unloaded (linked -z nodelete), so the destructor
 *     is still mapped when a thread exits after a dlclose().
 */
#define PDSHM_LAYER 1 /* base/ (lib/LAYERS) */
#include "config.h"

#include "base/base.h"

PDSHM_TLS_HOT struct pdshm_thread *pdshm__self;

static pthread_key_t thread_key;
static pthread_once_t thread_once = PTHREAD_ONCE_INIT;
static bool thread_key_made;

void (*_Atomic pdshm__thread_exit_hook)(struct pdshm_thread *t);

static void thread_exit(void *p) {
  void (*hook)(struct pdshm_thread *) = atomic_load(&pdshm__thread_exit_hook);
  if (hook) hook(p);
  pdshm__self = NULL; /* pdshm_last_error() reads no detail from here on */
  free(p);
}

static void thread_key_make(void) { thread_key_made = pthread_key_create(&thread_key, thread_exit) == 0; }

struct pdshm_thread *pdshm__thread_make(void) {
  pthread_once(&thread_once, thread_key_make);
  if (!thread_key_made) return NULL;
  struct pdshm_thread *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  if (pthread_setspecific(thread_key, t)) {
    free(t);
    return NULL;
  }
  return pdshm__self = t;
}
