/* The few CUDA runtime calls, and libtorch's stream calls, that the CUDA
 * logic makes, as a table of functions. tb_cuda.c fills it from the runtime
 * it loaded and from the shim (NULL where the runtime lacks a call); the C
 * tests fill it with a stand-in, so that the decisions built on it
 * (tb_stream.c, tb_cuda_handle.c) run and are checked without a GPU. The
 * shipped library never holds a stand-in.
 *
 * Pure C: no CUDA header. Each call returns NULL on success, or the
 * runtime's message. Streams are cudaStream_t values as integers (1 is the
 * legacy default stream, 2 the per-thread one, as in cuda_runtime_api.h and
 * the array API); events and device pointers are opaque. */
#ifndef TB_CUDA_OPS_H
#define TB_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "tb_device.h" /* tb_mem_type */

/* sizeof(cudaIpcMemHandle_t) (checked in tb_cuda.c). */
#define TB_CUDA_IPC_HANDLE_SIZE 64

typedef struct {
    const char *(*get_device)(int *device);
    const char *(*set_device)(int device);
    const char *(*pointer_type)(uint64_t ptr, tb_mem_type *type, int *device);
    /* The allocation that holds ptr: its base and size (the driver's
     * cuMemGetAddressRange, reached through the runtime). */
    const char *(*address_range)(uint64_t ptr, uint64_t *base, uint64_t *size);
    const char *(*ipc_get_handle)(uint64_t base, unsigned char handle[TB_CUDA_IPC_HANDLE_SIZE]);
    /* Maps an allocation of another process on the current device. */
    const char *(*ipc_open_handle)(const unsigned char handle[TB_CUDA_IPC_HANDLE_SIZE], uint64_t *base);
    const char *(*ipc_close_handle)(uint64_t base);
    /* An event of another process (a cudaIpcEventHandle_t, 64 bytes). */
    const char *(*ipc_open_event)(const unsigned char handle[64], void **event);
    const char *(*event_create)(void **event);
    const char *(*event_record)(void *event, uintptr_t stream);
    const char *(*event_synchronize)(void *event);
    const char *(*event_destroy)(void *event);
    const char *(*stream_wait_event)(uintptr_t stream, void *event);
    const char *(*stream_synchronize)(uintptr_t stream);
    /* Waits for all work of the current device. */
    const char *(*device_synchronize)(void);
    /* libtorch's current stream of a device, as the calling thread sees it. */
    int (*torch_stream_is_default)(int device);
    /* Records a new event (a cudaEvent_t) on it. */
    const char *(*torch_record_event)(int device, void **event);
    /* Makes it wait for an event. */
    const char *(*torch_wait_event)(int device, void *event);
    void (*torch_destroy_event)(int device, void *event);
} tb_cuda_ops;

/* "what: the runtime's message" for a call that failed, or NULL when the
 * call succeeded (error is NULL). The text lives in a buffer of the
 * calling thread, until its next failure. */
const char *tb_cuda_failed(const char *what, const char *error);

#endif
