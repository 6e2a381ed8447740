#include "tb_layout.h"

int tb_row_major_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    /* Every stride is written, even past an overflow (saturated): a caller
     * that goes on to check the layout never reads an unset one. */
    int64_t step = 1;
    int ok = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = step;
        int64_t n = shape[i] > 1 ? shape[i] : 1;
        if (ok && __builtin_mul_overflow(step, n, &step))
            ok = 0;
        if (!ok)
            step = INT64_MAX;
    }
    return ok;
}

uint64_t tb_layout_byte_size(int ndim, const int64_t *shape, const int64_t *strides, size_t element_size)
{
    uint64_t last = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0)
            return 0;
        last += (uint64_t)(shape[i] - 1) * (uint64_t)strides[i];
    }
    return (last + 1) * element_size;
}

/* ndim in range; every size and stride non-negative. */
static int check_signs(const tb_layout *l, tb_layout_result *r)
{
    if (l->ndim < 0 || l->ndim > TB_MAX_DIMS) {
        r->status = TB_LAYOUT_TOO_MANY_DIMS;
        return 0;
    }
    for (int i = 0; i < l->ndim; i++) {
        if (l->shape[i] < 0) {
            r->status = TB_LAYOUT_NEGATIVE_DIM;
            r->dim = i;
            return 0;
        }
        if (l->strides[i] < 0) {
            r->status = TB_LAYOUT_NEGATIVE_STRIDE;
            r->dim = i;
            return 0;
        }
    }
    return 1;
}

/* numel: a zero anywhere makes it 0, but an overflow in the other
 * dimensions is still refused: the shape is nonsense either way. */
static int count_elements(const tb_layout *l, tb_layout_result *r)
{
    int64_t numel = 1;
    int has_zero = 0;
    for (int i = 0; i < l->ndim; i++) {
        if (l->shape[i] == 0) {
            has_zero = 1;
            continue;
        }
        if (__builtin_mul_overflow(numel, l->shape[i], &numel)) {
            r->status = TB_LAYOUT_NUMEL_OVERFLOW;
            r->dim = i;
            return 0;
        }
    }
    r->numel = has_zero ? 0 : numel;
    return 1;
}

/* Offset of the farthest element, in elements, then in bytes (*bytes). A
 * dimension of size 0 holds nothing, but a slice of the other dimensions
 * still moves the pointer by their strides: those are checked for
 * overflow even when there are no elements. */
static int measure_extent(const tb_layout *l, tb_layout_result *r, int64_t *bytes)
{
    int64_t last = 0;
    for (int i = 0; i < l->ndim; i++) {
        int64_t reach;
        if (l->shape[i] == 0)
            continue;
        if (__builtin_mul_overflow(l->shape[i] - 1, l->strides[i], &reach) ||
            __builtin_add_overflow(last, reach, &last)) {
            r->status = TB_LAYOUT_EXTENT_OVERFLOW;
            r->dim = i;
            return 0;
        }
    }
    *bytes = 0;
    if ((r->numel > 0 || last > 0) &&
        (__builtin_add_overflow(last, 1, bytes) || __builtin_mul_overflow(*bytes, (int64_t)l->element_size, bytes))) {
        r->status = TB_LAYOUT_EXTENT_OVERFLOW;
        return 0;
    }
    return 1;
}

/* Where the memory lies: inside the address space, not at NULL when it
 * holds elements, aligned to the element size. */
static tb_layout_status pointer_status(const tb_layout *l, const tb_layout_result *r)
{
    uint64_t end;
    if (__builtin_add_overflow(l->ptr, r->reach, &end))
        return TB_LAYOUT_PTR_OVERFLOW;
    if (r->numel > 0 && l->ptr == 0)
        return TB_LAYOUT_NULL_POINTER;
    if (l->element_size > 1 && !tb_multiple_of_element(l->ptr, l->element_size))
        return TB_LAYOUT_MISALIGNED;
    return TB_LAYOUT_OK;
}

tb_layout_result tb_layout_check(const tb_layout *l)
{
    tb_layout_result r = {TB_LAYOUT_OK, -1, 1, 0, 0};
    int64_t bytes;
    if (!check_signs(l, &r) || !count_elements(l, &r) || !measure_extent(l, &r, &bytes))
        return r;
    /* Strides of 0 let a huge count of elements live in a few bytes, but
     * every copy of them, and libtorch's own byte count, needs this. */
    int64_t dense_bytes;
    if (__builtin_mul_overflow(r.numel, (int64_t)l->element_size, &dense_bytes)) {
        r.status = TB_LAYOUT_BYTES_OVERFLOW;
        return r;
    }
    r.reach = (uint64_t)bytes;
    r.byte_size = r.numel > 0 ? (uint64_t)bytes : 0;
    r.status = pointer_status(l, &r);
    return r;
}

uint64_t tb_pointer_alignment(uint64_t ptr)
{
    uint64_t lowest_bit = ptr & (~ptr + 1);
    return ptr == 0 || lowest_bit > TB_MAX_ALIGNMENT ? TB_MAX_ALIGNMENT : lowest_bit;
}

int tb_extent_inside(uint64_t ptr, uint64_t size, uint64_t base, uint64_t base_size)
{
    if (ptr < base)
        return 0;
    uint64_t offset = ptr - base;
    return offset <= base_size && size <= base_size - offset;
}

const char *tb_layout_status_text(tb_layout_status status)
{
    switch (status) {
    case TB_LAYOUT_OK: return "ok";
    case TB_LAYOUT_TOO_MANY_DIMS: return "too many dimensions (at most 64)";
    case TB_LAYOUT_NEGATIVE_DIM: return "dimensions must be non-negative";
    case TB_LAYOUT_NUMEL_OVERFLOW: return "the number of elements overflows 64 bits";
    case TB_LAYOUT_NEGATIVE_STRIDE: return "strides must be non-negative";
    case TB_LAYOUT_EXTENT_OVERFLOW: return "the byte extent overflows 64 bits";
    case TB_LAYOUT_NULL_POINTER: return "a null pointer cannot hold elements";
    case TB_LAYOUT_MISALIGNED: return "the pointer is not aligned to the element size";
    case TB_LAYOUT_PTR_OVERFLOW: return "the memory would wrap past the end of the address space";
    case TB_LAYOUT_BYTES_OVERFLOW:
        return "the byte size of the elements (their number times the element size) overflows 64 bits";
    }
    return "invalid layout";
}
