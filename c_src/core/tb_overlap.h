/* Whether a strided layout addresses one element from two indices (its
 * elements share memory): what a write through a view must know, since
 * which of two writes to one element wins is undefined. Pure C: no BEAM,
 * no libtorch; unit-tested against a brute-force model in c_test/ and
 * fuzzed against it in fuzz/.
 *
 * The question: is there a nonzero integer vector x, |x[i]| < shape[i],
 * with the sum of x[i] * strides[i] zero (two indices whose difference is
 * x)? In general a bounded knapsack: the answer is exact, and found at
 * once for the layouts views are made of (dense, permuted, sliced with
 * steps, broadcast, sliding windows) and for any two dimensions (one
 * linear equation in two unknowns, solved in closed form); any other is
 * searched exhaustively, the two smallest strides solved so at each leaf,
 * under a bound on the work, and past the bound the answer is "unknown",
 * never "none". */
#ifndef TB_OVERLAP_H
#define TB_OVERLAP_H

#include <stdint.h>

typedef enum {
    TB_OVERLAP_NONE = 0, /* no two indices address one element */
    TB_OVERLAP_YES,      /* two indices do */
    TB_OVERLAP_UNKNOWN   /* the search was cut at its bound (or the layout is not one tb_layout_check accepts) */
} tb_overlap;

/* The bound write! gives the search: steps of a few nanoseconds each, so
 * a refusal for want of an answer costs well under a millisecond. */
#define TB_OVERLAP_WORK 100000L

/* The answer for a layout of ndim (0..TB_MAX_DIMS) dimensions, with
 * non-negative shape and strides whose extent (the sum of (shape[i] - 1) *
 * strides[i]) fits in int64, as tb_layout_check accepts. max_work bounds
 * the search (a count of candidate steps). */
tb_overlap tb_layout_overlap(int ndim, const int64_t *shape, const int64_t *strides, long max_work);

#endif
