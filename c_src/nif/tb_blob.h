/* to_blob and from_blob: describing a tensor's memory, and viewing described
 * memory as a tensor with its owner pinned. */
#ifndef TB_BLOB_H
#define TB_BLOB_H

#include <erl_nif.h>

/* blob_fields(Tensor) -> {Ptr, Shape, Strides, Dtype, Device, ElementSize,
 * ByteSize, Alignment}: the values of its blob, which the facade makes a map */
ERL_NIF_TERM tb_nif_blob_fields(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* from_blob(Spec, Owner, Pin :: boolean()) -> tensor */
ERL_NIF_TERM tb_nif_from_blob(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* from_blob_fields(Ptr, Shape, Dtype, Strides, Device, Owner, Pin): from_blob
 * of a spec whose keys the facade matched already */
ERL_NIF_TERM tb_nif_from_blob_fields(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
