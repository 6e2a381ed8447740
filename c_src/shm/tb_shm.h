/* Sharing CPU tensors between OS processes through shared-memory regions,
 * in two formats: POSIX (the data from the first byte) and PyTorch's CPU
 * sharing format (the `file_system` strategy: a 64-byte header whose first
 * int counts the mappings, then the data; whoever drops the last one
 * unlinks the name). One unit for both, parameterised by the header and
 * whether it is counted.
 *
 * A plain region's name lives while its creator's mapping does (or until
 * its reaper removes it, when the VM dies first). A PyTorch-format region
 * lives while any holder's count does; what a VM holds is in its journal
 * (tb_shm_owner.h), which its reaper releases when the VM dies. PyTorch's
 * names are /torch_<pid>_<n>_<k>; ours /torch_tensor_blob.<token>.<n>. */
#ifndef TB_SHM_H
#define TB_SHM_H

#include <erl_nif.h>

/* At load: releases what creators that are gone left. */
void tb_shm_load(void);

/* ipc_zeros(Shape, Dtype) -> a tensor in a new shared-memory region */
ERL_NIF_TERM tb_nif_ipc_zeros(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* ipc_name(Tensor) -> {Name, ByteSize} when the tensor is a whole region, or nil */
ERL_NIF_TERM tb_nif_ipc_name(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* ipc_open(Name, Dtype, Shape) -> a tensor over the named region */
ERL_NIF_TERM tb_nif_ipc_open(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* ipc_reclaim() -> how many names of creators that are gone were removed */
ERL_NIF_TERM tb_nif_ipc_reclaim(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

/* torch_shm_zeros(Shape, Dtype) -> a tensor of zeros in a new region of PyTorch's format */
ERL_NIF_TERM tb_nif_torch_shm_zeros(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* torch_shm_open(Name, Dtype, Shape) -> a tensor over the data of a region, holding one reference */
ERL_NIF_TERM tb_nif_torch_shm_open(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* torch_shm_name(Tensor) -> {Name, ByteSize} when the tensor is a whole region's data, or nil */
ERL_NIF_TERM tb_nif_torch_shm_name(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
