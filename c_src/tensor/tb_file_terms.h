/* What the file NIFs read and make alike: a path argument, and a string
 * of a safetensors header as a binary. */
#ifndef TB_FILE_TERMS_H
#define TB_FILE_TERMS_H

#include <erl_nif.h>

#include "tb_safetensors.h"

/* A path argument as a C string of at most PATH_MAX bytes (path holds
 * that many): a binary without NUL bytes. 0 with *exc when not. */
int tb_file_get_path(ErlNifEnv *env, ERL_NIF_TERM term, char *path, ERL_NIF_TERM *exc);

ERL_NIF_TERM tb_file_make_string(ErlNifEnv *env, const tb_safetensors_string *s);

#endif
