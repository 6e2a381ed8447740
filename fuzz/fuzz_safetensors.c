/* libFuzzer harness for the safetensors header decoder
 * (c_src/format/tb_safetensors_decode.c) and writer (tb_safetensors_encode.c).
 *
 *   clang-14 -fsanitize=fuzzer,address,undefined -Ic_src/core -Ic_src/format -Ipriv/include \
 *       fuzz/fuzz_safetensors.c c_src/format/tb_safetensors*.c c_src/format/tb_json.c c_src/core/tb_dtype.c
 *
 * Any input decodes in bounded time and memory, without a read past it.
 * A header it accepts must hold what the format promises: entries ordered
 * by offset, tiling the data buffer from 0 to its end, each spanning its
 * shape's bytes, names unique and UTF-8, metadata UTF-8; and written back
 * (tb_safetensors_encode) it must decode to the same entries and metadata. A
 * broken promise prints it and calls abort(), which libFuzzer saves.
 *
 * Input format: 2 bytes (little-endian) the data buffer's size, then the
 * header's bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tb_safetensors.h"
#include "tb_safetensors_decode.h"
#include "tb_safetensors_encode.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_safetensors: %s\n", what);
    abort();
}

static int same_string(const tb_safetensors_string *a, const tb_safetensors_string *b)
{
    return a->len == b->len && memcmp(a->ptr, b->ptr, a->len) == 0;
}

static void check(const tb_safetensors_header *h, uint64_t data_bytes)
{
    uint64_t next = 0;
    for (size_t i = 0; i < h->count; i++) {
        const tb_safetensors_entry *e = &h->entries[i];
        if (e->begin != next)
            fail("entries do not tile the buffer");
        uint64_t bits = tb_st_dtypes[e->format].bits;
        for (int d = 0; d < e->ndim; d++)
            bits *= (uint64_t)e->shape[d];
        if (bits % 8 || e->end - e->begin != bits / 8)
            fail("an entry's bytes are not its shape's");
        if (!tb_safetensors_valid_utf8(e->name.ptr, e->name.len))
            fail("a name is not UTF-8");
        for (size_t j = 0; j < i; j++)
            if (same_string(&h->entries[j].name, &e->name))
                fail("a name twice");
        next = e->end;
    }
    if (next != data_bytes)
        fail("entries do not cover the buffer");
    for (size_t i = 0; i < h->meta_count; i++)
        if (!tb_safetensors_valid_utf8(h->meta[i].key.ptr, h->meta[i].key.len) ||
            !tb_safetensors_valid_utf8(h->meta[i].value.ptr, h->meta[i].value.len))
            fail("metadata not UTF-8");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint64_t data_bytes = (uint64_t)data[0] | (uint64_t)data[1] << 8;
    tb_safetensors_header h;
    if (!tb_safetensors_decode((const char *)data + 2, size - 2, data_bytes, &h)) {
        if (h.error == TB_ST_OK)
            fail("refused without a reason");
        tb_safetensors_free(&h);
        return 0;
    }
    check(&h, data_bytes);
    size_t len;
    char *again = tb_safetensors_encode(h.entries, h.count, h.meta, h.meta_count, h.has_meta, &len);
    if (!again)
        fail("out of memory encoding");
    if (len % 8)
        fail("an encoded header not padded to 8 bytes");
    tb_safetensors_header h2;
    if (!tb_safetensors_decode(again, len, data_bytes, &h2))
        fail("an encoded header refused");
    if (h2.count != h.count || h2.meta_count != h.meta_count || h2.has_meta != h.has_meta)
        fail("an encoded header decodes to other counts");
    for (size_t i = 0; i < h.count; i++) {
        const tb_safetensors_entry *a = &h.entries[i], *b = &h2.entries[i];
        if (!same_string(&a->name, &b->name) || a->format != b->format || a->dtype != b->dtype || a->ndim != b->ndim || a->begin != b->begin ||
            a->end != b->end || (a->ndim && memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape)))
            fail("an encoded header decodes to another entry");
    }
    for (size_t i = 0; i < h.meta_count; i++)
        if (!same_string(&h.meta[i].key, &h2.meta[i].key) || !same_string(&h.meta[i].value, &h2.meta[i].value))
            fail("an encoded header decodes to other metadata");
    free(again);
    tb_safetensors_free(&h2);
    tb_safetensors_free(&h);
    return 0;
}
