/* The dtype table: the one source of truth for element types.
 * Pure C: no BEAM, no libtorch, so it is unit-tested and fuzzed on its own.
 *
 * In C, a dtype is one line of the list of the libtorch release that
 * brought it (TB_DTYPE_LIST below): the enum, the table, the shim's
 * compile-time checks of the scalar-type numbers and its "does the linked
 * libtorch have it" answer are all derived from these lists, and so are
 * what Erlang and Elixir see of them (tables/0: Inspect, the tests' lists);
 * the dtypes guide's table is checked against them: ARCHITECTURE.md,
 * "Adding a dtype". */
#ifndef TB_DTYPE_H
#define TB_DTYPE_H

#include <stddef.h>
#include <stdint.h>

/* X(ID, name, DLPack code, bits, element size, c10::ScalarType number,
 *   c10::ScalarType enumerator, Nx kind or NULL, Nx bits)
 * DLPack's bits are one lane's; an element holds element size * 8 / bits
 * lanes (1 but for a packed dtype).
 * Grouped by the libtorch release that has them: the shim checks each group
 * only against a libtorch that declares it. Nx's {:f, 8} is E5M2. Nx has no
 * complex32 (two float16), nor bool. */
#define TB_DTYPES_TORCH_1_13(X)                                               \
    X(BOOL, "bool", tb_kDLBool, 8, 1, 11, Bool, NULL, 0)                      \
    X(UINT8, "uint8", tb_kDLUInt, 8, 1, 0, Byte, "u", 8)                      \
    X(INT8, "int8", tb_kDLInt, 8, 1, 1, Char, "s", 8)                         \
    X(INT16, "int16", tb_kDLInt, 16, 2, 2, Short, "s", 16)                    \
    X(INT32, "int32", tb_kDLInt, 32, 4, 3, Int, "s", 32)                      \
    X(INT64, "int64", tb_kDLInt, 64, 8, 4, Long, "s", 64)                     \
    X(FLOAT16, "float16", tb_kDLFloat, 16, 2, 5, Half, "f", 16)               \
    X(BFLOAT16, "bfloat16", tb_kDLBfloat, 16, 2, 15, BFloat16, "bf", 16)      \
    X(FLOAT32, "float32", tb_kDLFloat, 32, 4, 6, Float, "f", 32)              \
    X(FLOAT64, "float64", tb_kDLFloat, 64, 8, 7, Double, "f", 64)             \
    X(COMPLEX32, "complex32", tb_kDLComplex, 32, 4, 8, ComplexHalf, NULL, 0)  \
    X(COMPLEX64, "complex64", tb_kDLComplex, 64, 8, 9, ComplexFloat, "c", 64) \
    X(COMPLEX128, "complex128", tb_kDLComplex, 128, 16, 10, ComplexDouble, "c", 128)
#define TB_DTYPES_TORCH_2_1(X)                                                                      \
    X(FLOAT8_E4M3FN, "float8_e4m3fn", tb_kDLFloat8_e4m3fn, 8, 1, 24, Float8_e4m3fn, "f8_e4m3fn", 8) \
    X(FLOAT8_E5M2, "float8_e5m2", tb_kDLFloat8_e5m2, 8, 1, 23, Float8_e5m2, "f", 8)
#define TB_DTYPES_TORCH_2_2(X)                                                                       \
    X(FLOAT8_E5M2FNUZ, "float8_e5m2fnuz", tb_kDLFloat8_e5m2fnuz, 8, 1, 25, Float8_e5m2fnuz, NULL, 0) \
    X(FLOAT8_E4M3FNUZ, "float8_e4m3fnuz", tb_kDLFloat8_e4m3fnuz, 8, 1, 26, Float8_e4m3fnuz, NULL, 0)
#define TB_DTYPES_TORCH_2_3(X)                                  \
    X(UINT16, "uint16", tb_kDLUInt, 16, 2, 27, UInt16, "u", 16) \
    X(UINT32, "uint32", tb_kDLUInt, 32, 4, 28, UInt32, "u", 32) \
    X(UINT64, "uint64", tb_kDLUInt, 64, 8, 29, UInt64, "u", 64)
#define TB_DTYPES_TORCH_2_7(X) \
    X(FLOAT8_E8M0FNU, "float8_e8m0fnu", tb_kDLFloat8_e8m0fnu, 8, 1, 44, Float8_e8m0fnu, NULL, 0)
/* Two 4-bit floats a byte: DLPack's {17, 4, 2} (two lanes of 4 bits), an
 * element of 1 byte. The format's F4 counts the 4-bit values: see
 * TB_DTYPE_SAFETENSORS. */
#define TB_DTYPES_TORCH_2_8(X) \
    X(FLOAT4_E2M1FN_X2, "float4_e2m1fn_x2", tb_kDLFloat4_e2m1fn, 4, 1, 45, Float4_e2m1fn_x2, NULL, 0)

#define TB_DTYPE_LIST(X)    \
    TB_DTYPES_TORCH_1_13(X) \
    TB_DTYPES_TORCH_2_1(X) TB_DTYPES_TORCH_2_2(X) TB_DTYPES_TORCH_2_3(X) TB_DTYPES_TORCH_2_7(X) TB_DTYPES_TORCH_2_8(X)

/* Other names accepted on input: A(name, ID). ExTorch's (and libtorch's)
 * names, and Nx's shorthands, a few a line (clang-format leaves them so). */
/* clang-format off */
#define TB_DTYPE_ALIASES(A)                                                                       \
    A("byte", UINT8) A("char", INT8) A("short", INT16) A("int", INT32) A("long", INT64)         \
    A("half", FLOAT16) A("float", FLOAT32) A("double", FLOAT64)                                   \
    A("chalf", COMPLEX32) A("complex_half", COMPLEX32) A("cfloat", COMPLEX64)                     \
    A("complex_float", COMPLEX64) A("cdouble", COMPLEX128) A("complex_double", COMPLEX128)      \
    A("u8", UINT8) A("u16", UINT16) A("u32", UINT32) A("u64", UINT64)                             \
    A("s8", INT8) A("s16", INT16) A("s32", INT32) A("s64", INT64)                                 \
    A("f16", FLOAT16) A("bf16", BFLOAT16) A("f32", FLOAT32) A("f64", FLOAT64)                     \
    A("c64", COMPLEX64) A("c128", COMPLEX128)
/* clang-format on */

/* The safetensors format's dtypes, every one of them (safetensors 0.8 has
 * 22): S(format name, bits of one value, ID of the table's dtype or NONE).
 * A tensor of the format holds values of that many bits, row-major and
 * packed (F4: two values a byte, F6: four values in three bytes); its shape
 * counts values, and its last dimension's bits fill whole bytes (so each
 * row starts on a byte; a 0-dim tensor is one value, which must fill
 * bytes). Its bytes are its values' bits / 8. The table's dtype holds one
 * or more of the format's values an element (float4_e2m1fn_x2 two F4
 * values): the tensor's last dimension counts elements, the format's
 * divided by that number. NONE: no dtype of the table (no libtorch has
 * one); such a tensor opens only as its bytes. */
/* clang-format off */
#define TB_DTYPE_SAFETENSORS(S)                                                                   \
    S("BOOL", 8, BOOL) S("U8", 8, UINT8) S("I8", 8, INT8) S("I16", 16, INT16)                     \
    S("U16", 16, UINT16) S("I32", 32, INT32) S("U32", 32, UINT32) S("I64", 64, INT64)             \
    S("U64", 64, UINT64) S("F16", 16, FLOAT16) S("BF16", 16, BFLOAT16) S("F32", 32, FLOAT32)      \
    S("F64", 64, FLOAT64) S("C64", 64, COMPLEX64) S("F8_E4M3", 8, FLOAT8_E4M3FN)                  \
    S("F8_E5M2", 8, FLOAT8_E5M2) S("F8_E4M3FNUZ", 8, FLOAT8_E4M3FNUZ)                             \
    S("F8_E5M2FNUZ", 8, FLOAT8_E5M2FNUZ) S("F8_E8M0", 8, FLOAT8_E8M0FNU)                          \
    S("F4", 4, FLOAT4_E2M1FN_X2) S("F6_E2M3", 6, NONE) S("F6_E3M2", 6, NONE)
/* clang-format on */

#define TB_DTYPE_ENUM_(id, ...) TB_DT_##id,
typedef enum { TB_DTYPE_LIST(TB_DTYPE_ENUM_) TB_DT_COUNT, TB_DT_NONE = -1 } tb_dtype_id;
#undef TB_DTYPE_ENUM_

#define TB_DTYPE_COUNT_ALIAS_(name, id) +1
enum { TB_DT_ALIAS_COUNT = 0 TB_DTYPE_ALIASES(TB_DTYPE_COUNT_ALIAS_) };
#undef TB_DTYPE_COUNT_ALIAS_
/* Canonical names and aliases. The cast: C++20 deprecates arithmetic
 * between two enumerations. */
enum { TB_DT_NAME_COUNT = (int)TB_DT_COUNT + TB_DT_ALIAS_COUNT };

typedef struct {
    const char *name; /* canonical atom */
    uint8_t dl_code;  /* DLPack {code, bits, lanes}: codes from dlpack.h */
    uint8_t dl_bits;
    uint16_t dl_lanes;
    uint8_t element_size;     /* bytes */
    int8_t torch_scalar_type; /* c10::ScalarType value; checked in the shim */
    const char *nx_kind;      /* Nx type {kind, bits}; NULL when Nx has none */
    uint8_t nx_bits;
} tb_dtype;

extern const tb_dtype tb_dtypes[TB_DT_COUNT];

/* The libtorch release that brought each dtype ("1.13", ...): its group. */
extern const char *const tb_dtype_since[TB_DT_COUNT];

/* What a dtype's elements are, from its DLPack code: "bool", "uint",
 * "int", "float" (IEEE), "bfloat", "complex" (two IEEE floats) or "float8". */
const char *tb_dtype_kind(tb_dtype_id id);

typedef struct {
    const char *name;
    tb_dtype_id id;
} tb_dtype_alias;

extern const tb_dtype_alias tb_dtype_aliases[TB_DT_ALIAS_COUNT];

/* The lookup of names and Nx types, built from the table once. A name is
 * compared as a word the caller chooses: the NIF interns names as atoms (so
 * a lookup compares words, never strings); the C tests and the fuzzer
 * intern strings. The same code runs in all three. */
typedef uintptr_t tb_dtype_key;

typedef struct {
    struct {
        tb_dtype_key name;
        tb_dtype_id id;
    } names[TB_DT_NAME_COUNT]; /* canonical names first */
    struct {
        tb_dtype_key kind;
        unsigned bits;
        tb_dtype_id id;
    } nx[TB_DT_COUNT];
    size_t nx_count;
} tb_dtype_index;

/* intern(name, arg) gives the key of a name: equal names, equal keys. */
void tb_dtype_index_build(tb_dtype_index *index, tb_dtype_key (*intern)(const char *name, void *arg), void *arg);

/* Each returns 1 and sets *out when the key names a dtype, else 0 and
 * leaves *out alone. */
int tb_dtype_find_name(const tb_dtype_index *index, tb_dtype_key name, tb_dtype_id *out);
int tb_dtype_find_nx(const tb_dtype_index *index, tb_dtype_key kind, unsigned long bits, tb_dtype_id *out);
int tb_dtype_from_dlpack(unsigned code, unsigned bits, unsigned lanes, tb_dtype_id *out);
/* The format's dtypes (TB_DTYPE_SAFETENSORS), in its order. */
#define TB_DTYPE_ST_COUNT_(name, bits, id) +1
enum { TB_ST_DTYPE_COUNT = 0 TB_DTYPE_SAFETENSORS(TB_DTYPE_ST_COUNT_) };
#undef TB_DTYPE_ST_COUNT_

typedef struct {
    const char *name; /* the format's */
    uint8_t bits;     /* of one value */
    tb_dtype_id id;   /* the table's dtype, or TB_DT_NONE */
} tb_st_dtype;

extern const tb_st_dtype tb_st_dtypes[TB_ST_DTYPE_COUNT];

/* The safetensors name of a dtype, or NULL; and the format's dtype of a
 * name (len bytes, not NUL-terminated): 1 and *out (an index of
 * tb_st_dtypes) when the format has it, else 0. */
const char *tb_dtype_safetensors_name(tb_dtype_id id);
/* The format's dtype (an index of tb_st_dtypes) of a dtype, or -1. */
int tb_dtype_st_of(tb_dtype_id id);
int tb_dtype_from_safetensors(const char *name, size_t len, int *out);
/* How many of the format's values of st_dtype one element of its dtype
 * holds (1 but for a packed dtype: float4_e2m1fn_x2's 2). */
unsigned tb_dtype_st_per_element(int st_dtype);
/* The dtype of a c10::ScalarType number; 0 when the table has none. */
int tb_dtype_of_scalar_type(int scalar_type, tb_dtype_id *out);

#endif
