/* The safetensors format: a file is an 8-byte little-endian length N, N
 * bytes of JSON (the header), then the data buffer. The header is an
 * object: each key a tensor's name, its value {"dtype": D, "shape": [...],
 * "data_offsets": [Begin, End]} (offsets into the data buffer), and an
 * optional "__metadata__" object of strings to strings.
 *
 * This unit holds what the header's reader (tb_safetensors_decode.h) and
 * writer (tb_safetensors_encode.h) share: the header as C types, the table
 * of refusals, the length prefix and UTF-8. Pure C: no BEAM, no libtorch. */
#ifndef TB_SAFETENSORS_H
#define TB_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "tb_dtype.h"
#include "tb_layout.h" /* TB_MAX_DIMS: a shape's length */

#define TB_ST_MAX_HEADER 100000000u /* the reference's limit, in bytes */
#define TB_ST_MAX_DEPTH 64          /* nesting of arrays and objects */

/* Why a header is refused: X(ID, text). */
#define TB_ST_ERRORS(X)                                                                               \
    X(OK, "valid")                                                                                    \
    X(TOO_SMALL, "shorter than the 8 bytes of its header length")                                     \
    X(HEADER_TOO_LARGE, "its header length is over the format's limit of 100000000 bytes")            \
    X(HEADER_PAST_END, "its header length runs past the end of the file")                             \
    X(NOT_UTF8, "its header is not UTF-8")                                                            \
    X(NOT_OBJECT, "its header is not a JSON object")                                                  \
    X(BAD_JSON, "its header is not valid JSON")                                                       \
    X(TOO_DEEP, "its header nests arrays or objects too deep")                                        \
    X(DUPLICATE, "a tensor name appears twice")                                                       \
    X(BAD_ENTRY, "a tensor's entry is not {dtype, shape, data_offsets} of the right types")           \
    X(UNKNOWN_DTYPE, "a tensor's dtype is not one of the format's")                                   \
    X(PARTIAL_BYTE, "a tensor's last dimension does not fill whole bytes with its packed values")     \
    X(TOO_MANY_DIMS, "a tensor's shape has more dimensions than a tensor here can have (64)")         \
    X(OVERFLOW, "a tensor's shape overflows (its element count or byte size)")                        \
    X(SIZE_MISMATCH, "a tensor's data offsets do not span its shape's bytes")                         \
    X(BAD_OFFSETS, "a tensor's data offsets leave a gap, overlap another's or end before they begin") \
    X(INCOMPLETE, "the tensors do not cover the data buffer exactly (bytes missing or left over)")    \
    X(BAD_METADATA, "__metadata__ is not an object of strings to strings")                            \
    X(NO_MEMORY, "out of memory decoding the header")

typedef enum {
#define TB_ST_ERROR_ENUM(id, text) TB_ST_##id,
    TB_ST_ERRORS(TB_ST_ERROR_ENUM)
#undef TB_ST_ERROR_ENUM
} tb_safetensors_error;

const char *tb_safetensors_error_text(tb_safetensors_error e);

/* A string decoded from the header (escapes resolved): UTF-8, len bytes,
 * not NUL-terminated. */
typedef struct {
    const char *ptr;
    size_t len;
} tb_safetensors_string;

typedef struct {
    tb_safetensors_string name;
    int format;        /* the format's dtype: an index of tb_st_dtypes */
    tb_dtype_id dtype; /* its dtype of the table, or TB_DT_NONE */
    int ndim;
    const int64_t *shape; /* ndim sizes, in the format's values */
    uint64_t begin, end;  /* in the data buffer */
} tb_safetensors_entry;

typedef struct {
    tb_safetensors_string key, value;
} tb_safetensors_meta;

typedef struct {
    tb_safetensors_entry *entries; /* ordered by offset */
    size_t count;
    tb_safetensors_meta *meta;
    size_t meta_count;
    int has_meta; /* the header had __metadata__ (possibly empty) */
    /* On failure: why, where in the header decoding stopped, the tensor
     * at fault (empty when none) and the value at fault (the dtype). */
    tb_safetensors_error error;
    size_t at;
    tb_safetensors_string name, detail;
    /* Owned storage. */
    char *strings;
    int64_t *dims;
} tb_safetensors_header;

/* Checks the 8-byte prefix of a file of file_size bytes: *header_len (N)
 * when the header fits, else the error. */
tb_safetensors_error tb_safetensors_prefix(const unsigned char prefix[8], uint64_t file_size, uint64_t *header_len);

/* The 8-byte prefix of a header of header_len bytes. */
void tb_safetensors_put_prefix(uint64_t header_len, unsigned char prefix[8]);

/* The shape of the table's dtype that holds entry e's values (its last
 * dimension divided by tb_dtype_st_per_element): ndim sizes into shape.
 * 0 when the format's dtype has no dtype of the table. */
int tb_safetensors_tensor_shape(const tb_safetensors_entry *e, int64_t *shape);

/* 1 when len bytes are well-formed UTF-8 (what a name must be). */
int tb_safetensors_valid_utf8(const char *s, size_t len);

#endif
