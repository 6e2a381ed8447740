#include "tb_cuda_handle.h"

#include <stdio.h>
#include <string.h>

size_t tb_cuda_handle_encode(const tb_cuda_handle *h, unsigned char out[TB_CUDA_HANDLE_MAX_BYTES])
{
    memcpy(out, h->raw, TB_CUDA_IPC_HANDLE_SIZE);
    if (h->offset == 0)
        return TB_CUDA_IPC_HANDLE_SIZE;
    for (int i = 0; i < 8; i++)
        out[TB_CUDA_IPC_HANDLE_SIZE + i] = (unsigned char)(h->offset >> (8 * i));
    return TB_CUDA_HANDLE_MAX_BYTES;
}

int tb_cuda_handle_decode(const unsigned char *bytes, size_t size, tb_cuda_handle *out)
{
    if (size != TB_CUDA_IPC_HANDLE_SIZE && size != TB_CUDA_HANDLE_MAX_BYTES)
        return 0;
    memcpy(out->raw, bytes, TB_CUDA_IPC_HANDLE_SIZE);
    out->offset = 0;
    if (size == TB_CUDA_HANDLE_MAX_BYTES)
        for (int i = 0; i < 8; i++)
            out->offset |= (uint64_t)bytes[TB_CUDA_IPC_HANDLE_SIZE + i] << (8 * i);
    return 1;
}

static _Thread_local char message[400];

const char *tb_cuda_handle_export(const tb_cuda_ops *ops, uint64_t data, uint64_t bytes, tb_cuda_handle *out)
{
    if (!ops->address_range || !ops->ipc_get_handle)
        return "the CUDA runtime in use cannot tell an allocation's base (cuMemGetAddressRange) or lacks "
               "cudaIpcGetMemHandle";
    uint64_t base, size;
    const char *e = tb_cuda_failed("cuMemGetAddressRange", ops->address_range(data, &base, &size));
    if (e)
        return e;
    /* What the runtime says must hold the tensor, or the offset is wrong. */
    if (data < base || data - base > size || bytes > size - (data - base)) {
        snprintf(message, sizeof message,
                 "the allocation [%#llx, +%llu) that the runtime names does not hold [%#llx, +%llu)",
                 (unsigned long long)base, (unsigned long long)size, (unsigned long long)data,
                 (unsigned long long)bytes);
        return message;
    }
    if ((e = tb_cuda_failed("cudaIpcGetMemHandle", ops->ipc_get_handle(base, out->raw))))
        return e;
    out->offset = data - base;
    return NULL;
}

const char *tb_cuda_handle_open(const tb_cuda_ops *ops, const tb_cuda_handle *h, int device, uint64_t bytes,
                                tb_cuda_mapping *out, int *caller_fault)
{
    *caller_fault = 0;
    if (!ops->ipc_open_handle || !ops->ipc_close_handle || !ops->address_range || !ops->set_device)
        return "the CUDA runtime in use lacks cudaIpcOpenMemHandle, cudaIpcCloseMemHandle or cuMemGetAddressRange";
    int saved = -1;
    int restore = ops->get_device && !ops->get_device(&saved) && saved != device;
    /* cudaIpcOpenMemHandle maps on the current device. */
    const char *e = tb_cuda_failed("cudaSetDevice", ops->set_device(device));
    uint64_t base = 0;
    if (!e) {
        const char *error = ops->ipc_open_handle(h->raw, &base);
        if (error) {
            snprintf(message, sizeof message,
                     "cudaIpcOpenMemHandle: %s (a handle opens in another OS process than its exporter's, "
                     "while the exporter keeps the tensor)",
                     error);
            e = message;
        }
    }
    if (restore)
        (void)ops->set_device(saved);
    if (e)
        return e;

    uint64_t range_base, size;
    if ((e = tb_cuda_failed("cuMemGetAddressRange of the opened handle",
                            ops->address_range(base, &range_base, &size)))) {
        (void)ops->ipc_close_handle(base);
        return e;
    }
    /* The mapping's extent, from the base the open returned. */
    uint64_t end = range_base + size;
    uint64_t available = base >= range_base && base <= end ? end - base : 0;
    if (h->offset > available || bytes > available - h->offset) {
        (void)ops->ipc_close_handle(base);
        *caller_fault = 1;
        snprintf(message, sizeof message,
                 "%llu bytes from offset %llu do not fit in the exported allocation of %llu bytes",
                 (unsigned long long)bytes, (unsigned long long)h->offset, (unsigned long long)available);
        return message;
    }
    *out = (tb_cuda_mapping){.base = base, .size = available, .data = base + h->offset, .device = device};
    tb_mem_type type;
    int where;
    /* The device the memory is on, in this process's numbering. */
    if (ops->pointer_type && !ops->pointer_type(base, &type, &where) && type == TB_MEM_DEVICE && where >= 0)
        out->device = where;
    return NULL;
}

void tb_cuda_handle_close(const tb_cuda_ops *ops, const tb_cuda_mapping *m)
{
    /* Nothing to do with a failure here: the deleter cannot report it. */
    if (ops->ipc_close_handle)
        (void)ops->ipc_close_handle(m->base);
}
