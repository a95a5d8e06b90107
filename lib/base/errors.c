/* errors.c - the names and messages of PDSHM_E* codes, from one X-macro list. */
#define PDSHM_LAYER 1 /* base/ (lib/LAYERS) */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "base/base.h"

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
 * the thread's block (thread.c) when pdshm__errors_state says so, which is
 * read only while that block exists, so a thread's exit needs nothing from
 * this file. */
enum errors_state {
  ERRORS_NONE = 0,  /* the last call did not fail (pdshm__fail_clear)      */
  ERRORS_DETAIL,    /* pdshm__self->error says why                         */
  ERRORS_NOMEM      /* it failed, and its detail had no memory to go in    */
};
PDSHM_TLS_HOT unsigned char pdshm__errors_state; /* base.h */

PDSHM_API const char *pdshm_last_error(void) {
  if (pdshm__errors_state == ERRORS_DETAIL && pdshm__self) return pdshm__self->error;
  if (pdshm__errors_state == ERRORS_NOMEM) return "(out of memory for this error's detail)";
  return "";
}

int pdshm__fail(int err, const char *fmt, ...) {
  struct pdshm_thread *t = pdshm__thread();
  if (!t) {
    pdshm__errors_state = ERRORS_NOMEM;
    return err;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->error, sizeof t->error, fmt, ap);
  va_end(ap);
  pdshm__errors_state = ERRORS_DETAIL;
  return err;
}
