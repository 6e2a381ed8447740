/* CUDA IPC: a CUDA tensor shared with another OS process through a
 * cudaIpcMemHandle_t, in Nx's %Nx.Pointer{kind: :ipc, address: DeviceIndex,
 * handle: Bytes} convention (Torchx's); the bytes carry the tensor's offset
 * in its allocation when it has one (tb_cuda_handle.h). The opened tensor's
 * storage (memory kind ipc, on a CUDA device) closes the mapping once, when
 * libtorch frees it (tb_storage_release). */
#ifndef TB_CUDA_IPC_H
#define TB_CUDA_IPC_H

#include <erl_nif.h>

/* cuda_ipc_export(Tensor) -> {Handle, DeviceIndex, DataSize, Shared}: Shared
 * is the tensor whose memory the handle names (Tensor, or a contiguous copy
 * of it); the exporter keeps the memory alive by keeping Shared. */
ERL_NIF_TERM tb_nif_cuda_ipc_export(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* cuda_ipc_open(Handle, DeviceIndex, Dtype, Shape) -> a CUDA tensor over the
 * exporter's memory */
ERL_NIF_TERM tb_nif_cuda_ipc_open(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* cuda_torch_open(Device, Handle, StorageSizeBytes, StorageOffsetBytes,
 * RefCounterHandle, RefCounterOffset, EventHandle, EventSyncRequired, Dtype,
 * Shape) -> a CUDA tensor over a storage PyTorch shared (the fields of
 * storage._share_cuda_(), tb_torch_cuda.h): the producer's event waited
 * on when required, and the share's counter dropped once, when the last
 * tensor over it is freed. */
ERL_NIF_TERM tb_nif_cuda_torch_open(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
