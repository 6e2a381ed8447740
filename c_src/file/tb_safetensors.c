#include "tb_safetensors.h"

#include <stdlib.h>
#include <string.h>

static const char *const error_texts[] = {
#define TB_ST_ERROR_TEXT(id, text) [TB_ST_##id] = text,
    TB_ST_ERRORS(TB_ST_ERROR_TEXT)
#undef TB_ST_ERROR_TEXT
};

const char *tb_safetensors_error_text(tb_safetensors_error e)
{
    return error_texts[e];
}

tb_safetensors_error tb_safetensors_prefix(const unsigned char prefix[8], uint64_t file_size, uint64_t *header_len)
{
    if (file_size < 8)
        return TB_ST_TOO_SMALL;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | prefix[i];
    if (n > TB_ST_MAX_HEADER)
        return TB_ST_HEADER_TOO_LARGE;
    if (n > file_size - 8)
        return TB_ST_HEADER_PAST_END;
    *header_len = n;
    return TB_ST_OK;
}

/* ---- UTF-8 ----------------------------------------------------------- */

/* Well-formed UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF). */
static int valid_utf8(const unsigned char *s, size_t len);

int tb_safetensors_valid_utf8(const char *s, size_t len)
{
    return valid_utf8((const unsigned char *)s, len);
}

static int valid_utf8(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else {
            return 0;
        }
        if (len - i - 1 < n)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t k = 2; k <= n; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += n + 1;
    }
    return 1;
}

/* ---- The reader -------------------------------------------------------- */

typedef struct {
    const char *p, *start, *end;
    tb_safetensors_header *h;
    char *out; /* where the next decoded string goes */
    size_t dims_used, dims_cap;
    size_t entries_cap, meta_cap;
} reader;

static int fail(reader *r, tb_safetensors_error e)
{
    if (r->h->error == TB_ST_OK) {
        r->h->error = e;
        r->h->at = (size_t)(r->p - r->start);
    }
    return 0;
}

static void skip_space(reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int expect(reader *r, char c)
{
    skip_space(r);
    if (r->p >= r->end || *r->p != c)
        return fail(r, TB_ST_BAD_JSON);
    r->p++;
    return 1;
}

static int hex4(reader *r, unsigned *out)
{
    if (r->end - r->p < 4)
        return fail(r, TB_ST_BAD_JSON);
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *r->p++;
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return fail(r, TB_ST_BAD_JSON);
    }
    *out = v;
    return 1;
}

static void put_utf8(reader *r, unsigned cp)
{
    unsigned char *o = (unsigned char *)r->out;
    if (cp < 0x80) {
        *o++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *o++ = (unsigned char)(0xC0 | cp >> 6);
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (unsigned char)(0xE0 | cp >> 12);
        *o++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (unsigned char)(0xF0 | cp >> 18);
        *o++ = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    r->out = (char *)o;
}

/* A string, its escapes resolved into the string store (a decoded string
 * is never longer than its text in the header, so the store, as long as
 * the header, never runs out). The header was checked UTF-8 already. */
static int string(reader *r, tb_safetensors_string *s)
{
    if (!expect(r, '"'))
        return 0;
    s->ptr = r->out;
    for (;;) {
        if (r->p >= r->end)
            return fail(r, TB_ST_BAD_JSON);
        unsigned char c = (unsigned char)*r->p++;
        if (c == '"')
            break;
        if (c < 0x20)
            return fail(r, TB_ST_BAD_JSON);
        if (c != '\\') {
            *r->out++ = (char)c;
            continue;
        }
        if (r->p >= r->end)
            return fail(r, TB_ST_BAD_JSON);
        char e = *r->p++;
        unsigned cp;
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (!hex4(r, &cp))
                return 0;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail(r, TB_ST_BAD_JSON); /* a lone low surrogate */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u')
                    return fail(r, TB_ST_BAD_JSON);
                r->p += 2;
                if (!hex4(r, &lo))
                    return 0;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return fail(r, TB_ST_BAD_JSON);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            break;
        default: return fail(r, TB_ST_BAD_JSON);
        }
        put_utf8(r, cp);
    }
    s->len = (size_t)(r->out - s->ptr);
    return 1;
}

/* A non-negative integer without sign, fraction or exponent (what the
 * reference takes for a size), at most max. */
static int size_value(reader *r, uint64_t max, uint64_t *out)
{
    skip_space(r);
    const char *at = r->p;
    uint64_t v = 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        unsigned d = (unsigned)(*r->p - '0');
        if (v > (max - d) / 10)
            return fail(r, TB_ST_OVERFLOW);
        v = v * 10 + d;
        r->p++;
    }
    if (r->p == at || (r->p - at > 1 && *at == '0'))
        return fail(r, TB_ST_BAD_ENTRY);
    if (r->p < r->end && (*r->p == '.' || *r->p == 'e' || *r->p == 'E'))
        return fail(r, TB_ST_BAD_ENTRY);
    *out = v;
    return 1;
}

static int literal(reader *r, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return fail(r, TB_ST_BAD_JSON);
    r->p += n;
    return 1;
}

static int number(reader *r)
{
    const char *at = r->p;
    if (r->p < r->end && *r->p == '-')
        r->p++;
    const char *digits = r->p;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
        r->p++;
    if (r->p == digits || (r->p - digits > 1 && *digits == '0'))
        return fail(r, TB_ST_BAD_JSON);
    if (r->p < r->end && *r->p == '.') {
        const char *f = ++r->p;
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            r->p++;
        if (r->p == f)
            return fail(r, TB_ST_BAD_JSON);
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        r->p++;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
            r->p++;
        const char *e = r->p;
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            r->p++;
        if (r->p == e)
            return fail(r, TB_ST_BAD_JSON);
    }
    return at != r->p;
}

/* Any value, passed over (an entry's fields the format does not name).
 * Its strings go to the store and are dropped: the store's bound holds. */
static int skip_value(reader *r, int depth)
{
    skip_space(r);
    if (r->p >= r->end)
        return fail(r, TB_ST_BAD_JSON);
    char c = *r->p;
    if (c == '"') {
        tb_safetensors_string s;
        char *mark = r->out;
        int ok = string(r, &s);
        r->out = mark;
        return ok;
    }
    if (c == '{' || c == '[') {
        if (depth >= TB_ST_MAX_DEPTH)
            return fail(r, TB_ST_TOO_DEEP);
        char close = c == '{' ? '}' : ']';
        r->p++;
        skip_space(r);
        if (r->p < r->end && *r->p == close) {
            r->p++;
            return 1;
        }
        for (;;) {
            if (c == '{') {
                tb_safetensors_string key;
                char *mark = r->out;
                int ok = string(r, &key) && expect(r, ':');
                r->out = mark;
                if (!ok)
                    return 0;
            }
            if (!skip_value(r, depth + 1))
                return 0;
            skip_space(r);
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                continue;
            }
            return expect(r, close);
        }
    }
    if (c == 't')
        return literal(r, "true");
    if (c == 'f')
        return literal(r, "false");
    if (c == 'n')
        return literal(r, "null");
    return number(r);
}

static int same(const tb_safetensors_string *a, const char *b)
{
    size_t n = strlen(b);
    return a->len == n && memcmp(a->ptr, b, n) == 0;
}

/* "[" size, ... "]" into the dims store; the count in *n. */
static int sizes(reader *r, uint64_t max, size_t limit, tb_safetensors_error too_many, size_t *n)
{
    if (!expect(r, '['))
        return fail(r, TB_ST_BAD_ENTRY);
    *n = 0;
    skip_space(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return 1;
    }
    for (;;) {
        uint64_t v = 0;
        if (!size_value(r, max, &v))
            return 0;
        if (*n == limit)
            return fail(r, too_many);
        if (r->dims_used == r->dims_cap) {
            size_t cap = r->dims_cap ? 2 * r->dims_cap : 64;
            int64_t *d = realloc(r->h->dims, cap * sizeof *d);
            if (!d)
                return fail(r, TB_ST_NO_MEMORY);
            r->h->dims = d;
            r->dims_cap = cap;
        }
        r->h->dims[r->dims_used++] = (int64_t)v;
        (*n)++;
        skip_space(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        return expect(r, ']');
    }
}

/* One tensor's entry. Shapes are kept as indexes into the dims store
 * (which may move as it grows) until the end. */
static int entry(reader *r, tb_safetensors_entry *e, size_t *shape_at)
{
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    skip_space(r);
    if (r->p >= r->end)
        return fail(r, TB_ST_BAD_JSON);
    if (*r->p != '{')
        return fail(r, TB_ST_BAD_ENTRY);
    r->p++;
    skip_space(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return fail(r, TB_ST_BAD_ENTRY);
    }
    for (;;) {
        tb_safetensors_string key;
        char *mark = r->out;
        if (!string(r, &key) || !expect(r, ':'))
            return 0;
        if (same(&key, "dtype")) {
            if (have_dtype++)
                return fail(r, TB_ST_BAD_ENTRY);
            r->out = mark;
            tb_safetensors_string d;
            skip_space(r);
            if (r->p >= r->end || *r->p != '"')
                return fail(r, TB_ST_BAD_ENTRY);
            if (!string(r, &d))
                return 0;
            if (!tb_dtype_from_safetensors(d.ptr, d.len, &e->dtype)) {
                r->h->detail = d; /* kept in the store: nothing follows */
                return fail(r, TB_ST_UNKNOWN_DTYPE);
            }
            r->out = mark;
        } else if (same(&key, "shape")) {
            if (have_shape++)
                return fail(r, TB_ST_BAD_ENTRY);
            r->out = mark;
            size_t n;
            *shape_at = r->dims_used;
            if (!sizes(r, INT64_MAX, TB_MAX_DIMS, TB_ST_TOO_MANY_DIMS, &n))
                return 0;
            e->ndim = (int)n;
        } else if (same(&key, "data_offsets")) {
            if (have_offsets++)
                return fail(r, TB_ST_BAD_ENTRY);
            r->out = mark;
            size_t at = r->dims_used, n;
            if (!sizes(r, UINT64_MAX, 2, TB_ST_BAD_ENTRY, &n))
                return 0;
            if (n != 2)
                return fail(r, TB_ST_BAD_ENTRY);
            e->begin = (uint64_t)r->h->dims[at];
            e->end = (uint64_t)r->h->dims[at + 1];
            r->dims_used = at;
        } else {
            r->out = mark;
            if (!skip_value(r, 3))
                return 0;
        }
        skip_space(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (!expect(r, '}'))
            return 0;
        break;
    }
    if (!have_dtype || !have_shape || !have_offsets)
        return fail(r, TB_ST_BAD_ENTRY);
    return 1;
}

static int metadata(reader *r)
{
    tb_safetensors_header *h = r->h;
    skip_space(r);
    if (r->p < r->end && *r->p == 'n')
        return literal(r, "null") || fail(r, TB_ST_BAD_METADATA);
    if (r->p >= r->end || *r->p != '{')
        return fail(r, TB_ST_BAD_METADATA);
    r->p++;
    skip_space(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return 1;
    }
    for (;;) {
        if (h->meta_count == r->meta_cap) {
            size_t cap = r->meta_cap ? 2 * r->meta_cap : 16;
            tb_safetensors_meta *m = realloc(h->meta, cap * sizeof *m);
            if (!m)
                return fail(r, TB_ST_NO_MEMORY);
            h->meta = m;
            r->meta_cap = cap;
        }
        tb_safetensors_meta *m = &h->meta[h->meta_count];
        if (!string(r, &m->key) || !expect(r, ':'))
            return 0;
        skip_space(r);
        if (r->p >= r->end || *r->p != '"')
            return fail(r, TB_ST_BAD_METADATA);
        if (!string(r, &m->value))
            return 0;
        h->meta_count++;
        skip_space(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        return expect(r, '}');
    }
}

static int by_name(const void *a, const void *b)
{
    const tb_safetensors_entry *x = *(tb_safetensors_entry *const *)a, *y = *(tb_safetensors_entry *const *)b;
    size_t n = x->name.len < y->name.len ? x->name.len : y->name.len;
    int c = memcmp(x->name.ptr, y->name.ptr, n);
    return c ? c : (x->name.len > y->name.len) - (x->name.len < y->name.len);
}

static int by_offset(const void *a, const void *b)
{
    const tb_safetensors_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

static int fault_at(tb_safetensors_header *h, tb_safetensors_error e, const tb_safetensors_entry *at)
{
    h->error = e;
    h->name = at->name;
    return 0;
}

/* The checks across entries: names unique, each entry's bytes its
 * shape's, the entries tiling the data buffer. */
static int check(tb_safetensors_header *h, uint64_t data_bytes)
{
    if (h->count > 1) {
        const tb_safetensors_entry **order = malloc(h->count * sizeof *order);
        if (!order) {
            h->error = TB_ST_NO_MEMORY;
            return 0;
        }
        for (size_t i = 0; i < h->count; i++)
            order[i] = &h->entries[i];
        qsort(order, h->count, sizeof *order, by_name);
        for (size_t i = 1; i < h->count; i++) {
            if (by_name(&order[i - 1], &order[i]) == 0) {
                const tb_safetensors_entry *dup = order[i];
                free(order);
                return fault_at(h, TB_ST_DUPLICATE, dup);
            }
        }
        free(order);
    }
    for (size_t i = 0; i < h->count; i++) {
        const tb_safetensors_entry *e = &h->entries[i];
        uint64_t bytes = tb_dtypes[e->dtype].element_size;
        for (int d = 0; d < e->ndim; d++) {
            uint64_t n = (uint64_t)e->shape[d];
            if (n && bytes > UINT64_MAX / n)
                return fault_at(h, TB_ST_OVERFLOW, e);
            bytes *= n;
        }
        /* libtorch counts bytes in int64 */
        if (bytes > INT64_MAX)
            return fault_at(h, TB_ST_OVERFLOW, e);
        if (e->end < e->begin)
            return fault_at(h, TB_ST_BAD_OFFSETS, e);
        if (e->end - e->begin != bytes)
            return fault_at(h, TB_ST_SIZE_MISMATCH, e);
    }
    if (h->count > 1)
        qsort(h->entries, h->count, sizeof *h->entries, by_offset);
    uint64_t next = 0;
    for (size_t i = 0; i < h->count; i++) {
        const tb_safetensors_entry *e = &h->entries[i];
        if (e->begin != next)
            return fault_at(h, TB_ST_BAD_OFFSETS, e);
        next = e->end;
    }
    if (next != data_bytes) {
        if (h->count && next > data_bytes)
            return fault_at(h, TB_ST_INCOMPLETE, &h->entries[h->count - 1]);
        h->error = TB_ST_INCOMPLETE;
        return 0;
    }
    return 1;
}

int tb_safetensors_decode(const char *json, size_t len, uint64_t data_bytes, tb_safetensors_header *h)
{
    memset(h, 0, sizeof *h);
    reader r = {.p = json, .start = json, .end = json + len, .h = h};
    if (!valid_utf8((const unsigned char *)json, len)) {
        h->error = TB_ST_NOT_UTF8;
        return 0;
    }
    h->strings = malloc(len ? len : 1);
    if (!h->strings) {
        h->error = TB_ST_NO_MEMORY;
        return 0;
    }
    r.out = h->strings;
    /* The reference reads the first byte as the object's start. */
    if (len == 0 || json[0] != '{') {
        h->error = TB_ST_NOT_OBJECT;
        return 0;
    }
    size_t *shape_at = NULL;
    r.p++;
    skip_space(&r);
    int empty = r.p < r.end && *r.p == '}';
    if (empty)
        r.p++;
    while (!empty) {
        tb_safetensors_string key;
        if (!string(&r, &key) || !expect(&r, ':'))
            goto failed;
        if (same(&key, "__metadata__")) {
            if (h->has_meta++) {
                h->name = key;
                fail(&r, TB_ST_DUPLICATE);
                goto failed;
            }
            if (!metadata(&r))
                goto failed;
        } else {
            if (h->count == r.entries_cap) {
                size_t cap = r.entries_cap ? 2 * r.entries_cap : 16;
                tb_safetensors_entry *e = realloc(h->entries, cap * sizeof *e);
                size_t *s = realloc(shape_at, cap * sizeof *s);
                if (s)
                    shape_at = s;
                if (e)
                    h->entries = e;
                if (!e || !s) {
                    fail(&r, TB_ST_NO_MEMORY);
                    goto failed;
                }
                r.entries_cap = cap;
            }
            tb_safetensors_entry *e = &h->entries[h->count];
            memset(e, 0, sizeof *e);
            e->name = key;
            if (!entry(&r, e, &shape_at[h->count])) {
                h->name = key;
                goto failed;
            }
            h->count++;
        }
        skip_space(&r);
        if (r.p < r.end && *r.p == ',') {
            r.p++;
            continue;
        }
        if (!expect(&r, '}'))
            goto failed;
        break;
    }
    skip_space(&r);
    if (r.p != r.end) {
        fail(&r, TB_ST_BAD_JSON);
        goto failed;
    }
    for (size_t i = 0; i < h->count; i++)
        h->entries[i].shape = h->dims ? h->dims + shape_at[i] : NULL;
    free(shape_at);
    return check(h, data_bytes);
failed:
    free(shape_at);
    return 0;
}

void tb_safetensors_free(tb_safetensors_header *h)
{
    free(h->entries);
    free(h->meta);
    free(h->strings);
    free(h->dims);
    memset(h, 0, sizeof *h);
}

/* ---- Writing a header ------------------------------------------------ */

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

char *tb_safetensors_encode(const tb_safetensors_entry *entries, size_t count, const tb_safetensors_meta *meta,
                            size_t meta_count, int has_meta, size_t *len)
{
    buffer b = {0};
    put(&b, "{", 1);
    int first = 1;
    if (has_meta) {
        put_text(&b, "\"__metadata__\":{");
        for (size_t i = 0; i < meta_count; i++) {
            if (i)
                put(&b, ",", 1);
            put_string(&b, &meta[i].key);
            put(&b, ":", 1);
            put_string(&b, &meta[i].value);
        }
        put(&b, "}", 1);
        first = 0;
    }
    for (size_t i = 0; i < count; i++) {
        const tb_safetensors_entry *e = &entries[i];
        if (!first)
            put(&b, ",", 1);
        first = 0;
        put_string(&b, &e->name);
        put_text(&b, ":{\"dtype\":\"");
        put_text(&b, tb_dtype_safetensors_name(e->dtype));
        put_text(&b, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d)
                put(&b, ",", 1);
            put_uint(&b, (uint64_t)e->shape[d]);
        }
        put_text(&b, "],\"data_offsets\":[");
        put_uint(&b, e->begin);
        put(&b, ",", 1);
        put_uint(&b, e->end);
        put_text(&b, "]}");
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
