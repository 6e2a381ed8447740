#include "tb_safetensors_encode.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *data;
    size_t len, cap;
    int failed;
} buffer;

static void put(buffer *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

static void put_text(buffer *b, const char *s)
{
    put(b, s, strlen(s));
}

static void put_uint(buffer *b, uint64_t v)
{
    char digits[24];
    int n = 0;
    do {
        digits[sizeof digits - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(b, digits + sizeof digits - n, (size_t)n);
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void put_string(buffer *b, const tb_safetensors_string *s)
{
    static const char hex[] = "0123456789abcdef";
    put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->ptr[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put(b, s->ptr + run, i - run);
        run = i + 1;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(b, e, 6);
        }
    }
    put(b, s->ptr + run, s->len - run);
    put(b, "\"", 1);
}

static void put_metadata(buffer *b, const tb_safetensors_meta *meta, size_t meta_count)
{
    put_text(b, "\"__metadata__\":{");
    for (size_t i = 0; i < meta_count; i++) {
        if (i)
            put(b, ",", 1);
        put_string(b, &meta[i].key);
        put(b, ":", 1);
        put_string(b, &meta[i].value);
    }
    put(b, "}", 1);
}

static void put_entry(buffer *b, const tb_safetensors_entry *e)
{
    put_string(b, &e->name);
    put_text(b, ":{\"dtype\":\"");
    put_text(b, tb_st_dtypes[e->format].name);
    put_text(b, "\",\"shape\":[");
    for (int d = 0; d < e->ndim; d++) {
        if (d)
            put(b, ",", 1);
        put_uint(b, (uint64_t)e->shape[d]);
    }
    put_text(b, "],\"data_offsets\":[");
    put_uint(b, e->begin);
    put(b, ",", 1);
    put_uint(b, e->end);
    put_text(b, "]}");
}

char *tb_safetensors_encode(const tb_safetensors_entry *entries, size_t count, const tb_safetensors_meta *meta,
                            size_t meta_count, int has_meta, size_t *len)
{
    buffer b = {0};
    put(&b, "{", 1);
    if (has_meta)
        put_metadata(&b, meta, meta_count);
    for (size_t i = 0; i < count; i++) {
        if (i || has_meta)
            put(&b, ",", 1);
        put_entry(&b, &entries[i]);
    }
    put(&b, "}", 1);
    while (b.len % 8)
        put(&b, " ", 1);
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    *len = b.len;
    return b.data;
}
