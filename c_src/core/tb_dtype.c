#include "tb_dtype.h"

#include <string.h>

#include "tensor_blob_dlpack.h"

#define TB_DTYPE_ROW_(id, name, code, bits, size, st, c10_name, nx_kind, nx_bits) \
    [TB_DT_##id] = {name, code, bits, (size)*8 / (bits), size, st, nx_kind, nx_bits},
const tb_dtype tb_dtypes[TB_DT_COUNT] = {TB_DTYPE_LIST(TB_DTYPE_ROW_)};
#undef TB_DTYPE_ROW_

#define TB_DTYPE_SINCE_1_13(id, ...) [TB_DT_##id] = "1.13",
#define TB_DTYPE_SINCE_2_1(id, ...) [TB_DT_##id] = "2.1",
#define TB_DTYPE_SINCE_2_2(id, ...) [TB_DT_##id] = "2.2",
#define TB_DTYPE_SINCE_2_3(id, ...) [TB_DT_##id] = "2.3",
#define TB_DTYPE_SINCE_2_7(id, ...) [TB_DT_##id] = "2.7",
#define TB_DTYPE_SINCE_2_8(id, ...) [TB_DT_##id] = "2.8",
const char *const tb_dtype_since[TB_DT_COUNT] = {
    TB_DTYPES_TORCH_1_13(TB_DTYPE_SINCE_1_13) TB_DTYPES_TORCH_2_1(TB_DTYPE_SINCE_2_1)
        TB_DTYPES_TORCH_2_2(TB_DTYPE_SINCE_2_2) TB_DTYPES_TORCH_2_3(TB_DTYPE_SINCE_2_3)
            TB_DTYPES_TORCH_2_7(TB_DTYPE_SINCE_2_7) TB_DTYPES_TORCH_2_8(TB_DTYPE_SINCE_2_8)};

const char *tb_dtype_kind(tb_dtype_id id)
{
    switch (tb_dtypes[id].dl_code) {
    case tb_kDLBool: return "bool";
    case tb_kDLUInt: return "uint";
    case tb_kDLInt: return "int";
    case tb_kDLFloat: return "float";
    case tb_kDLBfloat: return "bfloat";
    case tb_kDLComplex: return "complex";
    case tb_kDLFloat4_e2m1fn: return "float4";
    default: return "float8";
    }
}

#define TB_DTYPE_ALIAS_ROW_(name, id) {name, TB_DT_##id},
const tb_dtype_alias tb_dtype_aliases[TB_DT_ALIAS_COUNT] = {TB_DTYPE_ALIASES(TB_DTYPE_ALIAS_ROW_)};
#undef TB_DTYPE_ALIAS_ROW_

void tb_dtype_index_build(tb_dtype_index *index, tb_dtype_key (*intern)(const char *name, void *arg), void *arg)
{
    for (int i = 0; i < TB_DT_COUNT; i++) {
        index->names[i].name = intern(tb_dtypes[i].name, arg);
        index->names[i].id = (tb_dtype_id)i;
    }
    for (int a = 0; a < TB_DT_ALIAS_COUNT; a++) {
        index->names[TB_DT_COUNT + a].name = intern(tb_dtype_aliases[a].name, arg);
        index->names[TB_DT_COUNT + a].id = tb_dtype_aliases[a].id;
    }
    index->nx_count = 0;
    for (int i = 0; i < TB_DT_COUNT; i++) {
        if (!tb_dtypes[i].nx_kind)
            continue;
        index->nx[index->nx_count].kind = intern(tb_dtypes[i].nx_kind, arg);
        index->nx[index->nx_count].bits = tb_dtypes[i].nx_bits;
        index->nx[index->nx_count].id = (tb_dtype_id)i;
        index->nx_count++;
    }
}

int tb_dtype_find_name(const tb_dtype_index *index, tb_dtype_key name, tb_dtype_id *out)
{
    for (size_t i = 0; i < sizeof index->names / sizeof index->names[0]; i++) {
        if (index->names[i].name == name) {
            *out = index->names[i].id;
            return 1;
        }
    }
    return 0;
}

int tb_dtype_find_nx(const tb_dtype_index *index, tb_dtype_key kind, unsigned long bits, tb_dtype_id *out)
{
    for (size_t i = 0; i < index->nx_count; i++) {
        if (index->nx[i].kind == kind && index->nx[i].bits == bits) {
            *out = index->nx[i].id;
            return 1;
        }
    }
    return 0;
}

int tb_dtype_from_dlpack(unsigned code, unsigned bits, unsigned lanes, tb_dtype_id *out)
{
    for (int i = 0; i < TB_DT_COUNT; i++) {
        if (tb_dtypes[i].dl_code == code && tb_dtypes[i].dl_bits == bits && tb_dtypes[i].dl_lanes == lanes) {
            *out = (tb_dtype_id)i;
            return 1;
        }
    }
    return 0;
}

/* The dtype of each c10::ScalarType number, plus one (0: none), indexed:
 * every tensor argument is described through it. */
#define TB_SCALAR_TYPE_ROW_(id, name, code, bits, size, st, ...) [st] = TB_DT_##id + 1,
static const signed char dtype_of_scalar_type[] = {TB_DTYPE_LIST(TB_SCALAR_TYPE_ROW_)};
#undef TB_SCALAR_TYPE_ROW_

int tb_dtype_of_scalar_type(int scalar_type, tb_dtype_id *out)
{
    if (scalar_type < 0 || scalar_type >= (int)sizeof dtype_of_scalar_type || !dtype_of_scalar_type[scalar_type])
        return 0;
    *out = (tb_dtype_id)(dtype_of_scalar_type[scalar_type] - 1);
    return 1;
}

#define TB_DTYPE_ST_ROW_(name, bits, id) {name, bits, TB_DT_##id},
const tb_st_dtype tb_st_dtypes[TB_ST_DTYPE_COUNT] = {TB_DTYPE_SAFETENSORS(TB_DTYPE_ST_ROW_)};
#undef TB_DTYPE_ST_ROW_

int tb_dtype_st_of(tb_dtype_id id)
{
    for (int i = 0; i < TB_ST_DTYPE_COUNT; i++)
        if (tb_st_dtypes[i].id == id)
            return i;
    return -1;
}

const char *tb_dtype_safetensors_name(tb_dtype_id id)
{
    int i = tb_dtype_st_of(id);
    return i < 0 ? NULL : tb_st_dtypes[i].name;
}

int tb_dtype_from_safetensors(const char *name, size_t len, int *out)
{
    for (int i = 0; i < TB_ST_DTYPE_COUNT; i++) {
        const char *n = tb_st_dtypes[i].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) {
            *out = i;
            return 1;
        }
    }
    return 0;
}

unsigned tb_dtype_st_per_element(int st_dtype)
{
    const tb_st_dtype *f = &tb_st_dtypes[st_dtype];
    return f->id == TB_DT_NONE ? 1 : tb_dtypes[f->id].element_size * 8u / f->bits;
}
