/* The NIFs: one list, X(Name, Arity, C function, flags), in the order of
 * the function table. From it come the function table (nif/tb_nif.c), the
 * prototypes below, and the stubs of src/tensor_blob_nif.erl
 * (scripts/gen_nifs.py; `make check-c` fails when they are out of date).
 * Each group's comment names the file that defines its NIFs, from c_src
 * (`make check-c` checks it, and that every NIF function is listed).
 * Flags, the scheduler a NIF runs on (`make check-c` checks the first two
 * against the code):
 *   TB_SHORT         a normal scheduler, always: its work is short
 *   TB_MAY_GO_DIRTY  a normal scheduler first; it moves itself to a dirty
 *                    one when its call is long: a copy larger than
 *                    TB_DIRTY_BYTES, a device to wait for, a stream to
 *                    order (tb_reschedule_copy, enif_schedule_nif)
 *   TB_DIRTY_IO      a dirty I/O scheduler, always: it waits (for the file
 *                    system or a GPU)
 * TB_ERTS_FLAGS gives what the function table tells ERTS: only TB_DIRTY_IO
 * starts dirty. */
#ifndef TB_NIFS_H
#define TB_NIFS_H

#include <erl_nif.h>

enum tb_nif_schedule { TB_SHORT, TB_MAY_GO_DIRTY, TB_DIRTY_IO };
#define TB_ERTS_FLAGS(schedule) ((schedule) == TB_DIRTY_IO ? ERL_NIF_DIRTY_JOB_IO_BOUND : 0)

#define TB_NIFS(X)                                                                                                    \
    /* the library itself (nif/tb_nif.c) */                                                                           \
    X(load_failures, 0, tb_nif_load_failures, TB_SHORT) /* -> [{Name, Code, Message}]: why a load can fail */         \
    X(nx_type, 1, tb_nif_nx_type, TB_SHORT)             /* (Dtype) -> {Kind, Bits} | nil */                           \
    X(stats, 0, tb_nif_stats, TB_SHORT)                 /* -> #{tensors, pins, capsules, binaries, deferred} */       \
    X(torch_version, 0, tb_nif_torch_version, TB_SHORT) /* -> the linked libtorch's version */                        \
    X(dtypes, 0, tb_nif_dtypes, TB_SHORT)               /* -> the canonical dtypes the linked libtorch holds */       \
    X(tables, 0, tb_nif_tables, TB_SHORT) /* -> #{dtypes => [#{name, ...}], devices, storage, reasons} */             \
    /* tensors: copies, views and what a tensor is (nif/tb_tensors.c) */                                              \
    X(zeros, 2, tb_nif_zeros, TB_MAY_GO_DIRTY)             /* (Shape, Dtype) */                                       \
    X(from_binary, 3, tb_nif_from_binary, TB_MAY_GO_DIRTY) /* (Binary, Dtype, Shape): a copy */                       \
    X(to_binary, 1, tb_nif_to_binary, TB_MAY_GO_DIRTY)     /* (Tensor): a copy */                                     \
    X(write, 2, tb_nif_write, TB_MAY_GO_DIRTY)             /* (Tensor, Binary) -> Tensor, written in place */         \
    X(to_device, 2, tb_nif_to_device, TB_MAY_GO_DIRTY)     /* (Tensor, Device): a copy on Device */                   \
    X(narrow, 4, tb_nif_narrow, TB_SHORT)                  /* (Tensor, Dim, Start, Length): a view */                 \
    X(transpose, 3, tb_nif_transpose, TB_SHORT)            /* (Tensor, Dim0, Dim1): a view */                         \
    X(shape, 1, tb_nif_shape, TB_SHORT)                    /* (Tensor) */                                             \
    X(strides, 1, tb_nif_strides, TB_SHORT)                /* (Tensor) */                                             \
    X(dtype, 1, tb_nif_dtype, TB_SHORT)                    /* (Tensor) */                                             \
    X(device, 1, tb_nif_device, TB_SHORT)                  /* (Tensor) */                                             \
    X(memory, 1, tb_nif_memory, TB_SHORT)     /* (Tensor) -> owned | pinned | unpinned | dlpack | binary | ipc */     \
    X(overlaps, 2, tb_nif_overlaps, TB_SHORT) /* (A, B) -> whether the bytes their elements span overlap */           \
    /* (Tensor) -> true | read_only | frozen: whether write/2 would take it */                                        \
    X(writable, 1, tb_nif_writable, TB_SHORT)                                                                         \
    /* binaries and tensors sharing memory, both ways (nif/tb_binary.c) */                                            \
    /* (Binary, Dtype, Shape, CopyIfMisaligned) -> a read-only tensor pinning Binary */                               \
    X(from_binary_view, 4, tb_nif_from_binary_view, TB_MAY_GO_DIRTY)                                                  \
    /* (Tensor, Unguarded, IfNeeded) -> a binary over its memory; with IfNeeded, false where none can be made */      \
    X(to_binary_view, 3, tb_nif_to_binary_view, TB_SHORT)                                                             \
    /* blobs (nif/tb_blob.c) */                                                                                       \
    /* (Tensor) -> {Ptr, Shape, Strides, Dtype, Device, ElementSize, ByteSize, Alignment} */                          \
    X(blob_fields, 1, tb_nif_blob_fields, TB_SHORT)                                                                   \
    X(from_blob, 3, tb_nif_from_blob, TB_MAY_GO_DIRTY) /* (Spec, Owner, Pin) */                                       \
    /* (Ptr, Shape, Dtype, Strides, Device, Owner, Pin): from_blob of a spec the facade matched */                    \
    X(from_blob_fields, 7, tb_nif_from_blob_fields, TB_MAY_GO_DIRTY)                                                  \
    /* DLPack (nif/tb_dlpack.c); Stream: undefined, or the other side's stream (tb_stream.h) */                       \
    X(to_dlpack, 4, tb_nif_to_dlpack, TB_SHORT) /* (Tensor, versioned | legacy, ReadOnly, Stream) -> Capsule */       \
    /* (Capsule | Address, versioned | legacy | undefined, ReadOnly, Stream, DeferRelease) */                         \
    X(from_dlpack, 5, tb_nif_from_dlpack, TB_MAY_GO_DIRTY)                                                            \
    X(consume_dlpack, 1, tb_nif_consume_dlpack, TB_SHORT) /* (Capsule) -> Address */                                  \
    X(dlpack_version, 1, tb_nif_dlpack_version, TB_SHORT) /* (Capsule) -> versioned | legacy */                       \
    /* (Capsule) -> #{device, dtype, ptr, read_only, shape, strides} */                                               \
    X(dlpack_info, 1, tb_nif_dlpack_info, TB_SHORT)                                                                   \
    /* The Python of this VM (nif/tb_python.c) */                                                                     \
    /* (Library) -> #{Builtin => PyMethodDef address} */                                                              \
    X(python_capsule_abi, 1, tb_nif_python_capsule_abi, TB_SHORT)                                                     \
    X(python_slot_export, 2, tb_nif_python_slot_export, TB_SHORT)      /* (Tensor, Version) -> {K, Slot} */           \
    X(python_slot_receive, 0, tb_nif_python_slot_receive, TB_SHORT)    /* -> {K, Slot}, empty */                      \
    X(python_slot_close, 2, tb_nif_python_slot_close, TB_MAY_GO_DIRTY) /* (Slot, Module) -> ok | Tensor(s) */         \
    /* ([Tensor], versioned | legacy | writable) -> {K, Slot}, a batch */                                             \
    X(python_slot_export_many, 2, tb_nif_python_slot_export_many, TB_MAY_GO_DIRTY)                                    \
    /* (Container, Version) -> {K, Slot, Desc} | other: a container described, its tensors exported */                \
    X(python_slot_export_tree, 2, tb_nif_python_slot_export_tree, TB_MAY_GO_DIRTY)                                    \
    X(python_slot_receive_many, 0, tb_nif_python_slot_receive_many, TB_SHORT) /* -> {K, Slot}, for a batch */         \
    /* POSIX shared-memory regions (nif/tb_shm.c) */                                                                  \
    X(ipc_zeros, 2, tb_nif_ipc_zeros, TB_MAY_GO_DIRTY) /* (Shape, Dtype) -> a tensor in a new region */               \
    X(ipc_name, 1, tb_nif_ipc_name, TB_SHORT) /* (Tensor) -> {Name, ByteSize} when it is a whole region, or nil */    \
    X(ipc_open, 3, tb_nif_ipc_open, TB_MAY_GO_DIRTY) /* (Name, Dtype, Shape) */                                       \
    /* -> how many names of creators that are gone were removed */                                                    \
    X(ipc_reclaim, 0, tb_nif_ipc_reclaim, TB_DIRTY_IO)                                                                \
    /* regions in PyTorch's CPU format (nif/tb_shm.c, the same unit) */                                               \
    X(torch_shm_zeros, 2, tb_nif_torch_shm_zeros, TB_MAY_GO_DIRTY) /* (Shape, Dtype) */                               \
    X(torch_shm_open, 3, tb_nif_torch_shm_open, TB_MAY_GO_DIRTY)   /* (Name, Dtype, Shape): holds one reference */    \
    /* (Tensor) -> {Name, ByteSize} when it is a whole region's data, or nil */                                       \
    X(torch_shm_name, 1, tb_nif_torch_shm_name, TB_SHORT)                                                             \
    /* safetensors files (read from the file: always on a dirty I/O scheduler), opened (nif/tb_safetensors_open.c) */ \
    /* (Path, all | [Name], Unheld: refuse | skip | bytes, Misaligned: copy | refuse) -> {[{Name, Tensor}], */        \
    /* Meta | nil, [Name copied: misaligned], */                                                                      \
    /* [{Name, Dtype, Shape, TableDtype | nil}: what the linked libtorch cannot hold]} */                             \
    X(safetensors_open, 4, tb_nif_safetensors_open, TB_DIRTY_IO)                                                      \
    /* a header alone (nif/tb_safetensors_info.c) */                                                                  \
    /* (Path) -> {[{Name, Dtype, Shape, Begin, End, TableDtype | nil, Held}], Meta | nil, DataStart, Size} */         \
    X(safetensors_info, 1, tb_nif_safetensors_info, TB_DIRTY_IO)                                                      \
    /* written (nif/tb_safetensors_write.c) */                                                                        \
    /* (Path, [{Name, Tensor}], [{Key, Value}] | nil) -> ok: written in that order, renamed over Path */              \
    X(safetensors_write, 3, tb_nif_safetensors_write, TB_DIRTY_IO)                                                    \
    /* a file's tensor mapped again by another node of this host (nif/tb_file_view.c) */                              \
    /* (Tensor) -> {Path, Identity, Offset, Strides} to map it from its file, or not_file | written | changed */      \
    X(file_source, 1, tb_nif_file_source, TB_DIRTY_IO)                                                                \
    /* (Path, Identity, Offset, Dtype, Shape, Strides) -> a tensor over a new mapping of that file */                 \
    X(file_view, 6, tb_nif_file_view, TB_DIRTY_IO)                                                                    \
    /* CUDA (nif/tb_cuda.c) */                                                                                        \
    X(cuda_info, 0, tb_nif_cuda_info, TB_SHORT)                  /* -> what the CUDA runtime and libtorch say */      \
    X(cuda_synchronize, 1, tb_nif_cuda_synchronize, TB_DIRTY_IO) /* (DeviceIndex) */                                  \
    X(cuda_memory, 1, tb_nif_cuda_memory, TB_SHORT) /* (Ptr) -> cpu | cuda_host | cuda | cuda_managed | unknown */    \
    /* CUDA IPC (nif/tb_cuda_ipc.c): each waits for the GPU (a stream, mapping an allocation) */                      \
    /* (Tensor) -> {Handle, DeviceIndex, DataSize, Shared}; the exporter keeps Shared */                              \
    X(cuda_ipc_export, 1, tb_nif_cuda_ipc_export, TB_DIRTY_IO)                                                        \
    X(cuda_ipc_open, 4, tb_nif_cuda_ipc_open, TB_DIRTY_IO) /* (Handle, DeviceIndex, Dtype, Shape) */                  \
    /* (Device, Handle, StorageSize, StorageOffset, RefCounterHandle, RefCounterOffset, EventHandle, */               \
    /* EventSyncRequired, Dtype, Shape): a storage PyTorch shared (tb_torch_cuda.h) */                                \
    X(cuda_torch_open, 10, tb_nif_cuda_torch_open, TB_DIRTY_IO)

/* A NIF's parameters, as `ERL_NIF_TERM tb_nif_x(TB_NIF_PARAMS)`. The table
 * fixes them, so a NIF need not use them all: argc is its entry's arity. */
#define TB_UNUSED __attribute__((unused))
#define TB_NIF_PARAMS TB_UNUSED ErlNifEnv *env, TB_UNUSED int argc, TB_UNUSED const ERL_NIF_TERM argv[]

#define TB_NIF_PROTOTYPE(name, arity, fun, flags) ERL_NIF_TERM fun(TB_NIF_PARAMS);
TB_NIFS(TB_NIF_PROTOTYPE)
#undef TB_NIF_PROTOTYPE

#endif
