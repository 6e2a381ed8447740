/* CUDA IPC handles: what an export gives another process, and the mapping
 * that process opens. Pure C over the calls of tb_cuda_ops.h: unit-tested
 * with a stand-in runtime in c_test/test_cuda.c.
 *
 * A cudaIpcMemHandle_t names a whole allocation (a cudaMalloc block), and
 * cudaIpcOpenMemHandle maps it from its base. libtorch's caching allocator
 * hands out tensors inside larger blocks, so a tensor usually starts at an
 * offset into the allocation (PyTorch's own CUDA IPC sends the offset too).
 * The handle bytes are:
 *
 *   64 bytes   the cudaIpcMemHandle_t; the tensor starts at the allocation's
 *              base (what Torchx's %Nx.Pointer{kind: :ipc} handles are)
 *   72 bytes   the cudaIpcMemHandle_t, then the tensor's byte offset from
 *              the allocation's base, unsigned, 64-bit little-endian
 *
 * An export writes 64 bytes when the offset is 0, so such a handle opens
 * with Torchx too; a 72-byte one is refused by readers that know only the
 * 64-byte form, rather than read at the wrong place. */
#ifndef TB_CUDA_HANDLE_H
#define TB_CUDA_HANDLE_H

#include <stddef.h>
#include <stdint.h>

#include "tb_cuda_ops.h"

#define TB_CUDA_HANDLE_MAX_BYTES (TB_CUDA_IPC_HANDLE_SIZE + 8)

typedef struct {
    unsigned char raw[TB_CUDA_IPC_HANDLE_SIZE]; /* the cudaIpcMemHandle_t */
    uint64_t offset;                            /* of the tensor's first byte */
} tb_cuda_handle;

/* The bytes of a handle into out; returns how many (64 or 72). */
size_t tb_cuda_handle_encode(const tb_cuda_handle *h, unsigned char out[TB_CUDA_HANDLE_MAX_BYTES]);
/* 0 when the bytes are no handle (neither 64 nor 72 of them). */
int tb_cuda_handle_decode(const unsigned char *bytes, size_t size, tb_cuda_handle *out);

/* The handle of the `bytes` bytes at `data`, device memory of the current
 * process: the allocation holding them and their offset in it. NULL, or
 * what failed. */
const char *tb_cuda_handle_export(const tb_cuda_ops *ops, uint64_t data, uint64_t bytes, tb_cuda_handle *out);

/* An opened handle: what the deleter of the tensor over it closes. */
typedef struct {
    uint64_t base; /* what cudaIpcOpenMemHandle returned: the allocation's base */
    uint64_t size; /* the allocation's size */
    uint64_t data; /* base + offset: the tensor's first byte */
    int device;    /* the device the runtime says the memory is on */
} tb_cuda_mapping;

/* Opens a handle on `device` (the exporter's device index), for `bytes`
 * bytes from its offset, and puts the calling thread's device back. NULL,
 * or what failed; *caller_fault is 1 when the handle, device or size given
 * are at fault (the allocation is too small), 0 when the runtime failed.
 * Nothing stays open on failure. */
const char *tb_cuda_handle_open(const tb_cuda_ops *ops, const tb_cuda_handle *h, int device, uint64_t bytes,
                                tb_cuda_mapping *out, int *caller_fault);
/* Closes an opened handle; called once, by the deleter. */
void tb_cuda_handle_close(const tb_cuda_ops *ops, const tb_cuda_mapping *m);

#endif
