/* The safetensors header (tb_safetensors.h), decoded and checked in one
 * bounded pass. Pure C: no BEAM, no libtorch (fuzz/fuzz_safetensors.c
 * fuzzes it).
 *
 * The checks are the reference implementation's: N at most
 * TB_ST_MAX_HEADER and inside the file (tb_safetensors_prefix); the header
 * UTF-8, a JSON object (nested at most TB_ST_MAX_DEPTH deep); each entry's
 * dtype one the dtype table names, its shape's element count times the
 * element size equal to End - Begin, without overflow; the entries, ordered
 * by offset, cover the data buffer from its first byte to its last
 * exactly, with no gap and no overlap; names unique.
 *
 * The work is linear in N, plus a sort of the entries (n log n): a header
 * of any content costs no more. */
#ifndef TB_SAFETENSORS_DECODE_H
#define TB_SAFETENSORS_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "tb_safetensors.h"

/* Decodes and checks len bytes of header, for a data buffer of data_bytes.
 * 1 when valid; 0 with out->error (and what it names) when not. Either
 * way, tb_safetensors_free releases what out holds. */
int tb_safetensors_decode(const char *json, size_t len, uint64_t data_bytes, tb_safetensors_header *out);
void tb_safetensors_free(tb_safetensors_header *h);

#endif
