/* to_blob and from_blob: describing a tensor's memory, and viewing described
 * memory as a tensor with its owner pinned. */
#ifndef TB_BLOB_H
#define TB_BLOB_H

#include <erl_nif.h>

/* to_blob(Tensor, Owner, StructName | undefined) -> map */
ERL_NIF_TERM tb_nif_to_blob(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* from_blob(Spec, Owner, Pin :: boolean()) -> tensor */
ERL_NIF_TERM tb_nif_from_blob(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
