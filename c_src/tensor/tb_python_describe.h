/* A container of tensors on the BEAM described for Python
 * (tb_python_describe.c): the description take_tree writes of Python's
 * containers (tb_python_tree.h), written of a term, and its tensors in
 * order. */
#ifndef TB_PYTHON_DESCRIBE_H
#define TB_PYTHON_DESCRIBE_H

#include <erl_nif.h>
#include <stddef.h>

#include "tb_python_tree.h"

/* What tb_python_describe answers. */
enum {
    TB_DESCRIBED = 1,
    TB_DESCRIBE_OTHER = 0,      /* something it does not take */
    TB_DESCRIBE_NO_MEMORY = -1, /* nothing kept */
};

/* A container described: its description and its tensors' terms in
 * order (each a tensor resource or a %TensorBlob.Tensor{}, unchecked:
 * the export checks them). */
typedef struct {
    tb_python_desc desc;
    ERL_NIF_TERM *leaves; /* malloc's */
    size_t n, cap;
} tb_python_described;

/* Describes term, nested maps (binary, atom or 64-bit integer keys) and
 * lists of tensors, into *out. TB_DESCRIBE_OTHER where term is no map or
 * list, or holds
 * anything else (a key of another kind, an atom whose name is not ASCII,
 * another struct or value, an improper list, nesting as deep as
 * TB_PYTHON_TREE_DEPTH): the caller's own walk then describes it or says
 * what and where. Whatever it answers, tb_python_described_free frees
 * *out. */
int tb_python_describe(ErlNifEnv *env, ERL_NIF_TERM term, tb_python_described *out);

void tb_python_described_free(tb_python_described *d);

/* 1 where term is a list or a map that is no struct: a container, not a
 * lone tensor. */
int tb_python_is_container(ErlNifEnv *env, ERL_NIF_TERM term);

#endif
