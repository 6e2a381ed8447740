/* Tensors to and from an embedded Python (Pythonx): the capsules its code
 * makes and takes, and the slots that carry a managed tensor across one
 * evaluation (tb_python.c). */
#ifndef TB_PYTHON_H
#define TB_PYTHON_H

#include <erl_nif.h>

/* The slot resource type, opened at load (and taken over by an upgrade). */
int tb_python_open_type(ErlNifEnv *env, ErlNifResourceFlags flags);

#endif
