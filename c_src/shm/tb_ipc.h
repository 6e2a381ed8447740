/* Sharing CPU tensors between OS processes through POSIX shared memory. */
#ifndef TB_IPC_H
#define TB_IPC_H

#include <erl_nif.h>

/* At load: removes the names of creators that are gone. */
void tb_ipc_load(void);

/* ipc_zeros(Shape, Dtype) -> a tensor in a new shared-memory region */
ERL_NIF_TERM tb_nif_ipc_zeros(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* ipc_name(Tensor) -> {Name, ByteSize} when the tensor is a whole region, or nil */
ERL_NIF_TERM tb_nif_ipc_name(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* ipc_open(Name, Dtype, Shape) -> a tensor over the named region */
ERL_NIF_TERM tb_nif_ipc_open(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* ipc_reclaim() -> how many names of creators that are gone were removed */
ERL_NIF_TERM tb_nif_ipc_reclaim(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
