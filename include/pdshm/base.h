/* pdshm/base.h - what every pdshm header shares: the system headers and PDSHM_API. */
#ifndef PDSHM_BASE_H
#define PDSHM_BASE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(PDSHM_BUILDING) && defined(__GNUC__)
#define PDSHM_API __attribute__((visibility("default")))
#else
#define PDSHM_API
#endif

#endif /* PDSHM_BASE_H */
