/* The safetensors header decoder (c_src/format/tb_safetensors_decode.c):
 * each of its named refusals made by a header of its own, with the tensor
 * it names; a valid header's entries, shapes and metadata; the writer's
 * output (tb_safetensors_encode.c) decoded back. Every refusal of the
 * table has a case here, or is listed as one no header can make (out of
 * memory). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tb_safetensors.h"
#include "tb_safetensors_decode.h"
#include "tb_safetensors_encode.h"

typedef struct {
    tb_safetensors_error error;
    uint64_t data_bytes;
    const char *json;
    const char *names; /* the tensor the refusal names, or NULL */
} refusal;

#define E(name, dtype, shape, b, e) \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void packed(void);

static const refusal cases[] = {
    {TB_ST_NOT_UTF8, 0, "{\"\xff\":{}}", NULL},
    {TB_ST_NOT_OBJECT, 0, "[]", NULL},
    {TB_ST_NOT_OBJECT, 0, " {}", NULL},
    {TB_ST_BAD_JSON, 0, "{\"a\":", NULL},
    {TB_ST_BAD_JSON, 0, "{} x", NULL},
    {TB_ST_BAD_JSON, 0, "{\"a\\ud800\":1}", NULL},
    {TB_ST_TOO_DEEP, 1,
     "{" E("a", "U8", "[1]", 0, 1) ",\"b\":{\"dtype\":\"U8\",\"x\":"
                                   "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
     "b"},
    {TB_ST_DUPLICATE, 2, "{" E("a", "U8", "[1]", 0, 1) "," E("a", "U8", "[1]", 1, 2) "}", "a"},
    {TB_ST_DUPLICATE, 0, "{\"__metadata__\":{},\"__metadata__\":{}}", "__metadata__"},
    {TB_ST_BAD_ENTRY, 1, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", "a"},
    {TB_ST_BAD_ENTRY, 1, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", "a"},
    {TB_ST_BAD_ENTRY, 1, "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", "a"},
    {TB_ST_BAD_ENTRY, 1, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", "a"},
    {TB_ST_BAD_ENTRY, 1, "{\"a\":[]}", "a"},
    {TB_ST_UNKNOWN_DTYPE, 1, "{" E("a", "F5", "[1]", 0, 1) "}", "a"},
    {TB_ST_PARTIAL_BYTE, 1, "{" E("a", "F4", "[2,1]", 0, 1) "}", "a"},
    {TB_ST_PARTIAL_BYTE, 1, "{" E("a", "F4", "[]", 0, 1) "}", "a"},
    {TB_ST_PARTIAL_BYTE, 3, "{" E("a", "F6_E2M3", "[2]", 0, 3) "}", "a"},
    {TB_ST_TOO_MANY_DIMS, 0,
     "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,0],\"shape\":[0,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
     "1,1,"
     "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}}",
     "a"},
    {TB_ST_OVERFLOW, 0, "{" E("a", "F32", "[4611686018427387904,4]", 0, 0) "}", "a"},
    {TB_ST_OVERFLOW, 0, "{" E("a", "F32", "[99999999999999999999]", 0, 0) "}", "a"},
    {TB_ST_SIZE_MISMATCH, 4, "{" E("a", "F32", "[2]", 0, 4) "}", "a"},
    {TB_ST_BAD_OFFSETS, 3, "{" E("a", "U8", "[2]", 0, 2) "," E("b", "U8", "[2]", 1, 3) "}", "b"},
    {TB_ST_BAD_OFFSETS, 4, "{" E("a", "U8", "[2]", 0, 2) "," E("b", "U8", "[1]", 3, 4) "}", "b"},
    {TB_ST_BAD_OFFSETS, 2, "{" E("a", "U8", "[0]", 2, 0) "}", "a"},
    {TB_ST_INCOMPLETE, 3, "{" E("a", "U8", "[2]", 0, 2) "}", NULL},
    {TB_ST_INCOMPLETE, 1, "{" E("a", "U8", "[2]", 0, 2) "}", "a"},
    {TB_ST_BAD_METADATA, 0, "{\"__metadata__\":{\"k\":1}}", NULL},
    {TB_ST_BAD_METADATA, 0, "{\"__metadata__\":[]}", NULL},
};

static void prefixes(void)
{
    unsigned char p[8] = {2, 0, 0, 0, 0, 0, 0, 0};
    uint64_t n = 0;
    CHECK_EQ(tb_safetensors_prefix(p, 7, &n), TB_ST_TOO_SMALL);
    CHECK_EQ(tb_safetensors_prefix(p, 9, &n), TB_ST_HEADER_PAST_END);
    CHECK_EQ(tb_safetensors_prefix(p, 10, &n), TB_ST_OK);
    CHECK_EQU(n, 2);
    unsigned char big[8] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0}; /* 100000001 */
    CHECK_EQ(tb_safetensors_prefix(big, 200000000, &n), TB_ST_HEADER_TOO_LARGE);
    unsigned char all[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    CHECK_EQ(tb_safetensors_prefix(all, UINT64_MAX, &n), TB_ST_HEADER_TOO_LARGE);
}

static void refusals(void)
{
    int covered[TB_ST_NO_MEMORY + 1] = {0};
    covered[TB_ST_OK] = covered[TB_ST_NO_MEMORY] = 1; /* no header makes those */
    covered[TB_ST_TOO_SMALL] = covered[TB_ST_HEADER_TOO_LARGE] = covered[TB_ST_HEADER_PAST_END] = 1; /* prefixes */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const refusal *c = &cases[i];
        tb_safetensors_header h;
        int ok = tb_safetensors_decode(c->json, strlen(c->json), c->data_bytes, &h);
        CHECK(!ok);
        if (h.error != c->error)
            printf("case %zu: %s\n", i, c->json);
        CHECK_EQ(h.error, c->error);
        if (c->names)
            CHECK(h.name.len == strlen(c->names) && memcmp(h.name.ptr, c->names, h.name.len) == 0);
        covered[c->error] = 1;
        tb_safetensors_free(&h);
    }
    for (int e = 0; e <= TB_ST_NO_MEMORY; e++) {
        if (!covered[e])
            printf("no case for %s\n", tb_safetensors_error_text((tb_safetensors_error)e));
        CHECK(covered[e]);
    }
}

static void valid(void)
{
    const char *json = "{\"__metadata__\":{\"k\":\"v\\n\"}," E("b", "I64", "[]", 12, 20) "," E(
        "a\\u00e9", "F32", "[3]", 0, 12) "," E("e", "BF16", "[0,4]", 20, 20) "}  ";
    tb_safetensors_header h;
    CHECK(tb_safetensors_decode(json, strlen(json), 20, &h));
    CHECK_EQU(h.count, 3);
    CHECK(h.has_meta && h.meta_count == 1 && h.meta[0].value.len == 2 && h.meta[0].value.ptr[1] == '\n');
    /* ordered by offset */
    CHECK(h.entries[0].name.len == 3 && memcmp(h.entries[0].name.ptr, "a\xc3\xa9", 3) == 0);
    CHECK_EQ(h.entries[0].dtype, TB_DT_FLOAT32);
    CHECK(h.entries[0].ndim == 1 && h.entries[0].shape[0] == 3);
    CHECK(h.entries[1].ndim == 0 && h.entries[1].dtype == TB_DT_INT64);
    CHECK(h.entries[2].ndim == 2 && h.entries[2].shape[0] == 0 && h.entries[2].shape[1] == 4);
    size_t len;
    char *again = tb_safetensors_encode(h.entries, h.count, h.meta, h.meta_count, h.has_meta, &len);
    CHECK(again && len % 8 == 0);
    tb_safetensors_header h2;
    CHECK(tb_safetensors_decode(again, len, 20, &h2));
    CHECK_EQU(h2.count, 3);
    CHECK(h2.entries[0].name.len == 3 && memcmp(h2.entries[0].name.ptr, "a\xc3\xa9", 3) == 0);
    free(again);
    tb_safetensors_free(&h2);
    tb_safetensors_free(&h);
    /* every dtype the table names for the format decodes to it */
    for (int id = 0; id < TB_DT_COUNT; id++) {
        const char *name = tb_dtype_safetensors_name((tb_dtype_id)id);
        if (!name)
            continue;
        int got;
        CHECK(tb_dtype_from_safetensors(name, strlen(name), &got) && tb_st_dtypes[got].id == (tb_dtype_id)id);
    }
    packed();
}

/* Every dtype of the format, in a tensor of 8 values a row: its bytes are
 * its bits, its tensor's last dimension the values over those an element
 * of its dtype holds; written back, the same header. */
static void packed(void)
{
    for (int f = 0; f < TB_ST_DTYPE_COUNT; f++) {
        char json[256];
        unsigned bytes = 2 * tb_st_dtypes[f].bits; /* [2, 8] values */
        snprintf(json, sizeof json, "{\"t\":{\"dtype\":\"%s\",\"shape\":[2,8],\"data_offsets\":[0,%u]}}",
                 tb_st_dtypes[f].name, bytes);
        tb_safetensors_header h;
        CHECK(tb_safetensors_decode(json, strlen(json), bytes, &h));
        CHECK(h.count == 1 && h.entries[0].format == f && h.entries[0].dtype == tb_st_dtypes[f].id);
        int64_t shape[2];
        int has = tb_safetensors_tensor_shape(&h.entries[0], shape);
        CHECK_EQ(has, tb_st_dtypes[f].id != TB_DT_NONE);
        if (has)
            CHECK(shape[0] == 2 &&
                  shape[1] * tb_dtypes[tb_st_dtypes[f].id].element_size * 8 == 8 * tb_st_dtypes[f].bits);
        size_t len;
        char *again = tb_safetensors_encode(h.entries, h.count, NULL, 0, 0, &len);
        tb_safetensors_header h2;
        CHECK(again && tb_safetensors_decode(again, len, bytes, &h2) && h2.entries[0].format == f &&
              h2.entries[0].shape[1] == 8);
        free(again);
        tb_safetensors_free(&h2);
        tb_safetensors_free(&h);
    }
}

int main(void)
{
    prefixes();
    refusals();
    valid();
    printf("test_safetensors: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
