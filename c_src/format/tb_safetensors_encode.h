/* The safetensors header (tb_safetensors.h) written: what safetensors_write
 * puts before the tensors' bytes. Pure C: no BEAM, no libtorch
 * (fuzz/fuzz_safetensors.c decodes what it writes). */
#ifndef TB_SAFETENSORS_ENCODE_H
#define TB_SAFETENSORS_ENCODE_H

#include <stddef.h>

#include "tb_safetensors.h"

/* The header of a file holding entries (in file order: each one's begin
 * and end given) and, when has_meta, the metadata: JSON, padded with
 * spaces to a multiple of 8 bytes as the reference pads it, so that data
 * offsets aligned in the buffer stay aligned in the file. Names and
 * strings must be UTF-8 (tb_safetensors_valid_utf8). Each entry's format
 * and shape are as the decoder gives them (its shape in the format's
 * values: F4's [2, 6] for a float4_e2m1fn_x2 tensor of [2, 3]).
 * A malloc'd buffer and *len,
 * or NULL when out of memory. */
char *tb_safetensors_encode(const tb_safetensors_entry *entries, size_t count, const tb_safetensors_meta *meta,
                            size_t meta_count, int has_meta, size_t *len);

#endif
