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

/* The detail of the last failure, per thread (the library never prints). */
static _Thread_local char errors_detail[256];
static PDSHM_TLS_HOT bool errors_set; /* errors_detail is the last failure's */

PDSHM_API const char *pdshm_last_error(void) { return errors_set ? errors_detail : ""; }

void pdshm__fail_clear(void) { errors_set = false; }

int pdshm__fail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errors_detail, sizeof errors_detail, fmt, ap);
  errors_set = true;
  va_end(ap);
  return err;
}
