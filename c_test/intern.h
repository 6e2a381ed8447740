/* Names as keys of the dtype index (tb_dtype.h), for the C tests and the
 * fuzzer: the NIF interns names as atoms; here equal strings get equal
 * keys. index_of_names() builds the index as the NIF does; key_of() looks
 * a string up without interning it, as an atom the table never named
 * matches no entry. Header-only: each program is one translation unit. */
#ifndef TB_INTERN_H
#define TB_INTERN_H

#include <string.h>

#include "tb_dtype.h"

#define TB_INTERN_MAX (2 * (TB_DT_COUNT + TB_DT_ALIAS_COUNT))

static const char *interned[TB_INTERN_MAX];
static size_t interned_count;

static tb_dtype_key intern_name(const char *name, void *arg)
{
    (void)arg;
    for (size_t i = 0; i < interned_count; i++)
        if (strcmp(interned[i], name) == 0)
            return (tb_dtype_key)(i + 1);
    if (interned_count == TB_INTERN_MAX)
        return 0; /* the table names more than this: tests fail loudly */
    interned[interned_count] = name;
    return (tb_dtype_key)(++interned_count);
}

/* The key of a name the index knows, or one no entry has. */
static tb_dtype_key key_of(const char *name)
{
    for (size_t i = 0; i < interned_count; i++)
        if (strcmp(interned[i], name) == 0)
            return (tb_dtype_key)(i + 1);
    return (tb_dtype_key)-1;
}

static const tb_dtype_index *index_of_names(void)
{
    static tb_dtype_index index;
    static int built;
    if (!built) {
        tb_dtype_index_build(&index, intern_name, NULL);
        built = 1;
    }
    return &index;
}

static int dtype_from_name(const char *name, tb_dtype_id *out)
{
    const tb_dtype_index *index = index_of_names(); /* interns first */
    return tb_dtype_find_name(index, key_of(name), out);
}

static int dtype_from_nx(const char *kind, unsigned long bits, tb_dtype_id *out)
{
    const tb_dtype_index *index = index_of_names();
    return tb_dtype_find_nx(index, key_of(kind), bits, out);
}

#endif
