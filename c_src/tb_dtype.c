#include "tb_dtype.h"

#include "tensor_blob_dlpack.h"

#include <string.h>

/* Order follows tb_dtype_id. torch_scalar_type values are c10::ScalarType's
 * (stable across releases); torch_shim.cpp asserts each at compile time. */
const tb_dtype tb_dtypes[TB_DT_COUNT] = {
    [TB_DT_BOOL] = {"bool", tb_kDLBool, 8, 1, 1, 11, NULL, 0},
    [TB_DT_UINT8] = {"uint8", tb_kDLUInt, 8, 1, 1, 0, "u", 8},
    [TB_DT_INT8] = {"int8", tb_kDLInt, 8, 1, 1, 1, "s", 8},
    [TB_DT_INT16] = {"int16", tb_kDLInt, 16, 1, 2, 2, "s", 16},
    [TB_DT_INT32] = {"int32", tb_kDLInt, 32, 1, 4, 3, "s", 32},
    [TB_DT_INT64] = {"int64", tb_kDLInt, 64, 1, 8, 4, "s", 64},
    [TB_DT_UINT16] = {"uint16", tb_kDLUInt, 16, 1, 2, 27, "u", 16},
    [TB_DT_UINT32] = {"uint32", tb_kDLUInt, 32, 1, 4, 28, "u", 32},
    [TB_DT_UINT64] = {"uint64", tb_kDLUInt, 64, 1, 8, 29, "u", 64},
    [TB_DT_FLOAT16] = {"float16", tb_kDLFloat, 16, 1, 2, 5, "f", 16},
    [TB_DT_BFLOAT16] = {"bfloat16", tb_kDLBfloat, 16, 1, 2, 15, "bf", 16},
    [TB_DT_FLOAT32] = {"float32", tb_kDLFloat, 32, 1, 4, 6, "f", 32},
    [TB_DT_FLOAT64] = {"float64", tb_kDLFloat, 64, 1, 8, 7, "f", 64},
    [TB_DT_COMPLEX64] = {"complex64", tb_kDLComplex, 64, 1, 8, 9, "c", 64},
    [TB_DT_COMPLEX128] = {"complex128", tb_kDLComplex, 128, 1, 16, 10, "c", 128},
    [TB_DT_FLOAT8_E4M3FN] = {"float8_e4m3fn", tb_kDLFloat8_e4m3fn, 8, 1, 1, 24, "f8_e4m3fn", 8},
    [TB_DT_FLOAT8_E5M2] = {"float8_e5m2", tb_kDLFloat8_e5m2, 8, 1, 1, 23, "f", 8},
};

const tb_dtype_alias tb_dtype_aliases[] = {
    {"byte", TB_DT_UINT8},
    {"char", TB_DT_INT8},
    {"short", TB_DT_INT16},
    {"int", TB_DT_INT32},
    {"long", TB_DT_INT64},
    {"half", TB_DT_FLOAT16},
    {"float", TB_DT_FLOAT32},
    {"double", TB_DT_FLOAT64},
    {"cfloat", TB_DT_COMPLEX64},
    {"complex_float", TB_DT_COMPLEX64},
    {"cdouble", TB_DT_COMPLEX128},
    {"complex_double", TB_DT_COMPLEX128},
    /* Nx's shorthands (Nx.Type's :f32 for {:f, 32}, ...). */
    {"u8", TB_DT_UINT8},
    {"u16", TB_DT_UINT16},
    {"u32", TB_DT_UINT32},
    {"u64", TB_DT_UINT64},
    {"s8", TB_DT_INT8},
    {"s16", TB_DT_INT16},
    {"s32", TB_DT_INT32},
    {"s64", TB_DT_INT64},
    {"f16", TB_DT_FLOAT16},
    {"bf16", TB_DT_BFLOAT16},
    {"f32", TB_DT_FLOAT32},
    {"f64", TB_DT_FLOAT64},
    {"c64", TB_DT_COMPLEX64},
    {"c128", TB_DT_COMPLEX128},
};

const size_t tb_dtype_alias_count = sizeof tb_dtype_aliases / sizeof tb_dtype_aliases[0];

int tb_dtype_from_name(const char *name, tb_dtype_id *out)
{
    for (int i = 0; i < TB_DT_COUNT; i++) {
        if (strcmp(tb_dtypes[i].name, name) == 0) {
            *out = (tb_dtype_id)i;
            return 1;
        }
    }
    for (size_t i = 0; i < tb_dtype_alias_count; i++) {
        if (strcmp(tb_dtype_aliases[i].name, name) == 0) {
            *out = tb_dtype_aliases[i].id;
            return 1;
        }
    }
    return 0;
}

int tb_dtype_from_nx(const char *kind, unsigned long bits, tb_dtype_id *out)
{
    for (int i = 0; i < TB_DT_COUNT; i++) {
        const tb_dtype *d = &tb_dtypes[i];
        if (d->nx_kind && d->nx_bits == bits && strcmp(d->nx_kind, kind) == 0) {
            *out = (tb_dtype_id)i;
            return 1;
        }
    }
    return 0;
}

int tb_dtype_from_dlpack(unsigned code, unsigned bits, unsigned lanes, tb_dtype_id *out)
{
    if (lanes != 1)
        return 0;
    for (int i = 0; i < TB_DT_COUNT; i++) {
        if (tb_dtypes[i].dl_code == code && tb_dtypes[i].dl_bits == bits) {
            *out = (tb_dtype_id)i;
            return 1;
        }
    }
    return 0;
}
