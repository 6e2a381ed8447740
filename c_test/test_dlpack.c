/* Unit tests for the validation of imported DLPack tensors (tb_dlpack_check)
 * and for our DLPack declarations against the dtype table. Pure C: the
 * managed tensors are built here, in memory this file owns; no deleter is
 * ever called (the check never calls anything; it says who must). */
#include "tb_device.h"
#include "tb_dlpack_check.h"
#include "tb_dtype.h"
#include "tb_layout.h"
#include "tensor_blob_dlpack.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

/* Data the tensors point at: aligned for every element size. */
static _Alignas(64) unsigned char data[4096];

/* A versioned float32 [2, 3] row-major CPU tensor over data, with its own
 * shape and strides, rebuilt for each case. Kept in a union with room to
 * spare, so that reading it with the other layout stays in bounds. */
typedef struct {
    union {
        tb_DLManagedTensorVersioned v;
        tb_DLManagedTensor l;
        unsigned char room[256];
    } u;
    int64_t shape[TB_MAX_DIMS + 2];
    int64_t strides[TB_MAX_DIMS + 2];
} fixture;

static void dummy_deleter_v(tb_DLManagedTensorVersioned *self)
{
    (void)self;
}
static void dummy_deleter_l(tb_DLManagedTensor *self)
{
    (void)self;
}

static tb_DLTensor base_tensor(fixture *f)
{
    tb_DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = tb_kDLCPU;
    t.device.device_id = 0;
    t.ndim = 2;
    t.dtype.code = tb_kDLFloat;
    t.dtype.bits = 32;
    t.dtype.lanes = 1;
    f->shape[0] = 2;
    f->shape[1] = 3;
    f->strides[0] = 3;
    f->strides[1] = 1;
    t.shape = f->shape;
    t.strides = f->strides;
    t.byte_offset = 0;
    return t;
}

static tb_DLManagedTensorVersioned *versioned(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->u.v.version.major = 1;
    f->u.v.version.minor = 3;
    f->u.v.manager_ctx = f;
    f->u.v.deleter = dummy_deleter_v;
    f->u.v.flags = 0;
    f->u.v.dl_tensor = base_tensor(f);
    return &f->u.v;
}

static tb_DLManagedTensor *legacy(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->u.l.dl_tensor = base_tensor(f);
    f->u.l.manager_ctx = f;
    f->u.l.deleter = dummy_deleter_l;
    return &f->u.l;
}

/* Runs a check on the versioned and on the legacy form of the same tensor,
 * after edit() changed the DLTensor of each. */
typedef void (*edit_fn)(tb_DLTensor *t, fixture *f);

static void check_both(edit_fn edit, tb_dlpack_checked *rv, tb_dlpack_checked *rl)
{
    static fixture fv, fl;
    tb_DLManagedTensorVersioned *v = versioned(&fv);
    tb_DLManagedTensor *l = legacy(&fl);
    edit(&v->dl_tensor, &fv);
    edit(&l->dl_tensor, &fl);
    tb_dlpack_check_versioned(v, rv);
    tb_dlpack_check_legacy(l, rl);
}

static tb_dlpack_checked rv, rl;

static void no_edit(tb_DLTensor *t, fixture *f)
{
    (void)t;
    (void)f;
}

static void test_valid(void)
{
    check_both(no_edit, &rv, &rl);
    for (int k = 0; k < 2; k++) {
        tb_dlpack_checked *r = k ? &rl : &rv;
        CHECK_EQ(r->status, TB_DLC_OK);
        CHECK_EQ(r->owned, 1);
        CHECK_EQ(r->dtype, TB_DT_FLOAT32);
        CHECK_EQU(r->layout.ptr, (uintptr_t)data);
        CHECK_EQ(r->layout.ndim, 2);
        CHECK_EQ(r->layout.shape[0], 2);
        CHECK_EQ(r->layout.shape[1], 3);
        CHECK_EQ(r->layout.strides[0], 3);
        CHECK_EQ(r->layout.strides[1], 1);
        CHECK_EQ(r->layout.element_size, 4);
        CHECK_EQ(r->spec.numel, 6);
        CHECK_EQU(r->spec.byte_size, 24);
        CHECK_EQ(r->device_type, tb_kDLCPU);
    }
    CHECK_EQU(rv.version.major, 1);
    CHECK_EQU(rv.version.minor, 3);
    CHECK_EQU(rl.version.major, 0);
    CHECK_EQU(rv.flags, 0);
}

static void null_strides(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->strides = NULL;
    t->ndim = 3;
    f->shape[2] = 4;
}
static void transposed(tb_DLTensor *t, fixture *f)
{
    (void)t;
    f->shape[0] = 3;
    f->shape[1] = 2;
    f->strides[0] = 1;
    f->strides[1] = 3;
}
static void offset(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->byte_offset = 64;
}
static void offset_overflow(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->byte_offset = UINT64_MAX - 8;
}
static void empty_null_data(tb_DLTensor *t, fixture *f)
{
    t->data = NULL;
    f->shape[0] = 0;
}
static void null_data(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->data = NULL;
}
static void misaligned(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->data = data + 2;
}
static void misaligned_offset(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->byte_offset = 2;
}
static void scalar_null_shape(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->ndim = 0;
    t->shape = NULL;
    t->strides = NULL;
}
static void size1_negative_stride(tb_DLTensor *t, fixture *f)
{
    (void)t;
    f->shape[0] = 1;
    f->strides[0] = -5;
}
static void size1_huge_stride(tb_DLTensor *t, fixture *f)
{
    (void)t;
    f->shape[0] = 1;
    f->strides[0] = INT64_MAX;
}
static void empty_negative_stride(tb_DLTensor *t, fixture *f)
{
    (void)t;
    f->shape[0] = 0;
    f->strides[1] = -1;
}
static void negative_stride(tb_DLTensor *t, fixture *f)
{
    (void)t;
    f->strides[1] = -1;
}
static void negative_dim(tb_DLTensor *t, fixture *f)
{
    (void)t;
    f->shape[1] = -3;
}
static void numel_overflow(tb_DLTensor *t, fixture *f)
{
    (void)t;
    f->shape[0] = INT64_C(1) << 32;
    f->shape[1] = INT64_C(1) << 32;
    f->strides[0] = 1;
    f->strides[1] = 1;
}
static void null_strides_overflow(tb_DLTensor *t, fixture *f)
{
    numel_overflow(t, f);
    t->strides = NULL;
}
/* Row-major strides that overflow in the middle dimension: the outer
 * dimension's stride is never computed. */
static void null_strides_overflow_inner(tb_DLTensor *t, fixture *f)
{
    t->ndim = 3;
    t->strides = NULL;
    f->shape[0] = 2;
    f->shape[1] = INT64_C(1) << 31;
    f->shape[2] = INT64_C(1) << 32;
}
/* Leaves the stack below the caller full of negative garbage, where the
 * next call's locals will lie. */
static __attribute__((noinline)) void dirty_stack(void)
{
    volatile unsigned char junk[8192];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = 0xff;
}
static void extent_overflow(tb_DLTensor *t, fixture *f)
{
    (void)t;
    f->strides[0] = INT64_MAX / 2;
}
static void null_shape(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->shape = NULL;
}
static void ndim_negative(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->ndim = -1;
}
static void ndim_too_big(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->ndim = TB_MAX_DIMS + 1;
}
static void ndim_max(tb_DLTensor *t, fixture *f)
{
    t->ndim = TB_MAX_DIMS;
    for (int i = 0; i < TB_MAX_DIMS; i++) {
        f->shape[i] = 1;
        f->strides[i] = 1;
    }
}

static void test_layouts(void)
{
    check_both(null_strides, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK_EQ(rv.layout.strides[0], 12);
    CHECK_EQ(rv.layout.strides[1], 4);
    CHECK_EQ(rv.layout.strides[2], 1);
    CHECK_EQ(rl.status, TB_DLC_OK);
    CHECK_EQ(rl.layout.strides[0], 12);

    check_both(transposed, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK_EQ(rv.layout.strides[0], 1);
    CHECK_EQ(rv.layout.strides[1], 3);
    CHECK_EQU(rv.spec.byte_size, 24);

    check_both(offset, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK_EQU(rv.layout.ptr, (uintptr_t)data + 64);
    CHECK_EQ(rl.status, TB_DLC_OK);
    CHECK_EQU(rl.layout.ptr, (uintptr_t)data + 64);

    check_both(offset_overflow, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_BYTE_OFFSET);
    CHECK_EQ(rv.owned, 1);
    CHECK_EQ(rl.status, TB_DLC_BYTE_OFFSET);
    CHECK_EQ(rl.owned, 1);

    /* No elements: data may be NULL. */
    check_both(empty_null_data, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK_EQU(rv.layout.ptr, 0);
    CHECK_EQ(rv.spec.numel, 0);
    CHECK_EQU(rv.spec.byte_size, 0);
    CHECK_EQ(rl.status, TB_DLC_OK);

    check_both(null_data, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_LAYOUT);
    CHECK_EQ(rv.spec.status, TB_LAYOUT_NULL_POINTER);
    CHECK_EQ(rl.spec.status, TB_LAYOUT_NULL_POINTER);

    check_both(misaligned, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_LAYOUT);
    CHECK_EQ(rv.spec.status, TB_LAYOUT_MISALIGNED);
    check_both(misaligned_offset, &rv, &rl);
    CHECK_EQ(rv.spec.status, TB_LAYOUT_MISALIGNED);
    CHECK_EQ(rl.spec.status, TB_LAYOUT_MISALIGNED);

    /* A 0-d tensor needs neither shape nor strides. */
    check_both(scalar_null_shape, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK_EQ(rv.spec.numel, 1);
    CHECK_EQU(rv.spec.byte_size, 4);
    CHECK_EQ(rl.status, TB_DLC_OK);

    /* Strides that address nothing may be anything. */
    check_both(size1_negative_stride, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK_EQ(rv.layout.strides[0], 3);
    CHECK_EQ(rv.layout.strides[1], 1);
    CHECK_EQU(rv.spec.byte_size, 12);
    check_both(size1_huge_stride, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK_EQ(rv.layout.strides[0], INT64_MAX);
    CHECK_EQU(rv.spec.byte_size, 12);
    check_both(empty_negative_stride, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK(rv.layout.strides[1] >= 0);
    CHECK_EQ(rv.spec.numel, 0);

    check_both(negative_stride, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_LAYOUT);
    CHECK_EQ(rv.spec.status, TB_LAYOUT_NEGATIVE_STRIDE);
    CHECK_EQ(rv.spec.dim, 1);
    CHECK_EQ(rv.owned, 1);
    CHECK_EQ(rl.spec.status, TB_LAYOUT_NEGATIVE_STRIDE);
    CHECK_EQ(rl.owned, 1);

    check_both(negative_dim, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_LAYOUT);
    CHECK_EQ(rv.spec.status, TB_LAYOUT_NEGATIVE_DIM);
    CHECK_EQ(rv.spec.dim, 1);
    CHECK_EQ(rl.spec.status, TB_LAYOUT_NEGATIVE_DIM);

    check_both(numel_overflow, &rv, &rl);
    CHECK_EQ(rv.spec.status, TB_LAYOUT_NUMEL_OVERFLOW);
    CHECK_EQ(rl.spec.status, TB_LAYOUT_NUMEL_OVERFLOW);
    check_both(null_strides_overflow, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_LAYOUT);
    CHECK_EQ(rv.spec.status, TB_LAYOUT_NUMEL_OVERFLOW);

    /* Every stride is defined whatever the stack held: the shape is at
     * fault, never a stride read from garbage. */
    dirty_stack();
    check_both(null_strides_overflow_inner, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_LAYOUT);
    CHECK_EQ(rv.spec.status, TB_LAYOUT_NUMEL_OVERFLOW);
    CHECK_EQ(rl.spec.status, TB_LAYOUT_NUMEL_OVERFLOW);
    CHECK(rv.layout.strides[0] >= 0);

    check_both(extent_overflow, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_LAYOUT);
    CHECK_EQ(rv.spec.status, TB_LAYOUT_EXTENT_OVERFLOW);

    check_both(null_shape, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_NULL_SHAPE);
    CHECK_EQ(rv.owned, 1);
    CHECK_EQ(rl.status, TB_DLC_NULL_SHAPE);
    CHECK_EQ(rl.owned, 1);

    /* ndim: versioned tensors are owned by their header, legacy ones are
     * not recognized with an impossible ndim. */
    check_both(ndim_negative, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_NDIM);
    CHECK_EQ(rv.ndim, -1);
    CHECK_EQ(rv.owned, 1);
    CHECK_EQ(rl.status, TB_DLC_NDIM);
    CHECK_EQ(rl.owned, 0);
    check_both(ndim_too_big, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_NDIM);
    CHECK_EQ(rv.ndim, TB_MAX_DIMS + 1);
    CHECK_EQ(rl.owned, 0);
    check_both(ndim_max, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK_EQ(rl.status, TB_DLC_OK);
}

static int32_t device_type;
static int32_t device_id;
static void set_device(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->device.device_type = device_type;
    t->device.device_id = device_id;
}

static void test_devices(void)
{
    /* kDLCUDA (2), kDLCUDAHost (3) and kDLCUDAManaged (13) pass the check:
     * whether they can be imported depends on the linked libtorch and the
     * CUDA runtime, which the importer asks. */
    static const int32_t known[] = {4, 7, 8, 9, 10, 11, 12, 14, 15, 16, 17, 18};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        device_type = known[i];
        device_id = 3;
        check_both(set_device, &rv, &rl);
        CHECK_EQ(rv.status, TB_DLC_UNSUPPORTED_DEVICE);
        CHECK_EQ(rv.device_type, known[i]);
        CHECK_EQ(rv.device_id, 3);
        CHECK_EQ(rv.owned, 1);
        CHECK_EQ(rl.status, TB_DLC_UNSUPPORTED_DEVICE);
        CHECK_EQ(rl.device_type, known[i]);
        /* A known device code: the legacy tensor is recognized, its deleter
         * must run (a CUDA tensor in a CPU-only build, say). */
        CHECK_EQ(rl.owned, 1);
        CHECK(tb_dlpack_device_name(known[i]) != NULL);
    }
    device_type = tb_kDLCUDA;
    device_id = 1;
    check_both(set_device, &rv, &rl);
    CHECK(strcmp(tb_dlpack_device_name(rv.device_type), "kDLCUDA") == 0);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK_EQ(rl.status, TB_DLC_OK);
    CHECK_EQ(rv.device_id, 1);
    static const int32_t cuda_kinds[] = {tb_kDLCUDAHost, tb_kDLCUDAManaged};
    for (size_t i = 0; i < 2; i++) {
        device_type = cuda_kinds[i];
        device_id = 0;
        check_both(set_device, &rv, &rl);
        CHECK_EQ(rv.status, TB_DLC_OK);
        CHECK_EQ(rl.status, TB_DLC_OK);
        CHECK_EQ(rv.device_type, cuda_kinds[i]);
    }

    static const int32_t unknown[] = {0, 5, 6, 19, 100, -1, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        device_type = unknown[i];
        device_id = 0;
        check_both(set_device, &rv, &rl);
        CHECK_EQ(rv.status, TB_DLC_UNKNOWN_DEVICE);
        CHECK_EQ(rv.device_type, unknown[i]);
        CHECK_EQ(rv.owned, 1);
        CHECK_EQ(rl.status, TB_DLC_UNKNOWN_DEVICE);
        CHECK_EQ(rl.device_type, unknown[i]);
        CHECK_EQ(rl.owned, 0);
        CHECK(tb_dlpack_device_name(unknown[i]) == NULL);
    }
    CHECK(strcmp(tb_dlpack_device_name(tb_kDLCPU), "kDLCPU") == 0);
    CHECK(strcmp(tb_dlpack_device_name(tb_kDLTrn), "kDLTrn") == 0);

    /* The devices an import takes are TB_DLPACK_DEVICES, listed so in its
     * messages; each device type's export code is one of them, imported
     * back onto that device type. */
    CHECK(strcmp(tb_dlpack_imported_devices(), "kDLCPU, kDLCUDA, kDLCUDAHost and kDLCUDAManaged") == 0);
    CHECK(strcmp(tb_dlpack_status_text(TB_DLC_UNSUPPORTED_DEVICE),
                 "only kDLCPU, kDLCUDA, kDLCUDAHost and kDLCUDAManaged tensors can be imported") == 0);
    for (int i = 0; i < TB_DLPACK_DEVICE_COUNT; i++) {
        /* The table's name of each code is DLPack's. */
        CHECK(strcmp(tb_dlpack_devices[i].dlpack_name, tb_dlpack_device_name(tb_dlpack_devices[i].code)) == 0);
        device_type = tb_dlpack_devices[i].code;
        device_id = 0;
        check_both(set_device, &rv, &rl);
        CHECK_EQ(rv.status, TB_DLC_OK);
    }
    for (int t = 0; t < TB_DEVICE_COUNT; t++) {
        int row = tb_dlpack_device_row_of(tb_device_dlpack_type(t));
        CHECK(row >= 0 && tb_dlpack_devices[row].device == t);
    }

    /* The CPU device index is not checked: producers disagree on it. */
    device_type = tb_kDLCPU;
    device_id = 7;
    check_both(set_device, &rv, &rl);
    CHECK_EQ(rv.status, TB_DLC_OK);
}

static tb_DLDataType dl_dtype;
static void set_dtype(tb_DLTensor *t, fixture *f)
{
    (void)f;
    t->dtype = dl_dtype;
}

static void test_dtypes(void)
{
    /* Every entry of the table imports as itself. */
    for (int i = 0; i < TB_DT_COUNT; i++) {
        dl_dtype.code = tb_dtypes[i].dl_code;
        dl_dtype.bits = tb_dtypes[i].dl_bits;
        dl_dtype.lanes = tb_dtypes[i].dl_lanes;
        check_both(set_dtype, &rv, &rl);
        CHECK_EQ(rv.status, TB_DLC_OK);
        CHECK_EQ(rv.dtype, i);
        CHECK_EQ(rv.layout.element_size, tb_dtypes[i].element_size);
        CHECK_EQ(rl.status, TB_DLC_OK);
        CHECK_EQ(rl.dtype, i);
    }

    /* Unknown type codes: the code is in the result; a legacy tensor with
     * one is not recognized. */
    static const unsigned unknown[] = {18, 19, 64, 255};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        dl_dtype.code = (uint8_t)unknown[i];
        dl_dtype.bits = 32;
        dl_dtype.lanes = 1;
        check_both(set_dtype, &rv, &rl);
        CHECK_EQ(rv.status, TB_DLC_UNKNOWN_DTYPE);
        CHECK_EQU(rv.dl_dtype.code, unknown[i]);
        CHECK_EQ(rv.owned, 1);
        CHECK_EQ(rl.status, TB_DLC_UNKNOWN_DTYPE);
        CHECK_EQU(rl.dl_dtype.code, unknown[i]);
        CHECK_EQ(rl.owned, 0);
        CHECK(tb_dlpack_type_code_name(unknown[i]) == NULL);
    }

    /* Vector types. */
    static const unsigned lanes[] = {0, 2, 4, 65535};
    for (size_t i = 0; i < sizeof lanes / sizeof lanes[0]; i++) {
        dl_dtype.code = tb_kDLFloat;
        dl_dtype.bits = 32;
        dl_dtype.lanes = (uint16_t)lanes[i];
        check_both(set_dtype, &rv, &rl);
        CHECK_EQ(rv.status, TB_DLC_LANES);
        CHECK_EQU(rv.dl_dtype.lanes, lanes[i]);
        CHECK_EQ(rl.status, TB_DLC_LANES);
        CHECK_EQ(rl.owned, 1);
    }

    /* Known codes with no dtype here. */
    static const struct {
        uint8_t code, bits;
    } unsupported[] = {
        {tb_kDLOpaqueHandle, 64}, {tb_kDLFloat8_e3m4, 8},    {tb_kDLFloat8_e4m3, 8},   {tb_kDLFloat8_e4m3b11fnuz, 8},
        {tb_kDLFloat6_e2m3fn, 6}, {tb_kDLFloat6_e3m2fn, 6},  {tb_kDLFloat4_e2m1fn, 4}, {tb_kDLInt, 24},
        {tb_kDLInt, 128},         {tb_kDLFloat, 8},          {tb_kDLBool, 1},          {tb_kDLComplex, 16},
        {tb_kDLBfloat, 32},       {tb_kDLFloat8_e4m3fn, 16},
    };
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        dl_dtype.code = unsupported[i].code;
        dl_dtype.bits = unsupported[i].bits;
        dl_dtype.lanes = 1;
        check_both(set_dtype, &rv, &rl);
        CHECK_EQ(rv.status, TB_DLC_UNSUPPORTED_DTYPE);
        CHECK_EQU(rv.dl_dtype.code, unsupported[i].code);
        CHECK_EQU(rv.dl_dtype.bits, unsupported[i].bits);
        CHECK_EQ(rl.status, TB_DLC_UNSUPPORTED_DTYPE);
        CHECK_EQ(rl.owned, 1);
        CHECK(tb_dlpack_type_code_name(unsupported[i].code) != NULL);
    }

    for (unsigned code = 0; code <= TB_DLPACK_LAST_TYPE_CODE; code++)
        CHECK(tb_dlpack_type_code_name(code) != NULL);
    CHECK(strcmp(tb_dlpack_type_code_name(tb_kDLBool), "kDLBool") == 0);
    CHECK(strcmp(tb_dlpack_type_code_name(tb_kDLFloat4_e2m1fn), "kDLFloat4_e2m1fn") == 0);
}

static void test_versions(void)
{
    static fixture f;
    tb_DLManagedTensorVersioned *v;

    /* Any 1.x minor. */
    static const uint32_t minors[] = {0, 1, 3, 99, UINT32_MAX};
    for (size_t i = 0; i < sizeof minors / sizeof minors[0]; i++) {
        v = versioned(&f);
        v->version.minor = minors[i];
        tb_dlpack_check_versioned(v, &rv);
        CHECK_EQ(rv.status, TB_DLC_OK);
        CHECK_EQ(rv.owned, 1);
        CHECK_EQU(rv.version.minor, minors[i]);
    }

    /* A later major: owned (the spec: call the deleter), nothing else read. */
    static const uint32_t later[][2] = {{2, 0}, {3, 7}, {TB_DLPACK_MAX_PLAUSIBLE_MAJOR, TB_DLPACK_MAX_PLAUSIBLE_MINOR}};
    for (size_t i = 0; i < sizeof later / sizeof later[0]; i++) {
        v = versioned(&f);
        v->version.major = later[i][0];
        v->version.minor = later[i][1];
        v->dl_tensor.ndim = -5; /* not read */
        tb_dlpack_check_versioned(v, &rv);
        CHECK_EQ(rv.status, TB_DLC_MAJOR_VERSION);
        CHECK_EQ(rv.owned, 1);
        CHECK_EQU(rv.version.major, later[i][0]);
        CHECK_EQU(rv.version.minor, later[i][1]);
    }

    /* Headers no version has: nothing is owned, nothing may be called. */
    static const uint32_t impossible[][2] = {
        {0, 0},
        {0, 8},
        {TB_DLPACK_MAX_PLAUSIBLE_MAJOR + 1, 0},
        {2, TB_DLPACK_MAX_PLAUSIBLE_MINOR + 1},
        {0x1000, 0x7fff},
        {UINT32_MAX, UINT32_MAX},
    };
    for (size_t i = 0; i < sizeof impossible / sizeof impossible[0]; i++) {
        v = versioned(&f);
        v->version.major = impossible[i][0];
        v->version.minor = impossible[i][1];
        tb_dlpack_check_versioned(v, &rv);
        CHECK_EQ(rv.status, TB_DLC_NOT_VERSIONED);
        CHECK_EQ(rv.owned, 0);
        CHECK_EQU(rv.version.major, impossible[i][0]);
    }

    /* A legacy tensor read as versioned: its data pointer is the "version".
     * Real data pointers are aligned, so the major is 0 or large. */
    static fixture fl;
    tb_DLManagedTensor *l = legacy(&fl);
    tb_dlpack_check_versioned((const tb_DLManagedTensorVersioned *)l, &rv);
    CHECK_EQ(rv.status, TB_DLC_NOT_VERSIONED);
    CHECK_EQ(rv.owned, 0);
    l->dl_tensor.data = NULL;
    tb_dlpack_check_versioned((const tb_DLManagedTensorVersioned *)l, &rv);
    CHECK_EQ(rv.status, TB_DLC_NOT_VERSIONED);
    CHECK_EQ(rv.owned, 0);

    /* A versioned tensor read as legacy: manager_ctx (a pointer) lands on
     * the device type, which no device code matches. */
    v = versioned(&f);
    tb_dlpack_check_legacy((const tb_DLManagedTensor *)v, &rl);
    CHECK(rl.status != TB_DLC_OK);
    CHECK_EQ(rl.owned, 0);
}

static void test_flags(void)
{
    static fixture f;
    tb_DLManagedTensorVersioned *v = versioned(&f);

    v->flags = TB_DLPACK_FLAG_READ_ONLY;
    tb_dlpack_check_versioned(v, &rv);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK_EQU(rv.flags, TB_DLPACK_FLAG_READ_ONLY);

    v->flags = TB_DLPACK_KNOWN_FLAGS;
    tb_dlpack_check_versioned(v, &rv);
    CHECK_EQ(rv.status, TB_DLC_OK);
    CHECK_EQU(rv.flags, 7);

    for (int bit = 3; bit < 64; bit++) {
        v->flags = TB_DLPACK_FLAG_READ_ONLY | (UINT64_C(1) << bit);
        tb_dlpack_check_versioned(v, &rv);
        CHECK_EQ(rv.status, TB_DLC_UNKNOWN_FLAGS);
        CHECK_EQ(rv.owned, 1);
        CHECK_EQU(rv.flags, v->flags);
    }
}

static void test_declarations(void)
{
    CHECK_EQ(TB_DLPACK_MAJOR_VERSION, 1);
    CHECK_EQ(TB_DLPACK_MINOR_VERSION, 3);
    CHECK_EQU(TB_DLPACK_FLAG_READ_ONLY, 1);
    CHECK_EQU(TB_DLPACK_FLAG_IS_COPIED, 2);
    CHECK_EQU(TB_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED, 4);

    /* The codes the issue lists, by value. */
    CHECK_EQ(tb_kDLCPU, 1);
    CHECK_EQ(tb_kDLCUDA, 2);
    CHECK_EQ(tb_kDLCUDAHost, 3);
    CHECK_EQ(tb_kDLOpenCL, 4);
    CHECK_EQ(tb_kDLVulkan, 7);
    CHECK_EQ(tb_kDLMetal, 8);
    CHECK_EQ(tb_kDLVPI, 9);
    CHECK_EQ(tb_kDLROCM, 10);
    CHECK_EQ(tb_kDLROCMHost, 11);
    CHECK_EQ(tb_kDLExtDev, 12);
    CHECK_EQ(tb_kDLCUDAManaged, 13);
    CHECK_EQ(tb_kDLOneAPI, 14);
    CHECK_EQ(tb_kDLWebGPU, 15);
    CHECK_EQ(tb_kDLHexagon, 16);
    CHECK_EQ(tb_kDLMAIA, 17);
    CHECK_EQ(tb_kDLTrn, 18);
    CHECK_EQ(tb_kDLInt, 0);
    CHECK_EQ(tb_kDLUInt, 1);
    CHECK_EQ(tb_kDLFloat, 2);
    CHECK_EQ(tb_kDLOpaqueHandle, 3);
    CHECK_EQ(tb_kDLBfloat, 4);
    CHECK_EQ(tb_kDLComplex, 5);
    CHECK_EQ(tb_kDLBool, 6);
    CHECK_EQ(tb_kDLFloat8_e3m4, 7);
    CHECK_EQ(tb_kDLFloat8_e4m3fn, 10);
    CHECK_EQ(tb_kDLFloat8_e5m2, 12);
    CHECK_EQ(tb_kDLFloat8_e8m0fnu, 14);
    CHECK_EQ(tb_kDLFloat6_e2m3fn, 15);
    CHECK_EQ(tb_kDLFloat4_e2m1fn, 17);

    /* The dtype table agrees: its codes are DLPack's, bits times lanes
     * are the element size, one lane but for a packed dtype. */
    for (int i = 0; i < TB_DT_COUNT; i++) {
        CHECK(tb_dlpack_type_code_name(tb_dtypes[i].dl_code) != NULL);
        CHECK_EQ(tb_dtypes[i].dl_bits * tb_dtypes[i].dl_lanes, 8 * tb_dtypes[i].element_size);
        CHECK_EQ(tb_dtypes[i].dl_lanes == 1, tb_dtypes[i].dl_bits >= 8);
    }
    CHECK_EQ(tb_dtypes[TB_DT_BOOL].dl_code, tb_kDLBool);
    CHECK_EQ(tb_dtypes[TB_DT_BFLOAT16].dl_code, tb_kDLBfloat);
    CHECK_EQ(tb_dtypes[TB_DT_COMPLEX64].dl_code, tb_kDLComplex);
    CHECK_EQ(tb_dtypes[TB_DT_COMPLEX32].dl_code, tb_kDLComplex);
    CHECK_EQ(tb_dtypes[TB_DT_COMPLEX32].dl_bits, 32);
    CHECK_EQ(tb_dtypes[TB_DT_UINT64].dl_code, tb_kDLUInt);
    CHECK_EQ(tb_dtypes[TB_DT_INT8].dl_code, tb_kDLInt);
    CHECK_EQ(tb_dtypes[TB_DT_FLOAT16].dl_code, tb_kDLFloat);
    CHECK_EQ(tb_dtypes[TB_DT_FLOAT8_E4M3FN].dl_code, tb_kDLFloat8_e4m3fn);
    CHECK_EQ(tb_dtypes[TB_DT_FLOAT8_E5M2].dl_code, tb_kDLFloat8_e5m2);

    for (int s = TB_DLC_OK; s <= TB_DLC_LAYOUT; s++)
        CHECK(strlen(tb_dlpack_status_text((tb_dlc_status)s)) > 0);
}

/* DLPack 1.3's C exchange API: the table a capsule holds is searched and
 * checked, never called (the entries here would crash if they were). */
static int never_alloc(tb_DLTensor *p, tb_DLManagedTensorVersioned **o, void *c,
                       void (*e)(void *, const char *, const char *))
{
    (void)p, (void)o, (void)c, (void)e;
    return -1;
}
static int never_from(void *obj, tb_DLManagedTensorVersioned **o)
{
    (void)obj, (void)o;
    return -1;
}
static int never_to(tb_DLManagedTensorVersioned *t, void **o)
{
    (void)t, (void)o;
    return -1;
}
static int never_stream(int32_t type, int32_t id, void **o)
{
    (void)type, (void)id, (void)o;
    return -1;
}

static tb_DLPackExchangeAPI xapi(uint32_t major, uint32_t minor)
{
    tb_DLPackExchangeAPI api = {.header = {.version = {major, minor}, .prev_api = NULL},
                                .managed_tensor_allocator = never_alloc,
                                .managed_tensor_from_py_object_no_sync = never_from,
                                .managed_tensor_to_py_object_no_sync = never_to,
                                .dltensor_from_py_object_no_sync = NULL,
                                .current_work_stream = never_stream};
    return api;
}

static void test_exchange_api(void)
{
    const tb_DLPackExchangeAPI *found = (const void *)1;
    CHECK_EQ(tb_dlpack_exchange_api_find(NULL, &found), TB_XAPI_NO_TABLE);
    CHECK(found == NULL);

    /* 1.3 and later 1.x minors are called; dltensor_from_py_object_no_sync may be NULL. */
    tb_DLPackExchangeAPI v13 = xapi(1, 3), v17 = xapi(1, 7);
    CHECK_EQ(tb_dlpack_exchange_api_find(&v13, &found), TB_XAPI_OK);
    CHECK(found == &v13);
    CHECK_EQ(tb_dlpack_exchange_api_find(&v17, &found), TB_XAPI_OK);
    CHECK(found == &v17);

    /* 0.x, 1.0-1.2 and 2.x alone: refused. */
    static const uint32_t refused[][2] = {{0, 0}, {0, 8}, {1, 0}, {1, 2}, {2, 0}, {UINT32_MAX, 3}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        tb_DLPackExchangeAPI t = xapi(refused[i][0], refused[i][1]);
        CHECK_EQ(tb_dlpack_exchange_api_find(&t, &found), TB_XAPI_VERSION);
        CHECK(found == NULL);
    }

    /* A 2.0 table whose prev_api is a 1.3 one: the 1.3 one. */
    tb_DLPackExchangeAPI v20 = xapi(2, 0);
    v20.header.prev_api = &v13.header;
    CHECK_EQ(tb_dlpack_exchange_api_find(&v20, &found), TB_XAPI_OK);
    CHECK(found == &v13);
    /* ... and over a 0.x one, none. */
    tb_DLPackExchangeAPI v08 = xapi(0, 8);
    v20.header.prev_api = &v08.header;
    CHECK_EQ(tb_dlpack_exchange_api_find(&v20, &found), TB_XAPI_VERSION);

    /* A loop of unsupported tables ends. */
    tb_DLPackExchangeAPI a = xapi(3, 0), b = xapi(2, 0);
    a.header.prev_api = &b.header;
    b.header.prev_api = &a.header;
    CHECK_EQ(tb_dlpack_exchange_api_find(&a, &found), TB_XAPI_VERSION);

    /* Each entry DLPack 1.3 requires, NULL: refused. */
    for (int entry = 0; entry < 4; entry++) {
        tb_DLPackExchangeAPI t = xapi(1, 3);
        if (entry == 0)
            t.managed_tensor_allocator = NULL;
        if (entry == 1)
            t.managed_tensor_from_py_object_no_sync = NULL;
        if (entry == 2)
            t.managed_tensor_to_py_object_no_sync = NULL;
        if (entry == 3)
            t.current_work_stream = NULL;
        CHECK_EQ(tb_dlpack_exchange_api_find(&t, &found), TB_XAPI_NULL_ENTRY);
        CHECK(found == NULL);
    }
    for (int st = 0; st <= TB_XAPI_STATUS_COUNT; st++)
        CHECK(tb_dlpack_xapi_text((tb_xapi_status)st) != NULL);
}

int main(void)
{
    test_declarations();
    test_valid();
    test_layouts();
    test_devices();
    test_dtypes();
    test_versions();
    test_flags();
    test_exchange_api();

    printf("c_test_dlpack: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
