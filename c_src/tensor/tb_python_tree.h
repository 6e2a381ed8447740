/* A container's description (tb_python_tree.c): written (take_tree from
 * Python's container, tb_python_describe from a term), read into
 * Python's container by the tree builtin, and into terms when a batch
 * from Python that take_tree (tb_python_walk) filled is imported
 * (nif/tb_python.c).
 *
 * A container's shape crosses as its description, bytes (the Elixir side
 * writes and reads it, priv/python/tensor_blob_pythonx.py holds its
 * reference in Python):
 *   node := "t" (a tensor: the next one, in order)
 *         | "l" N ":" node*N | "d" N ":" (key node)*N
 *   key  := "s" LEN ":" BYTES (str: UTF-8; bytes where it is not)
 *         | "a" LEN ":" BYTES (an atom's name: str) | "i" INT ":" */
#ifndef TB_PYTHON_TREE_H
#define TB_PYTHON_TREE_H

#include <erl_nif.h>

#include "tb_python_api.h"
#include "tb_python_batch.h"

/* Containers nest at most this deep. */
#define TB_PYTHON_TREE_DEPTH 256

/* A description being written (take_tree, tb_python_describe): its
 * bytes so far, malloc's (the writer frees them). */
typedef struct {
    char *bytes;
    size_t len, cap;
} tb_python_desc;

/* Appends letter, then n in decimal and ':' where n >= 0, then size
 * bytes: 1, or 0 out of memory. */
int tb_python_desc_put(tb_python_desc *d, char letter, long long n, const void *bytes, size_t size);

/* tree(desc, items). */
extern const tb_python_method_def tb_python_tree_def;

/* The container a batch's description gives, its tensors terms, into
 * *out: 1, or 0 when the description does not fit them (a map with two
 * keys alike, a str and a bytes key of the same bytes, too; an integer key
 * beyond 64 bits). */
int tb_python_tree_terms(ErlNifEnv *env, const tb_python_batch *b, const ERL_NIF_TERM *terms, ERL_NIF_TERM *out);

#endif
