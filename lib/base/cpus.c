/*
 * cpus.c - how many processors the machine has online, which a spin wait
 * asks: where waiters outnumber processors, spinning keeps the process
 * waited for off one, and yielding gives it one.
 */
#define PDSHM_LAYER 1 /* base/ (lib/LAYERS) */
#include "config.h"

#include <stdatomic.h>
#include <unistd.h>

#include "base/base.h"

long pdshm__cpus_online(void) {
  static _Atomic long cpus; /* 0 until asked; racing askers store the same */
  long n = atomic_load_explicit(&cpus, memory_order_relaxed);
  if (!n) {
    n = sysconf(_SC_NPROCESSORS_ONLN);
    n = n > 0 ? n : 1;
    atomic_store_explicit(&cpus, n, memory_order_relaxed);
  }
  return n;
}
