/*
 * pdshm.h - PaddlePaddle's Scope / Variable / Tensor model in one POSIX
 * shared-memory segment, shared by the processes of one host.
 *
 * This is the header to include; it includes one header per topic from
 * pdshm/, installed beside it.  Every type is opaque but the options and
 * statistics structs.  Functions that can fail return 0 or a negative PDSHM_E*
 * code (-errno where one fits); unless a function says otherwise, a failure
 * changes nothing.  Lookups that can only fail by absence return a pointer or
 * NULL.  The library never prints and never exits.
 *
 * Errors every function may return besides those it lists:
 *  - EINVAL for a NULL handle, variable or out pointer, or a variable that is
 *    in no attachment of this process;
 *  - EFORKED for a handle inherited across fork() (see below);
 *  - when it changes the segment: EROFS on a read-only attachment,
 *    ENOTRECOVERABLE once the segment is poisoned (a repair after a process
 *    death failed; it stays so until unlinked);
 *  - when it allocates in the segment: ENOMEM when nothing fits even after
 *    freeing the blocks cached by this process and by dead ones and growing
 *    the segment up to its max_size, ENOSPC when /dev/shm cannot hold the
 *    bytes a growth adds or back pages that had been given back to it,
 *    EBADSEG when a growth finds the segment's size or its block chain
 *    damaged, ENOLCK when a new scope or a variable's first lock finds no
 *    free lock-table entry.
 * pdshm_last_error() says more about each of them.
 *
 * Threads: every function is safe to call from several threads at once.
 * fork(): a child does not inherit attachments.  Every call on a segment handle
 * (or anything obtained through it: scopes, variables) made in the child fails
 * with PDSHM_EFORKED, or returns NULL / 0 / "" with pdshm_last_error() saying
 * why, and touches nothing; the child attaches again if it needs to.  The
 * child does keep the parent's address range of each attachment mapped (the
 * same file, read-write, shared, through a descriptor of its own, so that the
 * parent's death still frees the parent's slot): pointers taken before the
 * fork, such as pdshm_tensor_data's, stay valid and see every process's
 * writes.  That memory is freed by the segment's usual rules, not held for
 * the child: the child pins what it keeps using (pdshm_pin_inherit).
 *
 * Loading: libpdshm links no allocator (its private memory is the process's
 * malloc) and uses a few dozen bytes of static TLS, so it may be loaded with
 * dlopen() into any process (Python's ctypes, a plugin host).
 */
#ifndef PDSHM_H
#define PDSHM_H

#include "pdshm/base.h"
#include "pdshm/limits.h"
#include "pdshm/errors.h"
#include "pdshm/segment.h"
#include "pdshm/daemon.h"
#include "pdshm/scope.h"
#include "pdshm/variable.h"
#include "pdshm/group.h"
#include "pdshm/tensor.h"
#include "pdshm/pin.h"
#include "pdshm/stats.h"
#include "pdshm/inspect.h"

#endif /* PDSHM_H */
