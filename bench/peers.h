/* peers.h - the alternatives pdshm is measured against, behind a C interface. */
#ifndef PDSHM_BENCH_PEERS_H
#define PDSHM_BENCH_PEERS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A Paddle-style in-process scope (peer_paddle.cc). */
void *pp_scope_new(void *parent);
void pp_scope_delete(void *s);
void *pp_var(void *s, const char *name);  /* get or create */
void *pp_find(void *s, const char *name); /* up the parent chain */
void pp_erase(void *s, const char *name);
void *pp_resize(void *var, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
