/* The dtype table: the one source of truth for element types.
 * Pure C: no BEAM, no libtorch, so it is unit-tested and fuzzed on its own. */
#ifndef TB_DTYPE_H
#define TB_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    TB_DT_BOOL,
    TB_DT_UINT8,
    TB_DT_INT8,
    TB_DT_INT16,
    TB_DT_INT32,
    TB_DT_INT64,
    TB_DT_UINT16,
    TB_DT_UINT32,
    TB_DT_UINT64,
    TB_DT_FLOAT16,
    TB_DT_BFLOAT16,
    TB_DT_FLOAT32,
    TB_DT_FLOAT64,
    TB_DT_COMPLEX64,
    TB_DT_COMPLEX128,
    TB_DT_FLOAT8_E4M3FN,
    TB_DT_FLOAT8_E5M2,
    TB_DT_COUNT
} tb_dtype_id;

typedef struct {
    const char *name;          /* canonical atom */
    uint8_t dl_code;           /* DLPack {code, bits, lanes}: codes from dlpack.h */
    uint8_t dl_bits;
    uint16_t dl_lanes;
    uint8_t element_size;      /* bytes */
    int8_t torch_scalar_type;  /* c10::ScalarType value; checked in the shim */
    const char *nx_kind;       /* Nx type {kind, bits}; NULL when Nx has none */
    uint8_t nx_bits;
} tb_dtype;

extern const tb_dtype tb_dtypes[TB_DT_COUNT];

/* Other names accepted on input: ExTorch's (and libtorch's) names. */
typedef struct {
    const char *name;
    tb_dtype_id id;
} tb_dtype_alias;

extern const tb_dtype_alias tb_dtype_aliases[];
extern const size_t tb_dtype_alias_count;

/* Each returns 1 and sets *out when the input names a dtype, else 0. */
int tb_dtype_from_name(const char *name, tb_dtype_id *out);
int tb_dtype_from_nx(const char *kind, unsigned long bits, tb_dtype_id *out);
int tb_dtype_from_dlpack(unsigned code, unsigned bits, unsigned lanes, tb_dtype_id *out);

#endif
