/*
 * fold.h - the element-wise folds of the SlotReducer (slots.c): its ops,
 * the element kinds it takes, and the fold in rank order (fold.c).
 */
#ifndef PDSHMPY_FOLD_H
#define PDSHMPY_FOLD_H

#include <stddef.h>

enum op { OP_SUM, OP_MEAN, OP_PRODUCT, OP_MIN, OP_MAX, OP_BAND, OP_BOR, OP_BXOR, OP_COUNT };
enum kind { K_I8, K_I16, K_I32, K_I64, K_U8, K_F16, K_BF16, K_F32, K_F64, K_C64, K_C128, K_COUNT };

extern const char *const pdshmpy_op_names[OP_COUNT];    /* "sum", ...      */
extern const char *const pdshmpy_kind_names[K_COUNT];   /* "int8", ...     */
extern const unsigned pdshmpy_kind_sizes[K_COUNT];      /* bytes           */

/* out[0..count) := p[0] op p[1] op ... op p[n-1] (element-wise, in that
 * order; out may be none of the parts).  Integers wrap (sums and products
 * computed unsigned) and their mean truncates; float min and max propagate
 * NaN; float16 and bfloat16 are folded in float32 and rounded once; complex
 * takes sum, mean and product.  n == 1 copies p[0]. */
void pdshmpy_fold(enum kind kind, void *out, const void *const *p, int n, size_t count,
                  enum op op);
/* Whether pdshmpy_fold defines op for kind. */
int pdshmpy_fold_defined(enum kind kind, enum op op);

#endif /* PDSHMPY_FOLD_H */
