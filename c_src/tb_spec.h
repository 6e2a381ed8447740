/* Validation of a memory layout (pointer, shape, strides, element size).
 * Pure C: no BEAM, no libtorch; unit-tested in c_test/ and fuzzed. */
#ifndef TB_SPEC_H
#define TB_SPEC_H

#include <stddef.h>
#include <stdint.h>

#define TB_MAX_DIMS 64

typedef struct {
    uint64_t ptr;
    size_t element_size;
    int ndim;
    int64_t shape[TB_MAX_DIMS];
    int64_t strides[TB_MAX_DIMS]; /* in elements */
} tb_layout;

typedef enum {
    TB_SPEC_OK = 0,
    TB_SPEC_TOO_MANY_DIMS,
    TB_SPEC_NEGATIVE_DIM,
    TB_SPEC_NUMEL_OVERFLOW,
    TB_SPEC_NEGATIVE_STRIDE,
    TB_SPEC_EXTENT_OVERFLOW,
    TB_SPEC_NULL_POINTER,
    TB_SPEC_MISALIGNED
} tb_spec_status;

typedef struct {
    tb_spec_status status;
    int dim;            /* the offending dimension, or -1 */
    int64_t numel;
    uint64_t byte_size; /* bytes from ptr to one past the farthest element */
} tb_spec_result;

/* Fills strides with row-major (C-contiguous) element strides; as libtorch
 * does, a dimension of size 0 or 1 counts as size 1. Returns 0 on overflow. */
int tb_row_major_strides(int ndim, const int64_t *shape, int64_t *strides);

/* Checks shape, strides, pointer and alignment, and computes numel and the
 * byte extent. A zero-element layout may have a null pointer. */
tb_spec_result tb_layout_check(const tb_layout *layout);

/* 1 when [ptr, ptr + size) lies inside [base, base + base_size). */
int tb_extent_inside(uint64_t ptr, uint64_t size, uint64_t base, uint64_t base_size);

/* The largest power of two dividing ptr, at most TB_MAX_ALIGNMENT (also
 * for a null pointer): what blobs report as alignment. */
#define TB_MAX_ALIGNMENT 4096
uint64_t tb_pointer_alignment(uint64_t ptr);

/* A short phrase for a status, for error messages. */
const char *tb_spec_status_text(tb_spec_status status);

#endif
