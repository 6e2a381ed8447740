/* A container's description written, and read: into Python by the tree
 * builtin, into terms for a batch from Python (tb_python_tree.h). */
#include "tb_python_tree.h"

#include <stdlib.h>
#include <string.h>

#include "tb_release.h"

static tb_python_api_table *const py = &tb_python_api;

/* ---- Written ------------------------------------------------------------------ */

int tb_python_desc_put(tb_python_desc *d, char letter, long long n, const void *bytes, size_t size)
{
    char head[24], digits[20];
    size_t h = 0, k = 0;
    unsigned long long v = n >= 0 ? (unsigned long long)n : 0;
    head[h++] = letter;
    if (n >= 0) {
        do
            digits[k++] = (char)('0' + v % 10);
        while ((v /= 10) > 0);
        while (k)
            head[h++] = digits[--k];
        head[h++] = ':';
    }
    size_t need = d->len + h + size;
    if (need > d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 256;
        while (cap < need)
            cap *= 2;
        char *grown = realloc(d->bytes, cap);
        if (!grown)
            return 0;
        d->bytes = grown;
        d->cap = cap;
    }
    memcpy(d->bytes + d->len, head, h);
    if (size)
        memcpy(d->bytes + d->len + h, bytes, size);
    d->len = need;
    return 1;
}

/* ---- Into Python: the tree builtin ------------------------------------------ */

/* A description being read: what is left of it, and the leaves. */
typedef struct {
    const char *at, *end;
    void *items; /* a Python list */
    ssize_t next, n;
} tree_reader;

/* The count (or length) after a node's or key's letter, up to its ':'; 1,
 * or 0 with Python's error set. */
static int tree_count(tree_reader *r, ssize_t *n)
{
    ssize_t v = 0;
    const char *p = r->at;
    while (p < r->end && *p >= '0' && *p <= '9' && v <= (ssize_t)TB_PYTHON_BATCH_MAX * 64)
        v = v * 10 + (*p++ - '0');
    if (p == r->at || p >= r->end || *p != ':') {
        py->PyErr_SetString(py->PyExc_ValueError, "tensor_blob: a bad container description");
        return 0;
    }
    r->at = p + 1;
    *n = v;
    return 1;
}

/* A dict's key, read: a new reference, or NULL with Python's error set. */
static void *tree_key(tree_reader *r)
{
    char c = r->at < r->end ? *r->at++ : 0;
    const char *start = r->at;
    if (c == 'i') {
        char digits[64];
        const char *colon = memchr(start, ':', (size_t)(r->end - start));
        size_t len = colon ? (size_t)(colon - start) : sizeof digits;
        if (len == 0 || len >= sizeof digits) {
            py->PyErr_SetString(py->PyExc_ValueError, "tensor_blob: a bad integer key in a container description");
            return NULL;
        }
        memcpy(digits, start, len);
        digits[len] = 0;
        r->at = colon + 1;
        return py->PyLong_FromString(digits, NULL, 10);
    }
    ssize_t n;
    if ((c != 's' && c != 'a') || !tree_count(r, &n) || n > r->end - r->at) {
        if (!py->PyErr_Occurred())
            py->PyErr_SetString(py->PyExc_ValueError, "tensor_blob: a bad key in a container description");
        return NULL;
    }
    const char *bytes = r->at;
    r->at += n;
    void *key = py->PyUnicode_DecodeUTF8(bytes, n, "strict");
    if (key || c == 'a')
        return key;
    py->PyErr_Clear(); /* not UTF-8: a bytes key */
    return py->PyBytes_FromStringAndSize(bytes, n);
}

static void *tree_node(tree_reader *r, int depth);

/* The n entries of a list (dict 0) or a dict (1): a new reference, or
 * NULL with Python's error set. */
static void *tree_container(tree_reader *r, ssize_t n, int dict, int depth)
{
    void *out = dict ? py->PyDict_New() : py->PyList_New(n);
    for (ssize_t i = 0; out && i < n; i++) {
        void *key = dict ? tree_key(r) : NULL;
        void *value = dict && !key ? NULL : tree_node(r, depth + 1);
        int ok = value != NULL;
        if (ok && dict)
            ok = py->PyDict_SetItem(out, key, value) == 0;
        if (dict) {
            if (value)
                py->Py_DecRef(value);
            if (key)
                py->Py_DecRef(key);
        } else if (ok)
            py->PyList_SetItem(out, i, value);
        if (!ok) {
            py->Py_DecRef(out);
            out = NULL;
        }
    }
    return out;
}

/* The next node: a new reference, or NULL with Python's error set. */
static void *tree_node(tree_reader *r, int depth)
{
    char c = r->at < r->end ? *r->at++ : 0;
    ssize_t n;
    if (c == 't' && r->next < r->n) {
        void *item = py->PyList_GetItem(r->items, r->next++);
        py->Py_IncRef(item);
        return item;
    }
    /* Each node takes a byte at least: no count past what is left. */
    if ((c == 'l' || c == 'd') && depth < TB_PYTHON_TREE_DEPTH && tree_count(r, &n) && n <= r->end - r->at)
        return tree_container(r, n, c == 'd', depth);
    if (!py->PyErr_Occurred())
        py->PyErr_SetString(py->PyExc_ValueError, c == 't' ? "tensor_blob: a container description with more "
                                                             "tensors than the batch"
                                                           : "tensor_blob: a bad container description (or nested "
                                                             "deeper than 256)");
    return NULL;
}

/* tree(desc, items): the container desc describes (bytes), its tensors
 * the list items in order, all of them; made in one pass. */
static void *python_tree(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    char *bytes;
    ssize_t size;
    tb_release_run_held();
    if (nargs != 2 || py->PyBytes_AsStringAndSize(args[0], &bytes, &size) != 0) {
        if (!py->PyErr_Occurred())
            py->PyErr_SetString(py->PyExc_TypeError, "tensor_blob: tree wants a description (bytes) and a list");
        return NULL;
    }
    tree_reader r = {.at = bytes, .end = bytes + size, .items = args[1], .next = 0, .n = py->PyList_Size(args[1])};
    if (r.n < 0)
        return NULL;
    void *tree = tree_node(&r, 0);
    if (tree && (r.at != r.end || r.next != r.n)) {
        py->Py_DecRef(tree);
        py->PyErr_SetString(py->PyExc_ValueError, "tensor_blob: a container description that does not match its "
                                                  "tensors");
        return NULL;
    }
    return tree;
}

/* ---- Into terms: a batch from Python -------------------------------------- */

/* A batch's description being read into terms (tb_python_tree_terms). */
typedef struct {
    ErlNifEnv *env;
    const char *at, *end;
    const ERL_NIF_TERM *terms;
    size_t next, n;
} term_reader;

/* The decimal digits at r, up to a ':' after them, at most max: 1, or 0. */
static int term_number(term_reader *r, uint64_t max, uint64_t *n)
{
    uint64_t v = 0;
    const char *p = r->at;
    for (; p < r->end && *p >= '0' && *p <= '9'; p++) {
        if (v > (max - (uint64_t)(*p - '0')) / 10)
            return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (p == r->at || p >= r->end || *p != ':')
        return 0;
    r->at = p + 1;
    *n = v;
    return 1;
}

/* A dict's key: a binary (str, bytes), or an integer of 64 bits (a larger
 * one is refused). 1, or 0. */
static int term_key(term_reader *r, ERL_NIF_TERM *key)
{
    char c = r->at < r->end ? *r->at++ : 0;
    uint64_t n;
    if (c == 'i') {
        int neg = r->at < r->end && *r->at == '-';
        r->at += neg;
        if (!term_number(r, neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, &n))
            return 0;
        *key = enif_make_int64(r->env, neg ? (ErlNifSInt64)(0 - n) : (ErlNifSInt64)n);
        return 1;
    }
    if (c != 's' || !term_number(r, (uint64_t)(r->end - r->at), &n) || n > (uint64_t)(r->end - r->at))
        return 0;
    memcpy(enif_make_new_binary(r->env, (size_t)n, key), r->at, (size_t)n);
    r->at += n;
    return 1;
}

static int term_node(term_reader *r, int depth, ERL_NIF_TERM *out);

/* The n entries of a list (map 0) or a map (1), into *out: 1, or 0 (a map
 * with two keys alike, a str and a bytes key of the same bytes, too). */
static int term_container(term_reader *r, size_t n, int map, int depth, ERL_NIF_TERM *out)
{
    ERL_NIF_TERM *values = enif_alloc((n ? n : 1) * (map ? 2 : 1) * sizeof *values), *keys = values + n;
    int ok = values != NULL;
    for (size_t i = 0; ok && i < n; i++)
        ok = (!map || term_key(r, &keys[i])) && term_node(r, depth + 1, &values[i]);
    if (ok && map)
        ok = enif_make_map_from_arrays(r->env, keys, values, n, out);
    else if (ok)
        *out = enif_make_list_from_array(r->env, values, (unsigned)n);
    enif_free(values);
    return ok;
}

/* The next node into *out: 1, or 0. */
static int term_node(term_reader *r, int depth, ERL_NIF_TERM *out)
{
    char c = r->at < r->end ? *r->at++ : 0;
    uint64_t n;
    if (c == 't' && r->next < r->n) {
        *out = r->terms[r->next++];
        return 1;
    }
    /* Each node takes a byte at least: no count past what is left. */
    return (c == 'l' || c == 'd') && depth < TB_PYTHON_TREE_DEPTH && term_number(r, (uint64_t)(r->end - r->at), &n) &&
           term_container(r, (size_t)n, c == 'd', depth, out);
}

/* The container a batch's description gives, its tensors terms, into
 * *out: 1, or 0 when the description does not fit them. */
int tb_python_tree_terms(ErlNifEnv *env, const tb_python_batch *b, const ERL_NIF_TERM *terms, ERL_NIF_TERM *out)
{
    term_reader r = {.env = env, .at = b->desc, .end = b->desc + b->desc_len, .terms = terms, .next = 0, .n = b->n};
    return term_node(&r, 0, out) && r.at == r.end && r.next == r.n;
}

const tb_python_method_def tb_python_tree_def = {"tree", python_tree, TB_PYTHON_METH_FASTCALL, NULL};
