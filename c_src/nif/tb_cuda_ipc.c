/* CUDA IPC: a CUDA tensor shared with another OS process through a
 * cudaIpcMemHandle_t, in Nx's %Nx.Pointer{kind: :ipc, address: DeviceIndex,
 * handle: Bytes} convention (Torchx's); the bytes carry the tensor's offset
 * in its allocation when it has one (tb_cuda_handle.h). The opened tensor's
 * storage (memory kind ipc, on a CUDA device) closes the mapping once, when
 * libtorch frees it (tb_storage_release). */

#include <stdlib.h>
#include <string.h>

#include "tb_cuda_handle.h"
#include "tb_cuda_runtime.h"
#include "tb_nifs.h"
#include "tb_storage.h"
#include "tb_stream.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "tb_torch_cuda.h"

/* The storage of a tensor over an opened handle. Its kind is that of a
 * shared-memory region (ipc), told apart by its CUDA device. */
typedef struct {
    tb_storage header; /* TB_MEMORY_CUDA_IPC */
    tb_cuda_mapping map;
    tb_cuda_handle handle; /* what opened it: a re-export hands it on */
    int has_counter;       /* opened from a PyTorch share: its counter */
    tb_torch_counter counter;
} tb_cuda_ipc;

static void release_mapping(tb_storage *s)
{
    tb_cuda_ipc *m = (tb_cuda_ipc *)s;
    const tb_cuda_ops *ops = tb_cuda_ops_get();
    /* As PyTorch's receivers do: the work queued here on the memory is
     * done before the producer may reuse it. Nothing to do with a failure:
     * the deleter cannot report it. */
    if (m->has_counter)
        (void)tb_stream_host_wait_torch(ops, m->map.device);
    tb_cuda_handle_close(ops, &m->map);
    if (m->has_counter)
        (void)tb_torch_counter_release(&m->counter);
    tb_cuda_mappings_add(-1);
    free(m);
}

static ERL_NIF_TERM make_tensor(ErlNifEnv *env, tb_cuda_ipc *m, const tb_dense *d);

/* The mapping a tensor views, or NULL. */
static const tb_cuda_ipc *mapping_of(const tb_shim_info *info)
{
    const tb_storage *s = tb_storage_of(info);
    return s && s->kind == TB_MEMORY_CUDA_IPC ? (const tb_cuda_ipc *)s : NULL;
}

ERL_NIF_TERM tb_nif_cuda_ipc_export(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc))
        return exc;
    if (d.info.device_type != TB_DEVICE_CUDA)
        return tb_raise_badarg(env, TB_WHY_WRONG_DEVICE, "tensor",
                               "tensor: a CPU tensor; CUDA IPC shares CUDA tensors (CPU tensors are shared "
                               "through shared memory)");
    const char *e = tb_cuda_ipc_unavailable();
    if (e)
        return tb_raise_error(env, TB_WHY_UNSUPPORTED, NULL, "ipc: %s", e);
    if (d.dense_bytes == 0)
        return tb_raise_badarg(env, TB_WHY_BAD_SHAPE, "tensor",
                               "tensor: it has no elements, so no device memory to share");

    /* An opener reads dtype and shape row-major from the handle's offset. */
    ERL_NIF_TERM shared = argv[0];
    if (!d.info.is_contiguous) {
        tb_shim_tensor *copy;
        tb_shim_error err;
        if (!tb_shim_contiguous(d.tensor->handle, &copy, &err))
            return tb_raise_error(env, TB_WHY_LIBTORCH, NULL, "ipc: a contiguous copy for export failed: %s",
                                  err.message);
        if (!tb_tensor_make(env, copy, &shared, &exc))
            return exc;
        tb_tensor_describe(copy, &d);
    }
    const tb_cuda_ops *ops = tb_cuda_ops_get();
    /* What this process queued on the memory is done before another reads it. */
    if ((e = tb_stream_host_wait_torch(ops, d.info.device_index)))
        return tb_raise_error(env, TB_WHY_RUNTIME, NULL, "ipc: %s", e);

    tb_cuda_handle handle;
    const tb_cuda_ipc *opened = mapping_of(&d.info);
    if (opened) {
        /* Memory this process opened: its exporter's handle, handed on. */
        handle = opened->handle;
        handle.offset = (uint64_t)(uintptr_t)d.info.data - opened->map.base;
    } else if ((e = tb_cuda_handle_export(ops, (uint64_t)(uintptr_t)d.info.data, d.dense_bytes, &handle))) {
        return tb_raise_error(env, TB_WHY_RUNTIME, NULL, "ipc: %s", e);
    }
    unsigned char bytes[TB_CUDA_HANDLE_MAX_BYTES];
    size_t n = tb_cuda_handle_encode(&handle, bytes);
    ERL_NIF_TERM bin;
    memcpy(enif_make_new_binary(env, n, &bin), bytes, n);
    return enif_make_tuple4(env, bin, enif_make_int(env, d.info.device_index), enif_make_uint64(env, d.dense_bytes),
                            shared);
}

ERL_NIF_TERM tb_nif_cuda_ipc_open(TB_NIF_PARAMS)
{
    /* A build or machine that cannot open any handle says so first. */
    const char *e = tb_cuda_ipc_unavailable();
    if (e)
        return tb_raise_error(env, TB_WHY_UNSUPPORTED, "handle", "handle: a CUDA IPC handle (device %T): %s", argv[1],
                              e);
    ErlNifBinary bin;
    tb_cuda_handle handle;
    if (!enif_inspect_binary(env, argv[0], &bin) || !tb_cuda_handle_decode(bin.data, bin.size, &handle))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "handle",
                               "handle: expected a CUDA IPC handle (64 bytes, or 72 with an offset), got %T", argv[0]);
    int device, count = tb_cuda_device_count();
    if (!enif_get_int(env, argv[1], &device) || device < 0)
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "address",
                               "address: expected the exporter's CUDA device index, got %T", argv[1]);
    if (device >= count)
        return tb_raise_badarg(env, TB_WHY_NO_DEVICE, "address",
                               "address: CUDA device %d does not exist here (%d found)", device, count);
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_dense(env, argv[3], argv[2], &d, &exc))
        return exc;

    /* malloc: the deleter may run on any thread. */
    tb_cuda_ipc *m = malloc(sizeof *m);
    if (!m)
        return tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "ipc: out of memory");
    int caller_fault;
    if ((e = tb_cuda_handle_open(tb_cuda_ops_get(), &handle, device, d.check.byte_size, &m->map, &caller_fault))) {
        free(m);
        if (caller_fault)
            return tb_raise_badarg(env, TB_WHY_OUT_OF_EXTENT, "shape", "shape: %T of %s: %s", argv[3],
                                   tb_dtypes[d.dtype].name, e);
        return tb_raise_error(env, TB_WHY_RUNTIME, NULL, "ipc: %s", e);
    }
    m->handle = handle;
    m->has_counter = 0;
    return make_tensor(env, m, &d);
}

/* The tensor over an opened mapping; the shim owns the storage from here:
 * the mapping is closed when libtorch frees it, or at once if the call
 * fails. */
static ERL_NIF_TERM make_tensor(ErlNifEnv *env, tb_cuda_ipc *m, const tb_dense *d)
{
    tb_storage_init(&m->header, TB_MEMORY_CUDA_IPC, 0, release_mapping);
    tb_cuda_mappings_add(1);
    const tb_layout *l = &d->layout;
    tb_shim_out out;
    int ok = tb_shim_from_blob((void *)(uintptr_t)m->map.data, l->ndim, l->shape, l->strides,
                               tb_dtypes[d->dtype].torch_scalar_type, TB_DEVICE_CUDA, m->map.device, &m->header,
                               tb_storage_release, &out.handle, &out.err);
    return tb_tensor_result(env, "ipc", ok, &out);
}

/* The fields of storage._share_cuda_() that cuda_torch_open takes, in its
 * order (argv[0..7]). */
typedef struct {
    int device;
    tb_cuda_handle handle; /* with the storage's offset */
    ErlNifUInt64 storage_bytes;
    ErlNifBinary counter_name;
    ErlNifSInt64 counter_slot;
    ErlNifBinary event;
    int event_sync;
} torch_share;

/* Where the memory is: device, handle, storage size and offset. */
static int get_share_memory(ErlNifEnv *env, const ERL_NIF_TERM argv[], torch_share *s, ERL_NIF_TERM *exc)
{
    ErlNifBinary handle_bin;
    ErlNifUInt64 storage_offset;
    const char *e;
    if (!enif_get_int(env, argv[0], &s->device) || s->device < 0)
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "device",
                               "device: expected the producer's CUDA device index, got %T", argv[0]);
    else if (!enif_inspect_binary(env, argv[1], &handle_bin))
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "handle",
                               "handle: expected the bytes of a PyTorch CUDA handle, got %T", argv[1]);
    else if ((e = tb_torch_cuda_mem_handle(handle_bin.data, handle_bin.size, s->handle.raw)))
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "handle", "handle: %s", e);
    else if (!enif_get_uint64(env, argv[2], &s->storage_bytes))
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "storage_size_bytes",
                               "storage_size_bytes: expected a non-negative integer, got %T", argv[2]);
    else if (!enif_get_uint64(env, argv[3], &storage_offset))
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "storage_offset_bytes",
                               "storage_offset_bytes: expected a non-negative integer, got %T", argv[3]);
    else {
        s->handle.offset = storage_offset;
        return 1;
    }
    return 0;
}

/* Who else holds the memory, and when it is ready: the counter's file
 * and slot, the producer's event and whether to wait for it. */
static int get_share_sync(ErlNifEnv *env, const ERL_NIF_TERM argv[], torch_share *s, ERL_NIF_TERM *exc)
{
    if (!enif_inspect_binary(env, argv[4], &s->counter_name))
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "ref_counter_handle",
                               "ref_counter_handle: expected the counter file's name, got %T", argv[4]);
    else if (!enif_get_int64(env, argv[5], &s->counter_slot) || s->counter_slot < 0)
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "ref_counter_offset",
                               "ref_counter_offset: expected a non-negative integer, got %T", argv[5]);
    else if (!enif_inspect_binary(env, argv[6], &s->event) || s->event.size != TB_TORCH_CUDA_EVENT_SIZE)
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "event_handle",
                               "event_handle: expected a cudaIpcEventHandle_t (%d bytes), got %T",
                               TB_TORCH_CUDA_EVENT_SIZE, argv[6]);
    else if (argv[7] != tb_atoms.true_ && argv[7] != tb_atoms.false_)
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "event_sync_required",
                               "event_sync_required: expected a boolean, got %T", argv[7]);
    else {
        s->event_sync = argv[7] == tb_atoms.true_;
        return 1;
    }
    return 0;
}

/* The share opened: the producer's work on the memory waited for (as
 * PyTorch's receivers do), the memory mapped, and last its counter taken:
 * a share whose tensor is not made keeps its counter (the producer's
 * memory stays theirs until someone opens it). NULL with *exc. */
static tb_cuda_ipc *open_share(ErlNifEnv *env, const torch_share *s, ERL_NIF_TERM *exc)
{
    const tb_cuda_ops *ops = tb_cuda_ops_get();
    const char *e;
    if ((e = tb_torch_cuda_wait_event(ops, s->device, s->event_sync, s->event.data))) {
        *exc = tb_raise_error(env, TB_WHY_RUNTIME, NULL, "ipc: %s", e);
        return NULL;
    }
    /* malloc: the deleter may run on any thread. */
    tb_cuda_ipc *m = malloc(sizeof *m);
    if (!m) {
        *exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "ipc: out of memory");
        return NULL;
    }
    int caller_fault;
    const char *caller_field;
    if ((e = tb_cuda_handle_open(ops, &s->handle, s->device, s->storage_bytes, &m->map, &caller_fault))) {
        *exc = caller_fault
                   ? tb_raise_badarg(env, TB_WHY_OUT_OF_EXTENT, "storage_size_bytes", "storage_size_bytes: %s", e)
                   : tb_raise_error(env, TB_WHY_RUNTIME, NULL, "ipc: %s", e);
        goto failed;
    }
    if ((e = tb_torch_counter_open((const char *)s->counter_name.data, s->counter_name.size, s->counter_slot,
                                   &m->counter, &caller_field))) {
        tb_cuda_handle_close(ops, &m->map);
        *exc = caller_field ? tb_raise_badarg(env, TB_WHY_BAD_VALUE, caller_field, "%s", e)
                            : tb_raise_error(env, TB_WHY_RUNTIME, NULL, "ipc: %s", e);
        goto failed;
    }
    m->handle = s->handle;
    m->has_counter = 1;
    return m;
failed:
    free(m);
    return NULL;
}

ERL_NIF_TERM tb_nif_cuda_torch_open(TB_NIF_PARAMS)
{
    torch_share s;
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!get_share_memory(env, argv, &s, &exc) || !get_share_sync(env, argv, &s, &exc) ||
        !tb_tensor_get_dense(env, argv[9], argv[8], &d, &exc))
        return exc;
    if (d.check.byte_size > s.storage_bytes)
        return tb_raise_badarg(
            env, TB_WHY_OUT_OF_EXTENT, "shape", "shape: %T of %s needs %lu bytes; the storage holds %lu", argv[9],
            tb_dtypes[d.dtype].name, (unsigned long)d.check.byte_size, (unsigned long)s.storage_bytes);
    const char *e = tb_cuda_ipc_unavailable();
    if (e)
        return tb_raise_error(env, TB_WHY_UNSUPPORTED, "handle", "handle: a PyTorch CUDA share (device %T): %s",
                              argv[0], e);
    int count = tb_cuda_device_count();
    if (s.device >= count)
        return tb_raise_badarg(env, TB_WHY_NO_DEVICE, "device", "device: CUDA device %d does not exist here (%d found)",
                               s.device, count);
    tb_cuda_ipc *m = open_share(env, &s, &exc);
    if (!m)
        return exc;
    return make_tensor(env, m, &d);
}
