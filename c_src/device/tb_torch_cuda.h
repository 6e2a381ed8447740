/* PyTorch's CUDA sharing format, as torch.multiprocessing sends a CUDA
 * storage (storage._share_cuda_() on the producer's side, rebuilt by
 * torch.multiprocessing.reductions.rebuild_cuda_tensor through
 * UntypedStorage._new_shared_cuda on the consumer's): eight fields,
 *
 *   device                the producer's CUDA device index
 *   handle                the cudaIpcMemHandle_t of the caching allocator's
 *                         whole block: 64 bytes (PyTorch before 2.4), or a
 *                         version byte, a type byte ('c': a cudaMalloc block)
 *                         and the 64 bytes (later versions)
 *   storage_size_bytes    the storage's size
 *   storage_offset_bytes  where the storage starts in the block
 *   ref_counter_handle    the name of a shared-memory file in PyTorch's
 *                         file_system format (a 64-byte reference-count
 *                         header, then int64 counters)
 *   ref_counter_offset    the index of this share's counter in that file
 *   event_handle          a cudaIpcEventHandle_t (64 bytes)
 *   event_sync_required   whether the consumer waits on that event first
 *
 * The producer sets the counter to 1 when it shares: the receiver's
 * reference, taken on its behalf. The receiver takes none; it drops that
 * one, once, when its storage is freed (after its own work on the memory
 * is done), and the producer frees the block only when the counter is 0.
 * The file itself is reference-counted by its header, like any region of
 * PyTorch's file_system format.
 *
 * Pure C over tb_cuda_ops.h and POSIX shared memory (the counter file is
 * opened and counted as every region is, tb_shm_names.h): unit-tested
 * with the stand-in runtime of c_test/test_cuda.c. What a VM that dies
 * holds in a counter file is not released by its reaper: the producer's
 * torch_shm_manager removes the file when the producer ends. */
#ifndef TB_TORCH_CUDA_H
#define TB_TORCH_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "tb_cuda_ops.h"

/* Bytes before the counters: PyTorch's map_alloc_alignment. */
#define TB_TORCH_COUNTER_HEADER 64
/* Counters in a file PyTorch makes (CUDA_IPC_REF_COUNTER_FILE_SIZE): its
 * consumers map a file at this size when they drop their counter. */
#define TB_TORCH_COUNTER_SLOTS 10000
#define TB_TORCH_CUDA_EVENT_SIZE 64
/* A shared-memory name's room: "/", NAME_MAX - 2 bytes, NUL. */
#define TB_TORCH_COUNTER_NAME_SIZE 256
/* The type byte of a versioned handle naming a cudaMalloc block. */
#define TB_TORCH_HANDLE_CUDA_MALLOC 'c'

/* The cudaIpcMemHandle_t in a handle's bytes. NULL, or why the bytes are
 * no handle this build opens. */
const char *tb_torch_cuda_mem_handle(const unsigned char *bytes, size_t size,
                                     unsigned char raw[TB_CUDA_IPC_HANDLE_SIZE]);

/* One share's counter, mapped: the file's header holds one reference of
 * ours while mapped. */
typedef struct {
    void *base; /* the file's header; counters follow it */
    size_t length;
    int64_t slot;
    char name[TB_TORCH_COUNTER_NAME_SIZE]; /* "/" and the name */
} tb_torch_counter;

/* Maps the counter `slot` of the file `name` (a shared-memory name, with or
 * without its leading "/") and checks that it holds a share not yet
 * released (at least 1). NULL, or what is wrong; *caller_field names the
 * argument at fault ("ref_counter_handle" or "ref_counter_offset", as the
 * message begins), or is NULL when the fault is not the caller's. Nothing
 * stays mapped on failure. */
const char *tb_torch_counter_open(const char *name, size_t name_size, int64_t slot, tb_torch_counter *out,
                                  const char **caller_field);
/* Drops the share's reference (the counter, never below zero) and the
 * file's (unlinking the file when that was the last); unmaps. Returns the
 * counter's new value, or -1 when it was already 0. */
int64_t tb_torch_counter_release(tb_torch_counter *c);

/* Waits, on libtorch's current stream of `device`, for the producer's
 * event, when the share requires it (cudaIpcOpenEventHandle, then
 * cudaStreamWaitEvent through libtorch); nothing is called otherwise.
 * NULL, or what failed. */
const char *tb_torch_cuda_wait_event(const tb_cuda_ops *ops, int device, int sync_required,
                                     const unsigned char event[TB_TORCH_CUDA_EVENT_SIZE]);

#endif
