/* Unit tests for the pure-C core: layout validation (tb_spec) and the dtype
 * table (tb_dtype). No framework: each CHECK counts, and a failure prints
 * where it happened; the exit status is non-zero when any check failed. */
#include "intern.h"
#include "tb_dtype.h"
#include "tb_layout.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#define P62 (INT64_C(1) << 62)
#define P32 (INT64_C(1) << 32)

/* A layout from literal arrays; strides NULL means row-major. */
static tb_layout make_layout(uint64_t ptr, size_t element_size, int ndim, const int64_t *shape, const int64_t *strides)
{
    tb_layout l;
    memset(&l, 0, sizeof l);
    l.ptr = ptr;
    l.element_size = element_size;
    l.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        l.shape[i] = shape[i];
    if (strides) {
        for (int i = 0; i < ndim; i++)
            l.strides[i] = strides[i];
    } else if (ndim > 0) {
        CHECK(tb_row_major_strides(ndim, shape, l.strides));
    }
    return l;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define LAYOUT(ptr, esize, shape, strides) \
    make_layout((ptr), (esize), (int)(sizeof shape / sizeof shape[0]), shape, strides)

static void test_row_major_strides(void)
{
    int64_t s[4];

    CHECK(tb_row_major_strides(3, SHAPE(2, 3, 4), s));
    CHECK_EQ(s[0], 12);
    CHECK_EQ(s[1], 4);
    CHECK_EQ(s[2], 1);

    /* 0-d: succeeds and writes nothing. */
    s[0] = -7;
    CHECK(tb_row_major_strides(0, NULL, s));
    CHECK_EQ(s[0], -7);

    /* Sizes 0 and 1 count as 1, so torch.empty(3, 0, 5).stride() == (5, 5, 1). */
    CHECK(tb_row_major_strides(3, SHAPE(3, 0, 5), s));
    CHECK_EQ(s[0], 5);
    CHECK_EQ(s[1], 5);
    CHECK_EQ(s[2], 1);
    CHECK(tb_row_major_strides(4, SHAPE(4, 1, 2, 1), s));
    CHECK_EQ(s[0], 2);
    CHECK_EQ(s[1], 2);
    CHECK_EQ(s[2], 1);
    CHECK_EQ(s[3], 1);

    /* The largest single dimension still fits. */
    CHECK(tb_row_major_strides(1, SHAPE(INT64_MAX), s));
    CHECK_EQ(s[0], 1);
    CHECK(tb_row_major_strides(2, SHAPE(P62, 1), s));
    CHECK_EQ(s[0], 1);

    /* Overflow: the running product passes INT64_MAX. */
    CHECK(!tb_row_major_strides(2, SHAPE(P32, P32), s));
    CHECK(!tb_row_major_strides(2, SHAPE(2, P62), s));
    CHECK(!tb_row_major_strides(3, SHAPE(3, INT64_MAX / 2, 2), s));
}

static void test_layout_ok(void)
{
    tb_layout_result r;

    /* Contiguous float32 [2, 3, 4]. */
    tb_layout l = LAYOUT(0x1000, 4, SHAPE(2, 3, 4), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQ(r.dim, -1);
    CHECK_EQ(r.numel, 24);
    CHECK_EQU(r.byte_size, 96);

    /* Transposed float64 [3, 2] (strides {1, 3}): farthest offset 2 + 3 = 5. */
    l = LAYOUT(0x1000, 8, SHAPE(3, 2), SHAPE(1, 3));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQ(r.numel, 6);
    CHECK_EQU(r.byte_size, 48);

    /* Columns 2..4 of a float32 [4, 10] matrix at base 0x2000: the view
     * starts 8 bytes in and reaches offset 3 * 10 + 2 = 32. */
    l = LAYOUT(0x2000 + 8, 4, SHAPE(4, 3), SHAPE(10, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQ(r.numel, 12);
    CHECK_EQU(r.byte_size, 132);
    CHECK(tb_extent_inside(l.ptr, r.byte_size, 0x2000, 160));

    /* Every other row of the same matrix: offset 20 + 9 = 29. */
    l = LAYOUT(0x2000, 4, SHAPE(2, 10), SHAPE(20, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQ(r.numel, 20);
    CHECK_EQU(r.byte_size, 120);

    /* Broadcast (stride 0): 15 elements over 3 floats of memory. */
    l = LAYOUT(0x2000, 4, SHAPE(5, 3), SHAPE(0, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQ(r.numel, 15);
    CHECK_EQU(r.byte_size, 12);

    /* A size-1 dimension never moves, whatever its stride. */
    l = LAYOUT(0x2000, 2, SHAPE(1, 3, 1), SHAPE(999999, 1, INT64_MAX));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQ(r.numel, 3);
    CHECK_EQU(r.byte_size, 6);

    /* Zero elements: no bytes, a null pointer is fine, strides irrelevant. */
    l = LAYOUT(0, 4, SHAPE(3, 0, 5), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQ(r.numel, 0);
    CHECK_EQU(r.byte_size, 0);
    CHECK_EQU(r.reach, 60); /* row-major strides {5, 5, 1}: 2*5 + 4*1 + 1 elements */
    /* ...but a slice of the other dimensions still moves the pointer by
     * their strides: those must not overflow, nor wrap the pointer. */
    l = LAYOUT(0x1000, 8, SHAPE(0, 7), SHAPE(INT64_MAX, INT64_MAX));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_EXTENT_OVERFLOW);
    l = LAYOUT(0x1000, 4, SHAPE(2, 0), SHAPE(INT64_MAX, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_EXTENT_OVERFLOW);
    l = LAYOUT(0x1000, 4, SHAPE(2, 0), SHAPE(3, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQU(r.byte_size, 0);
    CHECK_EQU(r.reach, 16);
    /* ptr + extent wrapping is the pointer's fault. */
    l = LAYOUT(UINT64_MAX - 15, 4, SHAPE(8), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_PTR_OVERFLOW);

    /* 0-d scalar: one element. */
    l = make_layout(0x1000, 8, 0, NULL, NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQ(r.numel, 1);
    CHECK_EQU(r.byte_size, 8);

    /* TB_MAX_DIMS dimensions are allowed. */
    l = make_layout(0x1000, 4, 0, NULL, NULL);
    l.ndim = TB_MAX_DIMS;
    for (int i = 0; i < TB_MAX_DIMS; i++) {
        l.shape[i] = 1;
        l.strides[i] = 1;
    }
    l.shape[TB_MAX_DIMS - 1] = 2;
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQ(r.numel, 2);
    CHECK_EQU(r.byte_size, 8);

    /* Largest extent representable: INT64_MAX one-byte elements. */
    l = LAYOUT(1, 1, SHAPE(INT64_MAX), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQ(r.numel, INT64_MAX);
    CHECK_EQU(r.byte_size, (uint64_t)INT64_MAX);

    /* Ending just below the top of the address space is fine. */
    l = LAYOUT(UINT64_MAX - 15, 4, SHAPE(3), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQU(r.byte_size, 12);
}

static void test_layout_errors(void)
{
    tb_layout_result r;
    tb_layout l = make_layout(0x1000, 4, 0, NULL, NULL);

    l.ndim = TB_MAX_DIMS + 1;
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_TOO_MANY_DIMS);
    l.ndim = -1;
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_TOO_MANY_DIMS);

    l = LAYOUT(0x1000, 4, SHAPE(2, 3, -1), SHAPE(3, 1, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_NEGATIVE_DIM);
    CHECK_EQ(r.dim, 2);
    l = LAYOUT(0x1000, 4, SHAPE(2, -5, -1), SHAPE(1, 1, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_NEGATIVE_DIM);
    CHECK_EQ(r.dim, 1); /* the first offender */

    /* 2^32 * 2^32 = 2^64; a zero elsewhere does not excuse it. */
    l = LAYOUT(0x1000, 1, SHAPE(P32, P32), SHAPE(1, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_NUMEL_OVERFLOW);
    CHECK_EQ(r.dim, 1);
    l = LAYOUT(0x1000, 1, SHAPE(0, P32, P32), SHAPE(1, 1, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_NUMEL_OVERFLOW);
    CHECK_EQ(r.dim, 2);
    l = LAYOUT(0x1000, 1, SHAPE(P32, 0, P32), SHAPE(1, 1, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_NUMEL_OVERFLOW);

    l = LAYOUT(0x1000, 4, SHAPE(2, 3), SHAPE(3, -1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_NEGATIVE_STRIDE);
    CHECK_EQ(r.dim, 1);
    /* Even on a size-1 dimension, where it would never be used. */
    l = LAYOUT(0x1000, 4, SHAPE(1, 3), SHAPE(-1, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_NEGATIVE_STRIDE);
    CHECK_EQ(r.dim, 0);

    /* (3 - 1) * INT64_MAX overflows in one dimension. */
    l = LAYOUT(0x1000, 1, SHAPE(3), SHAPE(INT64_MAX));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_EXTENT_OVERFLOW);
    CHECK_EQ(r.dim, 0);
    /* Each dimension fits, their sum does not. */
    l = LAYOUT(0x1000, 1, SHAPE(2, 2), SHAPE(INT64_MAX, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_EXTENT_OVERFLOW);
    CHECK_EQ(r.dim, 1);
    /* The farthest offset is INT64_MAX itself, so the count (+1) overflows. */
    l = LAYOUT(0x1000, 1, SHAPE(2), SHAPE(INT64_MAX));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_EXTENT_OVERFLOW);
    /* Element offsets fit, bytes do not. */
    l = LAYOUT(0x1000, 2, SHAPE(INT64_MAX), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_EXTENT_OVERFLOW);
    /* Strides of 0: the extent is one element, but the elements' byte size
     * (numel * element size) overflows: 2^62 float32, 2^61 float64, 2^60
     * complex128, 64 dimensions of 2 with stride 0 (2^64 elements already
     * overflow the count). A zero dimension makes it 0 bytes, whatever the
     * others: {2^62, 0} of float32 is fine. */
    l = LAYOUT(0x1000, 4, SHAPE(INT64_C(1) << 62), SHAPE(0));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_BYTES_OVERFLOW);
    l = LAYOUT(0x1000, 8, SHAPE(INT64_C(1) << 61), SHAPE(0));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_BYTES_OVERFLOW);
    l = LAYOUT(0x1000, 16, SHAPE(INT64_C(1) << 60), SHAPE(0));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_BYTES_OVERFLOW);
    l = LAYOUT(0x1000, 4, SHAPE(INT64_C(1) << 60), SHAPE(0));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(r.byte_size, 4);
    int64_t twos[62], zeros[62];
    for (int i = 0; i < 62; i++) {
        twos[i] = 2;
        zeros[i] = 0;
    }
    l = make_layout(0x1000, 1, 62, twos, zeros);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK); /* 2^62 elements of 1 byte: fits */
    l.element_size = 2;
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_BYTES_OVERFLOW);
    l = LAYOUT(0x1000, 4, SHAPE(INT64_C(1) << 62, 0), SHAPE(0, 1));
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQ(r.numel, 0);
    CHECK_EQU(r.byte_size, 0);

    /* ptr + extent wraps past UINT64_MAX: 20 bytes from 16 below the top. */
    l = LAYOUT(UINT64_MAX - 15, 4, SHAPE(5), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_PTR_OVERFLOW);
    /* One past the end must be representable too: ending exactly at 2^64. */
    l = LAYOUT(UINT64_MAX - 15, 4, SHAPE(4), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_PTR_OVERFLOW);

    l = LAYOUT(0, 4, SHAPE(2, 2), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_NULL_POINTER);
    CHECK_EQ(r.numel, 4);
    l = make_layout(0, 8, 0, NULL, NULL); /* a scalar holds one element */
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_NULL_POINTER);

    l = LAYOUT(2, 4, SHAPE(3), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_MISALIGNED);
    l = LAYOUT(0x1004, 8, SHAPE(3), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_MISALIGNED);
    l = LAYOUT(0x1008, 16, SHAPE(3), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_MISALIGNED);
    l = LAYOUT(2, 2, SHAPE(3), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    /* One-byte elements are aligned anywhere. */
    l = LAYOUT(3, 1, SHAPE(3), NULL);
    r = tb_layout_check(&l);
    CHECK_EQ(r.status, TB_LAYOUT_OK);
    CHECK_EQU(tb_layout_byte_size(l.ndim, l.shape, l.strides, l.element_size), r.byte_size);
    CHECK_EQU(r.byte_size, 3);
}

static void test_extent_inside(void)
{
    const uint64_t base = 0x1000, size = 0x100;

    CHECK(tb_extent_inside(base + 0x10, 0x10, base, size));
    CHECK(tb_extent_inside(base, size, base, size));          /* the whole */
    CHECK(tb_extent_inside(base + size - 1, 1, base, size));  /* last byte */
    CHECK(!tb_extent_inside(base, size + 1, base, size));     /* one past */
    CHECK(!tb_extent_inside(base + 1, size, base, size));     /* one past */
    CHECK(!tb_extent_inside(base - 1, 1, base, size));        /* below */
    CHECK(!tb_extent_inside(0, 0, base, size));               /* below, empty */
    CHECK(tb_extent_inside(base + size, 0, base, size));      /* empty, at end */
    CHECK(!tb_extent_inside(base + size + 1, 0, base, size)); /* empty, past */
    CHECK(tb_extent_inside(base, 0, base, 0));
    /* Below the base is refused even when ptr - base, wrapped, fits base_size. */
    CHECK(!tb_extent_inside(base - 1, 0, base, UINT64_MAX));

    /* Near the top: a naive ptr + size would wrap and pass. */
    const uint64_t top = UINT64_MAX - 0xff;
    CHECK(tb_extent_inside(UINT64_MAX - 0xf, 0x10, top, 0x100));
    CHECK(!tb_extent_inside(UINT64_MAX - 0xf, 0x11, top, 0x100));
    CHECK(!tb_extent_inside(UINT64_MAX, UINT64_MAX, top, 0x100));
    CHECK(!tb_extent_inside(1, UINT64_MAX, 0, UINT64_MAX));
    CHECK(tb_extent_inside(1, UINT64_MAX - 1, 0, UINT64_MAX));
    CHECK(tb_extent_inside(UINT64_MAX, 0, 0, UINT64_MAX));
}

static void test_status_text(void)
{
    /* An out-of-range value still gets text: the fallback. */
    const char *fallback = tb_layout_status_text((tb_layout_status)99);
    CHECK(fallback != NULL && fallback[0] != '\0');

    for (int s = TB_LAYOUT_OK; s <= TB_LAYOUT_LAST_STATUS; s++) {
        const char *text = tb_layout_status_text((tb_layout_status)s);
        CHECK(text != NULL && text[0] != '\0');
        CHECK(strcmp(text, fallback) != 0); /* each status has its own case */
        /* Distinct, so an error message says which check failed. */
        for (int t = TB_LAYOUT_OK; t < s; t++)
            CHECK(strcmp(text, tb_layout_status_text((tb_layout_status)t)) != 0);
    }
}

static void check_name(const char *name, tb_dtype_id expected)
{
    tb_dtype_id id = TB_DT_COUNT;
    CHECK(dtype_from_name(name, &id));
    CHECK_EQ(id, expected);
}

static void check_nx(const char *kind, unsigned long bits, tb_dtype_id expected)
{
    tb_dtype_id id = TB_DT_COUNT;
    CHECK(dtype_from_nx(kind, bits, &id));
    CHECK_EQ(id, expected);
}

static void test_dtype_table(void)
{
    CHECK_EQ(TB_DT_COUNT, 22);
    CHECK_EQ(sizeof tb_dtypes / sizeof tb_dtypes[0], TB_DT_COUNT);

    for (int i = 0; i < TB_DT_COUNT; i++) {
        const tb_dtype *d = &tb_dtypes[i];
        tb_dtype_id id;

        CHECK(d->name != NULL && d->name[0] != '\0');
        if (d->name == NULL)
            continue;
        id = TB_DT_COUNT;
        CHECK(dtype_from_name(d->name, &id));
        CHECK_EQ(id, i);

        /* An element is its lanes: one, but for a packed dtype. */
        CHECK_EQ(d->element_size * 8, d->dl_bits * d->dl_lanes);
        CHECK_EQ(d->dl_lanes == 1, d->dl_bits >= 8);
        id = TB_DT_COUNT;
        CHECK(tb_dtype_from_dlpack(d->dl_code, d->dl_bits, d->dl_lanes, &id));
        CHECK_EQ(id, i);
        if (d->dl_lanes != 1)
            CHECK(!tb_dtype_from_dlpack(d->dl_code, d->dl_bits, 1, &id));

        if (d->nx_kind) {
            CHECK_EQ(d->nx_bits, d->dl_bits);
            id = TB_DT_COUNT;
            CHECK(dtype_from_nx(d->nx_kind, d->nx_bits, &id));
            CHECK_EQ(id, i);
        }

        for (int j = 0; j < i; j++) {
            CHECK(strcmp(d->name, tb_dtypes[j].name) != 0);
            CHECK(d->torch_scalar_type != tb_dtypes[j].torch_scalar_type);
        }
    }

    /* Aliases point into the table and never shadow a canonical name. */
    for (size_t a = 0; a < TB_DT_ALIAS_COUNT; a++) {
        CHECK(tb_dtype_aliases[a].id < TB_DT_COUNT);
        for (int i = 0; i < TB_DT_COUNT; i++)
            CHECK(strcmp(tb_dtype_aliases[a].name, tb_dtypes[i].name) != 0);
    }
}

static void test_dtype_names(void)
{
    check_name("float", TB_DT_FLOAT32);
    check_name("double", TB_DT_FLOAT64);
    check_name("half", TB_DT_FLOAT16);
    check_name("long", TB_DT_INT64);
    check_name("byte", TB_DT_UINT8);
    check_name("char", TB_DT_INT8);
    check_name("short", TB_DT_INT16);
    check_name("int", TB_DT_INT32);
    check_name("cfloat", TB_DT_COMPLEX64);
    check_name("complex_float", TB_DT_COMPLEX64);
    check_name("cdouble", TB_DT_COMPLEX128);
    check_name("complex_double", TB_DT_COMPLEX128);
    check_name("complex_half", TB_DT_COMPLEX32);
    check_name("chalf", TB_DT_COMPLEX32);
    /* Nx's shorthands. */
    check_name("f32", TB_DT_FLOAT32);
    check_name("bf16", TB_DT_BFLOAT16);
    check_name("s64", TB_DT_INT64);
    check_name("u16", TB_DT_UINT16);
    check_name("c128", TB_DT_COMPLEX128);

    /* Refused, and *out left alone. */
    const char *unknown[] = {"", "float128", "Float32", "float32 ", "int4", "f31", "u4", "c32", "complex"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        tb_dtype_id id = TB_DT_COUNT;
        CHECK(!dtype_from_name(unknown[i], &id));
        CHECK_EQ(id, TB_DT_COUNT);
    }
}

static void test_dtype_nx(void)
{
    check_nx("f", 32, TB_DT_FLOAT32);
    check_nx("f", 16, TB_DT_FLOAT16);
    check_nx("bf", 16, TB_DT_BFLOAT16);
    check_nx("c", 64, TB_DT_COMPLEX64);
    check_nx("c", 128, TB_DT_COMPLEX128);
    check_nx("f", 8, TB_DT_FLOAT8_E5M2); /* Nx's {:f, 8} is E5M2 */
    check_nx("f8_e4m3fn", 8, TB_DT_FLOAT8_E4M3FN);
    check_nx("u", 8, TB_DT_UINT8);
    check_nx("s", 64, TB_DT_INT64);

    /* Nx types libtorch has no dtype for, and nonsense. */
    struct {
        const char *kind;
        unsigned long bits;
    } refused[] = {
        {"u", 4},   {"s", 4},          {"u", 2},       {"bf", 32},  {"c", 32},
        {"f", 128}, {"f8_e4m3fn", 16}, {"f", 8 + 256}, {"bool", 8}, {"", 8},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        tb_dtype_id id = TB_DT_COUNT;
        CHECK(!dtype_from_nx(refused[i].kind, refused[i].bits, &id));
        CHECK_EQ(id, TB_DT_COUNT);
    }
}

static void test_dtype_dlpack(void)
{
    /* Codes from DLPack's DLDataTypeCode. */
    CHECK_EQ(tb_dtypes[TB_DT_BFLOAT16].dl_code, 4);
    CHECK_EQ(tb_dtypes[TB_DT_BFLOAT16].dl_bits, 16);
    CHECK_EQ(tb_dtypes[TB_DT_BOOL].dl_code, 6);
    CHECK_EQ(tb_dtypes[TB_DT_BOOL].dl_bits, 8);
    CHECK_EQ(tb_dtypes[TB_DT_COMPLEX64].dl_code, 5);
    CHECK_EQ(tb_dtypes[TB_DT_COMPLEX64].dl_bits, 64);
    CHECK_EQ(tb_dtypes[TB_DT_FLOAT8_E4M3FN].dl_code, 10);
    CHECK_EQ(tb_dtypes[TB_DT_FLOAT8_E5M2].dl_code, 12);

    tb_dtype_id id = TB_DT_COUNT;
    CHECK(tb_dtype_from_dlpack(6, 8, 1, &id));
    CHECK_EQ(id, TB_DT_BOOL);
    CHECK(tb_dtype_from_dlpack(5, 32, 1, &id));
    CHECK_EQ(id, TB_DT_COMPLEX32);

    /* Vector lanes, unknown codes, and known codes at unknown widths. */
    struct {
        unsigned code, bits, lanes;
    } refused[] = {
        {2, 32, 0},  {2, 32, 2}, {2, 32, 4},  {0, 8, 65535}, {3, 64, 1}, /* opaque handle */
        {7, 8, 1},                                                       /* float8_e3m4 */
        {17, 4, 1},                                                      /* float4_e2m1fn */
        {99, 32, 1}, {2, 8, 1},  {0, 128, 1}, {4, 32, 1},    {6, 1, 1},  {5, 16, 1},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        id = TB_DT_COUNT;
        CHECK(!tb_dtype_from_dlpack(refused[i].code, refused[i].bits, refused[i].lanes, &id));
        CHECK_EQ(id, TB_DT_COUNT);
    }
}

static void test_pointer_alignment(void)
{
    CHECK_EQ(tb_pointer_alignment(0), TB_MAX_ALIGNMENT);
    CHECK_EQ(tb_pointer_alignment(1), 1);
    CHECK_EQ(tb_pointer_alignment(0x1002), 2);
    CHECK_EQ(tb_pointer_alignment(0x7f0000000018), 8);
    CHECK_EQ(tb_pointer_alignment(0x7f0000000010), 16);
    CHECK_EQ(tb_pointer_alignment(0x7f0000002000), TB_MAX_ALIGNMENT);
    CHECK_EQ(tb_pointer_alignment(UINT64_C(1) << 63), TB_MAX_ALIGNMENT);
}

int main(void)
{
    test_row_major_strides();
    test_layout_ok();
    test_layout_errors();
    test_extent_inside();
    test_pointer_alignment();
    test_status_text();
    test_dtype_table();
    test_dtype_names();
    test_dtype_nx();
    test_dtype_dlpack();

    printf("c_test: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
