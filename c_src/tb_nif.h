/* Shared by the NIF's C files: atoms (made once, at load) and error raising. */
#ifndef TB_NIF_H
#define TB_NIF_H

#include <erl_nif.h>

#include "tb_dtype.h"

typedef struct {
    ERL_NIF_TERM ok, true_, false_, nil, undefined;
    ERL_NIF_TERM badarg, tensor_blob;
    /* blob keys */
    ERL_NIF_TERM ptr, shape, strides, dtype, device, element_size, byte_size, owner, struct_, alignment;
    ERL_NIF_TERM ref;
    ERL_NIF_TERM cpu, cuda;
    /* memory kinds */
    ERL_NIF_TERM owned, pinned, unpinned;
    /* stats keys */
    ERL_NIF_TERM tensors, pins, capsules, binaries;
    /* DLPack kinds */
    ERL_NIF_TERM versioned, legacy;
    ERL_NIF_TERM tensor_struct; /* 'Elixir.TensorBlob.Tensor' */
    ERL_NIF_TERM dtypes[TB_DT_COUNT];
} tb_atom_table;

extern tb_atom_table tb_atoms;

/* Look a dtype term up: a canonical atom, an alias atom, or an Nx {kind, bits}. */
int tb_dtype_of_term(ErlNifEnv *env, ERL_NIF_TERM term, tb_dtype_id *out);

/* Raise error({badarg, Message}) / error({tensor_blob, Message}). The format
 * is enif_snprintf's: %T prints a term. Return the result from the NIF. */
ERL_NIF_TERM tb_raise_badarg(ErlNifEnv *env, const char *fmt, ...);
ERL_NIF_TERM tb_raise_error(ErlNifEnv *env, const char *fmt, ...);

#endif
