/* The input decoding the fuzz harnesses share: a reader over libFuzzer's
 * bytes, taken in order, in which bytes past the end read as zero (so
 * every input decodes, however short). */
#ifndef FUZZ_READER_H
#define FUZZ_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *data;
    size_t size;
    size_t pos;
} reader;

static inline uint8_t read_byte(reader *r)
{
    return r->pos < r->size ? r->data[r->pos++] : 0;
}

/* n bytes (at most 8), the first the least significant. */
static inline uint64_t read_le(reader *r, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)read_byte(r) << (8 * i);
    return v;
}

/* n bytes (at most 8), the first the most significant. */
static inline uint64_t read_be(reader *r, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | read_byte(r);
    return v;
}

#endif
