/* Validation of a memory layout (pointer, shape, strides, element size).
 * Pure C: no BEAM, no libtorch; unit-tested in c_test/ and fuzzed. */
#ifndef TB_LAYOUT_H
#define TB_LAYOUT_H

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
    TB_LAYOUT_OK = 0,
    TB_LAYOUT_TOO_MANY_DIMS,
    TB_LAYOUT_NEGATIVE_DIM,
    TB_LAYOUT_NUMEL_OVERFLOW,
    TB_LAYOUT_NEGATIVE_STRIDE,
    TB_LAYOUT_EXTENT_OVERFLOW,
    TB_LAYOUT_NULL_POINTER,
    TB_LAYOUT_MISALIGNED,
    TB_LAYOUT_PTR_OVERFLOW, /* ptr + the extent wraps past the address space */
    /* numel * element_size overflows int64: no tensor of it can say its
     * size (libtorch's nbytes, a binary of its elements) */
    TB_LAYOUT_BYTES_OVERFLOW
} tb_layout_status;
#define TB_LAYOUT_LAST_STATUS TB_LAYOUT_BYTES_OVERFLOW

typedef struct {
    tb_layout_status status;
    int dim; /* the offending dimension, or -1 */
    int64_t numel;
    uint64_t byte_size; /* bytes from ptr to one past the farthest element */
    /* The same, counting dimensions of size 0 as if they held one element:
     * what a slice of an empty layout may still address. Equals byte_size
     * when there are elements; 0 when no stride can move the pointer. */
    uint64_t reach;
} tb_layout_result;

/* Fills strides with row-major (C-contiguous) element strides; as libtorch
 * does, a dimension of size 0 or 1 counts as size 1. Returns 0 on overflow,
 * with every stride still written (INT64_MAX past the overflow). */
int tb_row_major_strides(int ndim, const int64_t *shape, int64_t *strides);

/* Checks shape, strides, pointer and alignment, and computes numel and the
 * byte extent. A zero-element layout may have a null pointer. */
tb_layout_result tb_layout_check(const tb_layout *layout);

/* The byte_size tb_layout_check computes, for a layout it accepted or one
 * libtorch made: no check, no copy into a tb_layout (to_blob's path). */
uint64_t tb_layout_byte_size(int ndim, const int64_t *shape, const int64_t *strides, size_t element_size);

/* 1 when [ptr, ptr + size) lies inside [base, base + base_size). */
int tb_extent_inside(uint64_t ptr, uint64_t size, uint64_t base, uint64_t base_size);

/* The largest power of two dividing ptr, at most TB_MAX_ALIGNMENT (also
 * for a null pointer): what blobs report as alignment. */
#define TB_MAX_ALIGNMENT 4096
uint64_t tb_pointer_alignment(uint64_t ptr);

/* n % element_size == 0, without a division for the power-of-two sizes
 * every dtype has. */
static inline int tb_multiple_of_element(uint64_t n, unsigned element_size)
{
    return (element_size & (element_size - 1)) == 0 ? (n & (element_size - 1)) == 0 : n % element_size == 0;
}

/* A short phrase for a status, for error messages. */
const char *tb_layout_status_text(tb_layout_status status);

#endif
