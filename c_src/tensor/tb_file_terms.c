#define _GNU_SOURCE
#include "tb_file_terms.h"

#include <limits.h>
#include <string.h>

#include "tb_raise.h"

int tb_file_get_path(ErlNifEnv *env, ERL_NIF_TERM term, char *path, ERL_NIF_TERM *exc)
{
    ErlNifBinary bin;
    if (!enif_inspect_binary(env, term, &bin) || bin.size == 0 || bin.size >= PATH_MAX ||
        memchr(bin.data, 0, bin.size)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "path",
                               "path: %T is not a file name (a non-empty name without NUL bytes)", term);
        return 0;
    }
    memcpy(path, bin.data, bin.size);
    path[bin.size] = 0;
    return 1;
}

ERL_NIF_TERM tb_file_make_string(ErlNifEnv *env, const tb_safetensors_string *s)
{
    ERL_NIF_TERM t;
    unsigned char *p = enif_make_new_binary(env, s->len, &t);
    if (s->len)
        memcpy(p, s->ptr, s->len);
    return t;
}
