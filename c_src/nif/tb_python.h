/* Tensors to and from an embedded Python (Pythonx): the slot resource a
 * tensor or a batch crosses one evaluation in, and the Python door's NIFs
 * (tb_python.c); the builtins Python calls are the units tb_python_* of
 * tensor/ below it. */
#ifndef TB_PYTHON_H
#define TB_PYTHON_H

#include <erl_nif.h>

/* The slot resource type, opened at load (and taken over by an upgrade). */
int tb_python_open_type(ErlNifEnv *env, ErlNifResourceFlags flags);

#endif
