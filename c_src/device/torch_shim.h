/* libtorch behind a C API, the only code that calls it. C callers see opaque handles; every entry is
 * noexcept on the C++ side and reports failure through tb_shim_error. */
#ifndef TORCH_SHIM_H
#define TORCH_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "tb_device.h"

#ifdef __cplusplus
#define TB_NOEXCEPT noexcept
extern "C" {
#else
#define TB_NOEXCEPT
#endif

/* A strong reference to one libtorch tensor (a TensorImpl). */
typedef struct tb_shim_tensor tb_shim_tensor;

typedef struct {
    char message[256];
    /* 1 when the call failed for want of memory (the host's allocator
     * failed, or a device's reported it is out of memory). */
    int no_memory;
    /* 1 when a copy of host memory stopped part way: the memory vanished
     * under it (SIGBUS: a mapped file or region shrunk by another program,
     * or a page its file system could not supply). */
    int vanished;
} tb_shim_error;

typedef struct {
    int ndim;
    const int64_t *sizes;   /* owned by the tensor: valid while it lives */
    const int64_t *strides; /* in elements */
    void *data;             /* address of the first element */
    int scalar_type;        /* c10::ScalarType value */
    int device_type;        /* tb_device_type; -1: one tb_device.h lacks */
    int torch_device_type;  /* c10::DeviceType value */
    int device_index;
    void *storage_data; /* start of the storage that holds the data */
    uint64_t storage_bytes;
    void (*storage_deleter)(void *); /* the deleter of the storage's memory */
    void *storage_context;           /* what that deleter is called with */
    int is_contiguous;
} tb_shim_info;

/* 1 when the linked libtorch has this c10::ScalarType. */
int tb_shim_has_scalar_type(int scalar_type) TB_NOEXCEPT;
const char *tb_shim_torch_version(void) TB_NOEXCEPT;
/* 1 when the linked libtorch was built with CUDA. */
int tb_shim_cuda_built(void) TB_NOEXCEPT;
/* 1 when the linked libtorch can hold memory of that device type
 * (tb_device.h): the host's always, another's where libtorch has its
 * backend (which registers the type's device guard). */
int tb_shim_device_built(int device_type) TB_NOEXCEPT;

/* A tensor over foreign memory. The shim owns ctx from the call on: when the
 * storage dies, or at once if the call fails, it calls deleter(ctx). */
int tb_shim_from_blob(void *data, int ndim, const int64_t *sizes, const int64_t *strides, int scalar_type,
                      int device_type, int device_index, void *ctx, void (*deleter)(void *), tb_shim_tensor **out,
                      tb_shim_error *err) TB_NOEXCEPT;

/* A tensor over base's own storage: the layout (sizes and strides in
 * elements of scalar_type) starts byte_offset bytes into the storage, a
 * multiple of the element size. The storage's reference count keeps the
 * memory alive: no deleter context, no second storage. The caller has
 * checked that the layout lies inside the storage. */
int tb_shim_alias(const tb_shim_tensor *base, uint64_t byte_offset, int ndim, const int64_t *sizes,
                  const int64_t *strides, int scalar_type, tb_shim_tensor **out, tb_shim_error *err) TB_NOEXCEPT;

int tb_shim_zeros(int ndim, const int64_t *sizes, int scalar_type, tb_shim_tensor **out,
                  tb_shim_error *err) TB_NOEXCEPT;
/* A new contiguous host tensor whose elements are not set: the caller
 * fills all of them (a read straight into its memory: no page is touched
 * twice). */
int tb_shim_empty(int ndim, const int64_t *sizes, int scalar_type, tb_shim_tensor **out,
                  tb_shim_error *err) TB_NOEXCEPT;
/* A new contiguous tensor holding a copy of bytes (row-major). */
int tb_shim_from_bytes(const void *bytes, int ndim, const int64_t *sizes, int scalar_type, tb_shim_tensor **out,
                       tb_shim_error *err) TB_NOEXCEPT;
/* Copies the elements, in row-major order, into dst (numel * element size
 * bytes); from any device. write_bytes writes them back, to any device. */
int tb_shim_to_bytes(tb_shim_tensor *t, void *dst, tb_shim_error *err) TB_NOEXCEPT;
/* Overwrites the elements in place from row-major bytes. */
int tb_shim_write_bytes(tb_shim_tensor *t, const void *src, tb_shim_error *err) TB_NOEXCEPT;

/* A copy of the tensor on another device (or the same: always a copy). */
int tb_shim_to_device(tb_shim_tensor *t, int device_type, int device_index, tb_shim_tensor **out,
                      tb_shim_error *err) TB_NOEXCEPT;

/* A contiguous copy of a tensor that is not contiguous, on its device. */
int tb_shim_contiguous(tb_shim_tensor *t, tb_shim_tensor **out, tb_shim_error *err) TB_NOEXCEPT;

int tb_shim_narrow(tb_shim_tensor *t, int dim, int64_t start, int64_t length, tb_shim_tensor **out,
                   tb_shim_error *err) TB_NOEXCEPT;
int tb_shim_transpose(tb_shim_tensor *t, int dim0, int dim1, tb_shim_tensor **out, tb_shim_error *err) TB_NOEXCEPT;

void tb_shim_info_of(const tb_shim_tensor *t, tb_shim_info *info) TB_NOEXCEPT;
/* libtorch's current CUDA stream of a device, as the calling thread sees
 * it, reached through c10's device guard interface (libc10): the shim links
 * no CUDA library, and a libtorch without CUDA answers 0 and an error.
 * is_default: 1 when it is the device's default stream (the legacy default
 * stream). record_event: a new event (a cudaEvent_t) recorded on it;
 * wait_event: it waits for an event; destroy_event: the event made by
 * record_event is freed. */
int tb_shim_cuda_stream_is_default(int device_index) TB_NOEXCEPT;
int tb_shim_cuda_record_event(int device_index, void **event, tb_shim_error *err) TB_NOEXCEPT;
int tb_shim_cuda_wait_event(int device_index, void *event, tb_shim_error *err) TB_NOEXCEPT;
void tb_shim_cuda_destroy_event(int device_index, void *event) TB_NOEXCEPT;

/* A new strong reference to the same tensor (a DLPack export holds one);
 * tb_shim_release drops it, from any thread. */
tb_shim_tensor *tb_shim_retain(tb_shim_tensor *t) TB_NOEXCEPT;
void tb_shim_release(tb_shim_tensor *t) TB_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif
