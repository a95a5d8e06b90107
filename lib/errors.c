/* errors.c - the names and messages of PDSHM_E* codes, from one X-macro list. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

PDSHM_API const char *pdshm_strerror(int err) {
  switch (err) {
  case 0: return "success";
#define PDSHM__ERR_MSG(name, value, msg) case (value): return msg;
    PDSHM_ERRNO_MAP(PDSHM__ERR_MSG)
#undef PDSHM__ERR_MSG
  default: return "unknown error";
  }
}

PDSHM_API const char *pdshm_err_name(int err) {
  switch (err) {
  case 0: return "PDSHM_OK";
#define PDSHM__ERR_NAME(name, value, msg) case (value): return "PDSHM_" #name;
    PDSHM_ERRNO_MAP(PDSHM__ERR_NAME)
#undef PDSHM__ERR_NAME
  default: return "PDSHM_E?";
  }
}

/* The detail of the last failure, per thread (the library never prints): in
 * the thread's block (thread.c), or this constant when that could not be
 * made.  NULL when the last call did not fail. */
static const char errors_nomem[] = "(out of memory for this error's detail)";
static PDSHM_TLS_HOT const char *errors_last;

PDSHM_API const char *pdshm_last_error(void) { return errors_last ? errors_last : ""; }

void pdshm__fail_clear(void) { errors_last = NULL; }

int pdshm__fail(int err, const char *fmt, ...) {
  struct pdshm_thread *t = pdshm__thread();
  if (!t) {
    errors_last = errors_nomem;
    return err;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->error, sizeof t->error, fmt, ap);
  va_end(ap);
  errors_last = t->error;
  return err;
}
