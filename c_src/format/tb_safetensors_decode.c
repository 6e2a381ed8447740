#include "tb_safetensors_decode.h"

#include <stdlib.h>
#include <string.h>

#include "tb_json.h"

/* The reader of one header, and the room of the header's arrays as they
 * grow. An entry's shape is kept as an index into the dims store (which
 * may move as it grows) until the end. */
typedef struct {
    tb_json_reader json;
    size_t dims_used, dims_cap;
    size_t entries_cap, meta_cap;
    size_t *shape_at; /* an index into the dims store, by entry */
} decoder;

static int same(const tb_safetensors_string *a, const char *b)
{
    size_t n = strlen(b);
    return a->len == n && memcmp(a->ptr, b, n) == 0;
}

/* ---- An entry -------------------------------------------------------- */

static int push_dim(decoder *d, int64_t v)
{
    tb_safetensors_header *h = d->json.h;
    if (d->dims_used == d->dims_cap) {
        size_t cap = d->dims_cap ? 2 * d->dims_cap : 64;
        int64_t *dims = realloc(h->dims, cap * sizeof *dims);
        if (!dims)
            return tb_json_fail(&d->json, TB_ST_NO_MEMORY);
        h->dims = dims;
        d->dims_cap = cap;
    }
    h->dims[d->dims_used++] = v;
    return 1;
}

/* "[" size, ... "]" into the dims store; the count in *n. */
static int sizes(decoder *d, uint64_t max, size_t limit, tb_safetensors_error too_many, size_t *n)
{
    tb_json_reader *r = &d->json;
    if (!tb_json_expect(r, '['))
        return tb_json_fail(r, TB_ST_BAD_ENTRY);
    *n = 0;
    if (tb_json_take(r, ']'))
        return 1;
    do {
        uint64_t v = 0;
        if (!tb_json_size(r, max, &v))
            return 0;
        if (*n == limit)
            return tb_json_fail(r, too_many);
        if (!push_dim(d, (int64_t)v))
            return 0;
        (*n)++;
    } while (tb_json_take(r, ','));
    return tb_json_expect(r, ']');
}

static int entry_dtype(tb_json_reader *r, tb_safetensors_entry *e)
{
    char *mark = r->out;
    tb_safetensors_string name;
    if (!tb_json_peek(r, '"'))
        return tb_json_fail(r, TB_ST_BAD_ENTRY);
    if (!tb_json_string(r, &name))
        return 0;
    if (!tb_dtype_from_safetensors(name.ptr, name.len, &e->format)) {
        r->h->detail = name; /* kept in the store: nothing follows */
        return tb_json_fail(r, TB_ST_UNKNOWN_DTYPE);
    }
    e->dtype = tb_st_dtypes[e->format].id;
    r->out = mark;
    return 1;
}

static int entry_shape(decoder *d, tb_safetensors_entry *e, size_t *shape_at)
{
    size_t n;
    *shape_at = d->dims_used;
    if (!sizes(d, INT64_MAX, TB_MAX_DIMS, TB_ST_TOO_MANY_DIMS, &n))
        return 0;
    e->ndim = (int)n;
    return 1;
}

/* [Begin, End], read through the dims store and taken back out of it. */
static int entry_offsets(decoder *d, tb_safetensors_entry *e)
{
    size_t at = d->dims_used, n;
    if (!sizes(d, UINT64_MAX, 2, TB_ST_BAD_ENTRY, &n))
        return 0;
    if (n != 2)
        return tb_json_fail(&d->json, TB_ST_BAD_ENTRY);
    e->begin = (uint64_t)d->json.h->dims[at];
    e->end = (uint64_t)d->json.h->dims[at + 1];
    d->dims_used = at;
    return 1;
}

/* Which of an entry's fields were read: each once. */
typedef struct {
    int dtype, shape, offsets;
} fields_seen;

/* One field of an entry: "dtype", "shape", "data_offsets", or another,
 * passed over. */
static int entry_field(decoder *d, tb_safetensors_entry *e, size_t *shape_at, fields_seen *seen)
{
    tb_json_reader *r = &d->json;
    tb_safetensors_string key;
    char *mark = r->out;
    if (!tb_json_string(r, &key) || !tb_json_expect(r, ':'))
        return 0;
    r->out = mark; /* a field's name is not kept */
    if (same(&key, "dtype"))
        return seen->dtype++ ? tb_json_fail(r, TB_ST_BAD_ENTRY) : entry_dtype(r, e);
    if (same(&key, "shape"))
        return seen->shape++ ? tb_json_fail(r, TB_ST_BAD_ENTRY) : entry_shape(d, e, shape_at);
    if (same(&key, "data_offsets"))
        return seen->offsets++ ? tb_json_fail(r, TB_ST_BAD_ENTRY) : entry_offsets(d, e);
    return tb_json_skip_value(r, 3);
}

/* One tensor's entry: an object of its fields, each of the three once. */
static int entry(decoder *d, tb_safetensors_entry *e, size_t *shape_at)
{
    tb_json_reader *r = &d->json;
    fields_seen seen = {0, 0, 0};
    tb_json_skip_space(r);
    if (r->p >= r->end)
        return tb_json_fail(r, TB_ST_BAD_JSON);
    if (*r->p != '{')
        return tb_json_fail(r, TB_ST_BAD_ENTRY);
    r->p++;
    if (tb_json_take(r, '}'))
        return tb_json_fail(r, TB_ST_BAD_ENTRY);
    do {
        if (!entry_field(d, e, shape_at, &seen))
            return 0;
    } while (tb_json_take(r, ','));
    if (!tb_json_expect(r, '}'))
        return 0;
    if (!seen.dtype || !seen.shape || !seen.offsets)
        return tb_json_fail(r, TB_ST_BAD_ENTRY);
    return 1;
}

/* ---- The header's object --------------------------------------------- */

static int grow_meta(decoder *d)
{
    tb_safetensors_header *h = d->json.h;
    if (h->meta_count < d->meta_cap)
        return 1;
    size_t cap = d->meta_cap ? 2 * d->meta_cap : 16;
    tb_safetensors_meta *m = realloc(h->meta, cap * sizeof *m);
    if (!m)
        return tb_json_fail(&d->json, TB_ST_NO_MEMORY);
    h->meta = m;
    d->meta_cap = cap;
    return 1;
}

/* __metadata__: null, or an object of strings to strings. */
static int metadata(decoder *d)
{
    tb_json_reader *r = &d->json;
    tb_safetensors_header *h = r->h;
    if (tb_json_peek(r, 'n'))
        return tb_json_literal(r, "null") || tb_json_fail(r, TB_ST_BAD_METADATA);
    if (!tb_json_peek(r, '{'))
        return tb_json_fail(r, TB_ST_BAD_METADATA);
    r->p++;
    if (tb_json_take(r, '}'))
        return 1;
    do {
        if (!grow_meta(d))
            return 0;
        tb_safetensors_meta *m = &h->meta[h->meta_count];
        if (!tb_json_string(r, &m->key) || !tb_json_expect(r, ':'))
            return 0;
        if (!tb_json_peek(r, '"'))
            return tb_json_fail(r, TB_ST_BAD_METADATA);
        if (!tb_json_string(r, &m->value))
            return 0;
        h->meta_count++;
    } while (tb_json_take(r, ','));
    return tb_json_expect(r, '}');
}

/* Room for one more entry and its shape's index. */
static int grow_entries(decoder *d)
{
    tb_safetensors_header *h = d->json.h;
    if (h->count < d->entries_cap)
        return 1;
    size_t cap = d->entries_cap ? 2 * d->entries_cap : 16;
    tb_safetensors_entry *e = realloc(h->entries, cap * sizeof *e);
    size_t *s = realloc(d->shape_at, cap * sizeof *s);
    if (s)
        d->shape_at = s;
    if (e)
        h->entries = e;
    if (!e || !s)
        return tb_json_fail(&d->json, TB_ST_NO_MEMORY);
    d->entries_cap = cap;
    return 1;
}

/* One member of the header's object: the metadata, or a tensor's entry. */
static int member(decoder *d)
{
    tb_json_reader *r = &d->json;
    tb_safetensors_header *h = r->h;
    tb_safetensors_string key;
    if (!tb_json_string(r, &key) || !tb_json_expect(r, ':'))
        return 0;
    if (same(&key, "__metadata__")) {
        if (h->has_meta++) {
            h->name = key;
            return tb_json_fail(r, TB_ST_DUPLICATE);
        }
        return metadata(d);
    }
    if (!grow_entries(d))
        return 0;
    tb_safetensors_entry *e = &h->entries[h->count];
    memset(e, 0, sizeof *e);
    e->name = key;
    if (!entry(d, e, &d->shape_at[h->count])) {
        h->name = key;
        return 0;
    }
    h->count++;
    return 1;
}

/* The header's object after its opening brace, through the header's end. */
static int members(decoder *d)
{
    tb_json_reader *r = &d->json;
    if (!tb_json_take(r, '}')) {
        do {
            if (!member(d))
                return 0;
        } while (tb_json_take(r, ','));
        if (!tb_json_expect(r, '}'))
            return 0;
    }
    tb_json_skip_space(r);
    if (r->p != r->end)
        return tb_json_fail(r, TB_ST_BAD_JSON);
    return 1;
}

/* ---- The checks across entries --------------------------------------- */

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

/* No name twice: sorted by name, the first of two equal neighbours. */
static int unique_names(tb_safetensors_header *h)
{
    if (h->count < 2)
        return 1;
    const tb_safetensors_entry **order = malloc(h->count * sizeof *order);
    if (!order) {
        h->error = TB_ST_NO_MEMORY;
        return 0;
    }
    for (size_t i = 0; i < h->count; i++)
        order[i] = &h->entries[i];
    qsort(order, h->count, sizeof *order, by_name);
    const tb_safetensors_entry *dup = NULL;
    for (size_t i = 1; i < h->count && !dup; i++)
        if (by_name(&order[i - 1], &order[i]) == 0)
            dup = order[i];
    free(order);
    return dup ? fault_at(h, TB_ST_DUPLICATE, dup) : 1;
}

/* An entry's bytes, its shape's values' bits / 8, in *bytes; the error
 * when they overflow or a row ends inside a byte. */
static tb_safetensors_error value_bytes(const tb_safetensors_entry *e, uint64_t *bytes)
{
    uint64_t bits = tb_st_dtypes[e->format].bits;
    uint64_t last = e->ndim ? (uint64_t)e->shape[e->ndim - 1] : 1;
    if (last % 8 * bits % 8 != 0)
        return TB_ST_PARTIAL_BYTE;
    uint64_t n = bits; /* the bits of the values so far */
    for (int d = 0; d < e->ndim; d++) {
        uint64_t k = (uint64_t)e->shape[d];
        if (k && n > UINT64_MAX / k)
            return TB_ST_OVERFLOW;
        n *= k;
    }
    /* libtorch counts bytes in int64 */
    if (n / 8 > INT64_MAX)
        return TB_ST_OVERFLOW;
    *bytes = n / 8;
    return TB_ST_OK;
}

/* Each entry's bytes: its shape's, without overflow. */
static int entry_bytes(tb_safetensors_header *h)
{
    for (size_t i = 0; i < h->count; i++) {
        const tb_safetensors_entry *e = &h->entries[i];
        uint64_t bytes = 0;
        tb_safetensors_error why = value_bytes(e, &bytes);
        if (why != TB_ST_OK)
            return fault_at(h, why, e);
        if (e->end < e->begin)
            return fault_at(h, TB_ST_BAD_OFFSETS, e);
        if (e->end - e->begin != bytes)
            return fault_at(h, TB_ST_SIZE_MISMATCH, e);
    }
    return 1;
}

/* The entries, ordered by offset, tile the data buffer. */
static int tiling(tb_safetensors_header *h, uint64_t data_bytes)
{
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

/* ---- The pass -------------------------------------------------------- */

int tb_safetensors_decode(const char *json, size_t len, uint64_t data_bytes, tb_safetensors_header *h)
{
    memset(h, 0, sizeof *h);
    if (!tb_safetensors_valid_utf8(json, len)) {
        h->error = TB_ST_NOT_UTF8;
        return 0;
    }
    h->strings = malloc(len ? len : 1);
    if (!h->strings) {
        h->error = TB_ST_NO_MEMORY;
        return 0;
    }
    /* The reference reads the first byte as the object's start. */
    if (len == 0 || json[0] != '{') {
        h->error = TB_ST_NOT_OBJECT;
        return 0;
    }
    decoder d = {.json = {.p = json + 1, .start = json, .end = json + len, .out = h->strings, .h = h}};
    int ok = members(&d);
    for (size_t i = 0; ok && i < h->count; i++)
        h->entries[i].shape = h->dims ? h->dims + d.shape_at[i] : NULL;
    free(d.shape_at);
    return ok && unique_names(h) && entry_bytes(h) && tiling(h, data_bytes);
}

void tb_safetensors_free(tb_safetensors_header *h)
{
    free(h->entries);
    free(h->meta);
    free(h->strings);
    free(h->dims);
    memset(h, 0, sizeof *h);
}
