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
#define TB_DTYPES_TORCH_2_3(X)                                  \
    X(UINT16, "uint16", tb_kDLUInt, 16, 2, 27, UInt16, "u", 16) \
    X(UINT32, "uint32", tb_kDLUInt, 32, 4, 28, UInt32, "u", 32) \
    X(UINT64, "uint64", tb_kDLUInt, 64, 8, 29, UInt64, "u", 64)

#define TB_DTYPE_LIST(X) TB_DTYPES_TORCH_1_13(X) TB_DTYPES_TORCH_2_1(X) TB_DTYPES_TORCH_2_3(X)

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

/* The safetensors format's name of each dtype it shares with the table:
 * S(format name, ID). The format's element sizes are the table's. A dtype
 * not named here has no safetensors name (tables/0 gives nil). */
/* clang-format off */
#define TB_DTYPE_SAFETENSORS(S)                                                                   \
    S("BOOL", BOOL) S("U8", UINT8) S("I8", INT8) S("I16", INT16) S("U16", UINT16)               \
    S("I32", INT32) S("U32", UINT32) S("I64", INT64) S("U64", UINT64)                             \
    S("F16", FLOAT16) S("BF16", BFLOAT16) S("F32", FLOAT32) S("F64", FLOAT64)                     \
    S("F8_E4M3", FLOAT8_E4M3FN) S("F8_E5M2", FLOAT8_E5M2) S("C64", COMPLEX64)
/* clang-format on */

#define TB_DTYPE_ENUM_(id, ...) TB_DT_##id,
typedef enum { TB_DTYPE_LIST(TB_DTYPE_ENUM_) TB_DT_COUNT } tb_dtype_id;
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
/* The safetensors name of a dtype, or NULL; and the dtype of a name (len
 * bytes, not NUL-terminated): 1 and *out when the format and the table
 * share it, else 0. */
const char *tb_dtype_safetensors_name(tb_dtype_id id);
int tb_dtype_from_safetensors(const char *name, size_t len, tb_dtype_id *out);
/* The dtype of a c10::ScalarType number; 0 when the table has none. */
int tb_dtype_of_scalar_type(int scalar_type, tb_dtype_id *out);

#endif
