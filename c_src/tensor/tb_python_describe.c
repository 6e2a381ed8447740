/* A container of tensors on the BEAM described for Python
 * (tb_python_describe.h). */
#include "tb_python_describe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tb_atom.h"

static int describe_node(ErlNifEnv *env, ERL_NIF_TERM term, int depth, tb_python_described *d);

static int put(tb_python_described *d, char letter, long long n, const void *bytes, size_t size)
{
    return tb_python_desc_put(&d->desc, letter, n, bytes, size) ? TB_DESCRIBED : TB_DESCRIBE_NO_MEMORY;
}

/* A map's key: "s" for a binary, "a" for an atom (not nil, true or false,
 * its name ASCII: what the name's UTF-8 is without asking for it), "i"
 * for an integer of 64 bits. */
static int describe_key(ErlNifEnv *env, ERL_NIF_TERM key, tb_python_described *d)
{
    ErlNifBinary bin;
    ErlNifSInt64 i;
    char text[256];
    if (enif_inspect_binary(env, key, &bin))
        return put(d, 's', (long long)bin.size, bin.data, bin.size);
    if (enif_get_int64(env, key, &i)) {
        int len = snprintf(text, sizeof text, "%lld", (long long)i);
        int ok = put(d, 'i', -1, text, (size_t)len);
        return ok == TB_DESCRIBED ? put(d, ':', -1, NULL, 0) : ok;
    }
    if (key == tb_atoms.nil || key == tb_atoms.true_ || key == tb_atoms.false_)
        return TB_DESCRIBE_OTHER;
    int len = enif_get_atom(env, key, text, sizeof text, ERL_NIF_LATIN1);
    if (len <= 0)
        return TB_DESCRIBE_OTHER;
    for (int k = 0; k < len - 1; k++)
        if ((unsigned char)text[k] >= 0x80)
            return TB_DESCRIBE_OTHER;
    return put(d, 'a', len - 1, text, (size_t)len - 1);
}

static int describe_leaf(ERL_NIF_TERM term, tb_python_described *d)
{
    int ok = put(d, 't', -1, NULL, 0);
    if (ok != TB_DESCRIBED)
        return ok;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        ERL_NIF_TERM *grown = realloc(d->leaves, cap * sizeof *grown);
        if (!grown)
            return TB_DESCRIBE_NO_MEMORY;
        d->leaves = grown;
        d->cap = cap;
    }
    d->leaves[d->n++] = term;
    return TB_DESCRIBED;
}

/* A map that is no struct: "d" N ":", then each key and its value. */
static int describe_map(ErlNifEnv *env, ERL_NIF_TERM map, int depth, tb_python_described *d)
{
    size_t n;
    ErlNifMapIterator it;
    ERL_NIF_TERM key, value;
    int ok = enif_get_map_size(env, map, &n) ? put(d, 'd', (long long)n, NULL, 0) : TB_DESCRIBE_OTHER;
    if (ok != TB_DESCRIBED || !enif_map_iterator_create(env, map, &it, ERL_NIF_MAP_ITERATOR_FIRST))
        return ok == TB_DESCRIBED ? TB_DESCRIBE_OTHER : ok;
    for (; ok == TB_DESCRIBED && enif_map_iterator_get_pair(env, &it, &key, &value); enif_map_iterator_next(env, &it))
        if ((ok = describe_key(env, key, d)) == TB_DESCRIBED)
            ok = describe_node(env, value, depth + 1, d);
    enif_map_iterator_destroy(env, &it);
    return ok;
}

static int describe_list(ErlNifEnv *env, ERL_NIF_TERM list, int depth, tb_python_described *d)
{
    unsigned n;
    ERL_NIF_TERM head;
    if (!enif_get_list_length(env, list, &n))
        return TB_DESCRIBE_OTHER; /* improper */
    int ok = put(d, 'l', n, NULL, 0);
    while (ok == TB_DESCRIBED && enif_get_list_cell(env, list, &head, &list))
        ok = describe_node(env, head, depth + 1, d);
    return ok;
}

static int describe_node(ErlNifEnv *env, ERL_NIF_TERM term, int depth, tb_python_described *d)
{
    ERL_NIF_TERM name;
    if (depth >= TB_PYTHON_TREE_DEPTH)
        return TB_DESCRIBE_OTHER;
    if (enif_is_map(env, term)) {
        if (!enif_get_map_value(env, term, tb_atoms.struct_, &name))
            return describe_map(env, term, depth, d);
        return name == tb_atoms.tensor_struct ? describe_leaf(term, d) : TB_DESCRIBE_OTHER;
    }
    if (enif_is_list(env, term))
        return describe_list(env, term, depth, d);
    return enif_is_ref(env, term) ? describe_leaf(term, d) : TB_DESCRIBE_OTHER;
}

int tb_python_describe(ErlNifEnv *env, ERL_NIF_TERM term, tb_python_described *out)
{
    memset(out, 0, sizeof *out);
    return tb_python_is_container(env, term) ? describe_node(env, term, 0, out) : TB_DESCRIBE_OTHER;
}

int tb_python_is_container(ErlNifEnv *env, ERL_NIF_TERM term)
{
    ERL_NIF_TERM name;
    return enif_is_list(env, term) ||
           (enif_is_map(env, term) && !enif_get_map_value(env, term, tb_atoms.struct_, &name));
}

void tb_python_described_free(tb_python_described *d)
{
    free(d->desc.bytes);
    free(d->leaves);
    memset(d, 0, sizeof *d);
}
