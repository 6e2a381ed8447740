/* libFuzzer harness for the pure-C layout validation (c_src/core/tb_layout.c).
 *
 *   clang-14 -fsanitize=fuzzer,address,undefined -Ic_src/core \
 *       fuzz/fuzz_layout.c c_src/core/tb_layout.c c_src/core/tb_dtype.c
 *
 * The input is decoded into a tb_layout: a dtype (its element size comes from
 * the dtype table), ndim, ptr, and one shape and stride value per dimension.
 * tb_layout_check is compared with an independent model written with 128-bit
 * arithmetic (status, offending dimension, numel, byte extent), and the
 * invariants of an accepted layout are asserted. tb_row_major_strides and
 * tb_extent_inside are checked against their own models. Any disagreement
 * prints what was decoded and calls abort(), which libFuzzer reports as a
 * crash and saves as an artifact.
 *
 * Input format (missing bytes read as zero):
 *   byte 0      dtype index (mod TB_DT_COUNT); bit 7 set: row-major strides
 *               from tb_row_major_strides instead of decoded ones
 *   byte 1      ndim, as a signed byte: -128..127 (only -2..66 are kept,
 *               folded into that range, so out-of-range ndim is tried too)
 *   byte 2      pointer mode (see read_ptr)
 *   then        the pointer's bytes, if the mode asks for them
 *   then        per dimension: a shape value and a stride value (read_value)
 *   then        4 values for a direct tb_extent_inside check
 */
#include "fuzz_reader.h"
#include "tb_dtype.h"
#include "tb_layout.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef __int128 i128;
typedef unsigned __int128 u128;

/* A 64-bit value: a mode byte picks a small value, an edge value or eight
 * raw bytes, so that both ordinary shapes and overflow edges are reached
 * without the fuzzer having to guess 8 bytes at a time. */
static int64_t read_value(reader *r)
{
    uint8_t m = read_byte(r);
    if (m < 0x80)
        return m & 0x0f; /* 0..15, most of the time */
    switch (m & 0x0f) {
    case 0: return -1;
    case 1: return INT64_MAX;
    case 2: return INT64_MIN;
    case 3: return INT64_C(1) << 62;
    case 4: return INT64_C(1) << 32;
    case 5: return (INT64_C(1) << 31) + 1;
    case 6: return INT64_MAX / 2 + 1;
    case 7: return INT64_MAX / 3;
    case 8: return -(int64_t)(m >> 4);
    case 9: return (int64_t)read_be(r, 4); /* 0..2^32-1 from 4 bytes */
    default: return (int64_t)read_le(r, 8);
    }
}

static uint64_t read_ptr(reader *r)
{
    uint8_t m = read_byte(r);
    switch (m & 7) {
    case 0: return 0;
    case 1: return 0x1000; /* aligned for every element size */
    case 2: return 0x1000 + (m >> 3); /* possibly misaligned */
    case 3: return UINT64_MAX - (m >> 3);
    case 4: return UINT64_C(1) << 63;
    default: return read_le(r, 8);
    }
}

static const tb_layout *g_layout;

static void dump_layout(const tb_layout *l)
{
    fprintf(stderr, "layout: ptr %" PRIu64 ", element_size %zu, ndim %d\n", l->ptr, l->element_size, l->ndim);
    for (int i = 0; i < l->ndim && i < TB_MAX_DIMS; i++)
        fprintf(stderr, "  dim %d: shape %" PRId64 ", stride %" PRId64 "\n", i, l->shape[i], l->strides[i]);
}

#define REQUIRE(cond)                                                                         \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "fuzz_layout: invariant violated: %s (%s:%d)\n", #cond, __FILE__, \
                    __LINE__);                                                                \
            if (g_layout)                                                                     \
                dump_layout(g_layout);                                                        \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

/* The model of tb_layout_check: what it must answer, worked out with
 * 128-bit integers and no early-overflow tricks. */
static tb_layout_result model_check(const tb_layout *l)
{
    tb_layout_result m = {TB_LAYOUT_OK, -1, 0, 0, 0};
    if (l->ndim < 0 || l->ndim > TB_MAX_DIMS) {
        m.status = TB_LAYOUT_TOO_MANY_DIMS;
        return m;
    }
    for (int i = 0; i < l->ndim; i++) {
        if (l->shape[i] < 0 || l->strides[i] < 0) {
            m.status = l->shape[i] < 0 ? TB_LAYOUT_NEGATIVE_DIM : TB_LAYOUT_NEGATIVE_STRIDE;
            m.dim = i;
            return m;
        }
    }
    /* Product of the non-zero dimensions; refused when it leaves int64 even
     * if another dimension is 0. The first dimension that takes it past is
     * the offending one (all factors are >= 1, so the running product only
     * grows). */
    i128 p = 1;
    int zero = 0;
    for (int i = 0; i < l->ndim; i++) {
        if (l->shape[i] == 0) {
            zero = 1;
            continue;
        }
        p *= l->shape[i]; /* < 2^63 * 2^63: fits */
        if (p > INT64_MAX) {
            m.status = TB_LAYOUT_NUMEL_OVERFLOW;
            m.dim = i;
            return m;
        }
    }
    m.numel = zero ? 0 : (int64_t)p;
    /* The farthest element's offset, in elements, over the dimensions that
     * hold something: checked even when another dimension is 0, since a
     * slice of those still moves the pointer by their strides. */
    i128 last = 0;
    for (int i = 0; i < l->ndim; i++) {
        if (l->shape[i] == 0)
            continue;
        i128 reach = (i128)(l->shape[i] - 1) * l->strides[i];
        last += reach; /* last <= INT64_MAX and reach < 2^126 here: fits */
        if (reach > INT64_MAX || last > INT64_MAX) {
            m.status = TB_LAYOUT_EXTENT_OVERFLOW;
            m.dim = i;
            return m;
        }
    }
    i128 bytes = (m.numel > 0 || last > 0) ? (last + 1) * (i128)l->element_size : 0;
    if (last + 1 > INT64_MAX || bytes > INT64_MAX) {
        m.status = TB_LAYOUT_EXTENT_OVERFLOW;
        return m;
    }
    /* The elements' byte count (numel x element size) must fit int64 too:
     * no tensor of them could say its size otherwise. */
    if ((i128)m.numel * (i128)l->element_size > INT64_MAX) {
        m.status = TB_LAYOUT_BYTES_OVERFLOW;
        return m;
    }
    m.reach = (uint64_t)bytes;
    m.byte_size = m.numel > 0 ? (uint64_t)bytes : 0;
    if ((u128)l->ptr + (u128)bytes > UINT64_MAX) {
        m.status = TB_LAYOUT_PTR_OVERFLOW;
        return m;
    }
    if (m.numel > 0 && l->ptr == 0) {
        m.status = TB_LAYOUT_NULL_POINTER;
        return m;
    }
    if (l->element_size > 1 && l->ptr % l->element_size != 0)
        m.status = TB_LAYOUT_MISALIGNED;
    return m;
}

/* The model of tb_extent_inside. */
static int model_inside(uint64_t ptr, uint64_t size, uint64_t base, uint64_t base_size)
{
    return ptr >= base && (u128)ptr + size <= (u128)base + base_size;
}

static void check_row_major(int ndim, const int64_t *shape)
{
    int64_t strides[TB_MAX_DIMS];
    int ok = tb_row_major_strides(ndim, shape, strides);
    /* Model: stride i is the product of max(shape j, 1) over j > i, and the
     * call fails when the product over all dimensions leaves int64. */
    i128 step = 1;
    int overflow = 0;
    for (int i = ndim - 1; i >= 0; i--) {
        if (!overflow)
            REQUIRE(!ok || strides[i] == (int64_t)step);
        step *= shape[i] > 1 ? shape[i] : 1;
        if (step > INT64_MAX) {
            overflow = 1;
            step = 1; /* keep the product bounded; only the flag matters now */
        }
    }
    REQUIRE(ok == !overflow);
    if (!ok)
        return;

    /* A row-major layout of a valid shape, at an aligned pointer, reaches
     * exactly numel elements, for every element size in the table; what a
     * slice of it may address counts a dimension of 0 as 1 (as its strides
     * do), and only that many bytes past int64 may refuse it. */
    u128 span = 1;
    for (int i = 0; i < ndim; i++)
        span *= (u128)(shape[i] > 1 ? shape[i] : 1); /* < 2^63: the strides fit */
    for (int d = 0; d < TB_DT_COUNT; d++) {
        tb_layout rm;
        rm.ptr = 0x10000;
        rm.element_size = tb_dtypes[d].element_size;
        rm.ndim = ndim;
        memcpy(rm.shape, shape, sizeof(int64_t) * (size_t)ndim);
        memcpy(rm.strides, strides, sizeof(int64_t) * (size_t)ndim);
        tb_layout_result r = tb_layout_check(&rm);
        if (r.status == TB_LAYOUT_OK) {
            REQUIRE((u128)r.byte_size == (u128)r.numel * rm.element_size);
            REQUIRE(r.reach == 0 || (u128)r.reach == span * rm.element_size);
        } else {
            REQUIRE(r.status == TB_LAYOUT_EXTENT_OVERFLOW);
            REQUIRE(span * rm.element_size > INT64_MAX);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader rd = {data, size, 0};
    uint8_t b0 = read_byte(&rd);
    int row_major = (b0 & 0x80) != 0;
    tb_dtype_id dtype = (tb_dtype_id)((b0 & 0x7f) % TB_DT_COUNT);
    int ndim = (int8_t)read_byte(&rd);
    /* Fold into -2..66: a few out-of-range counts, mostly valid ones. */
    ndim = ((ndim % 69) + 69) % 69 - 2;

    static tb_layout l; /* static: layouts are 1 KiB, keep the stack small */
    memset(&l, 0, sizeof l);
    g_layout = &l;
    l.element_size = tb_dtypes[dtype].element_size;
    l.ndim = ndim;
    l.ptr = read_ptr(&rd);
    int n = ndim < 0 ? 0 : ndim > TB_MAX_DIMS ? TB_MAX_DIMS : ndim;
    for (int i = 0; i < n; i++) {
        l.shape[i] = read_value(&rd);
        l.strides[i] = read_value(&rd);
    }

    int all_nonneg = 1;
    for (int i = 0; i < n; i++)
        all_nonneg &= l.shape[i] >= 0;

    /* tb_row_major_strides is defined for non-negative shapes of 0..64
     * dimensions; from_blob and from_binary call it only on those. */
    if (ndim >= 0 && ndim <= TB_MAX_DIMS && all_nonneg) {
        check_row_major(ndim, l.shape);
        if (row_major) {
            int64_t s[TB_MAX_DIMS];
            if (tb_row_major_strides(ndim, l.shape, s)) {
                memcpy(l.strides, s, sizeof(int64_t) * (size_t)ndim);
            } else {
                /* When the row-major strides overflow, the shape itself is
                 * refused, whatever the strides. */
                tb_layout_result r = tb_layout_check(&l);
                int nonneg_strides = 1;
                for (int i = 0; i < ndim; i++)
                    nonneg_strides &= l.strides[i] >= 0;
                if (nonneg_strides)
                    REQUIRE(r.status == TB_LAYOUT_NUMEL_OVERFLOW);
            }
        }
    }

    tb_layout_result r = tb_layout_check(&l);
    tb_layout_result m = model_check(&l);
    if (r.status != m.status || r.dim != m.dim)
        fprintf(stderr, "status %d dim %d, model: status %d dim %d\n", r.status, r.dim, m.status, m.dim);
    REQUIRE(r.status == m.status);
    REQUIRE(r.dim == m.dim);
    REQUIRE(tb_layout_status_text(r.status) != NULL);
    REQUIRE(strlen(tb_layout_status_text(r.status)) > 0);

    if (r.status == TB_LAYOUT_OK) {
        REQUIRE(l.ndim >= 0 && l.ndim <= TB_MAX_DIMS);
        REQUIRE(r.dim == -1);
        REQUIRE(r.numel == m.numel);
        REQUIRE(r.byte_size == m.byte_size);
        REQUIRE(r.reach == m.reach);
        /* numel is the product of the shape. */
        i128 prod = 1;
        for (int i = 0; i < l.ndim; i++)
            prod *= l.shape[i];
        REQUIRE(r.numel >= 0);
        REQUIRE(prod == r.numel);
        /* No bytes exactly when no elements. */
        REQUIRE((r.byte_size == 0) == (r.numel == 0));
        /* Whole elements only, and at least one when there are any. */
        REQUIRE(r.byte_size % l.element_size == 0);
        REQUIRE(r.numel == 0 || r.byte_size >= l.element_size);
        REQUIRE(r.byte_size <= (uint64_t)INT64_MAX);
        /* The extent never wraps the address space. */
        REQUIRE(l.ptr + r.byte_size >= l.ptr);
        /* Elements need a real, aligned pointer. */
        REQUIRE(r.numel == 0 || l.ptr != 0);
        REQUIRE(l.element_size <= 1 || l.ptr % l.element_size == 0);
        /* Every element lies inside [ptr, ptr + byte_size): the farthest
         * one ends exactly at the end. */
        if (r.numel > 0) {
            i128 last = 0;
            for (int i = 0; i < l.ndim; i++)
                last += (i128)(l.shape[i] - 1) * l.strides[i];
            REQUIRE((u128)(last + 1) * l.element_size == r.byte_size);
        }
        /* A layout lies inside itself, and not inside anything shorter. */
        REQUIRE(tb_extent_inside(l.ptr, r.byte_size, l.ptr, r.byte_size));
        if (r.byte_size > 0) {
            REQUIRE(!tb_extent_inside(l.ptr, r.byte_size, l.ptr, r.byte_size - 1));
            REQUIRE(!tb_extent_inside(l.ptr, r.byte_size, l.ptr + 1, r.byte_size));
        }
        if (l.ptr > 0)
            REQUIRE(tb_extent_inside(l.ptr, r.byte_size, l.ptr - 1, r.byte_size + 1));
    }

    /* tb_extent_inside on arbitrary values. */
    uint64_t p = read_le(&rd, 8), s = read_le(&rd, 8), b = read_le(&rd, 8), bs = read_le(&rd, 8);
    uint64_t vals[] = {p, s, b, bs};
    for (int k = 0; k < 4; k++) {
        /* Also against the checked layout's own figures. */
        uint64_t q = k == 0 ? l.ptr : vals[k];
        REQUIRE(tb_extent_inside(q, s, b, bs) == model_inside(q, s, b, bs));
        REQUIRE(tb_extent_inside(p, q, b, bs) == model_inside(p, q, b, bs));
        REQUIRE(tb_extent_inside(p, s, q, bs) == model_inside(p, s, q, bs));
        REQUIRE(tb_extent_inside(p, s, b, q) == model_inside(p, s, b, q));
    }
    if (r.status == TB_LAYOUT_OK)
        REQUIRE(tb_extent_inside(l.ptr, r.byte_size, b, bs) == model_inside(l.ptr, r.byte_size, b, bs));

    g_layout = NULL;
    return 0;
}
