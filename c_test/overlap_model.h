/* The brute-force model of tb_layout_overlap (c_src/core/tb_overlap.h),
 * shared by its unit test and its fuzz harness: every element's offset,
 * listed, sorted and compared. For small layouts only. */
#ifndef TB_OVERLAP_MODEL_H
#define TB_OVERLAP_MODEL_H

#include <stdint.h>
#include <stdlib.h>

#ifndef MODEL_MAX_ELEMENTS
#define MODEL_MAX_ELEMENTS 65536
#endif

static int model_compare(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* 1 when two indices address one element, 0 when none do, -1 when the
 * layout has more than MODEL_MAX_ELEMENTS elements (not modelled).
 * Shapes and strides are non-negative, offsets small enough for int64. */
static int model_overlap(int ndim, const int64_t *shape, const int64_t *strides)
{
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0)
            return 0;
        if (shape[i] > MODEL_MAX_ELEMENTS || (numel *= shape[i]) > MODEL_MAX_ELEMENTS)
            return -1;
    }
    static int64_t offsets[MODEL_MAX_ELEMENTS];
    int64_t index[64] = {0};
    for (int64_t e = 0; e < numel; e++) {
        int64_t off = 0;
        for (int i = 0; i < ndim; i++)
            off += index[i] * strides[i];
        offsets[e] = off;
        for (int i = ndim - 1; i >= 0; i--) { /* the next index, row-major */
            if (++index[i] < shape[i])
                break;
            index[i] = 0;
        }
    }
    qsort(offsets, (size_t)numel, sizeof offsets[0], model_compare);
    for (int64_t e = 1; e < numel; e++)
        if (offsets[e] == offsets[e - 1])
            return 1;
    return 0;
}

#endif
