#include "tb_stream.h"

#include <stdio.h>

int tb_stream_parse(int given, int64_t value, tb_stream *out, const char **why)
{
    *out = (tb_stream){.given = given, .sync = 1, .handle = TB_STREAM_LEGACY};
    if (!given)
        return 1;
    if (value == -1) {
        out->sync = 0;
        return 1;
    }
    if (value == 0) {
        *why = "0 is ambiguous for CUDA (the array API forbids it); pass 1 for the legacy default stream, 2 for "
               "the per-thread default stream, a cudaStream_t, or -1 for no synchronization";
        return 0;
    }
    if (value < 0 || (uint64_t)value > UINTPTR_MAX) {
        *why = "expected -1 (no synchronization), 1 (the legacy default stream), 2 (the per-thread default "
               "stream) or a cudaStream_t";
        return 0;
    }
    out->handle = (uintptr_t)value;
    return 1;
}

#define MISSING(ops, call) ((ops)->call ? NULL : "the CUDA runtime in use lacks the call " #call)

/* Runs with `device` current, and puts the caller's device back. */
typedef struct {
    int saved, restore;
} device_scope;

static const char *enter(const tb_cuda_ops *ops, int device, device_scope *scope)
{
    scope->restore = ops->get_device && !ops->get_device(&scope->saved) && scope->saved != device;
    return ops->set_device ? tb_cuda_failed("cudaSetDevice", ops->set_device(device)) : MISSING(ops, set_device);
}

static void leave(const tb_cuda_ops *ops, const device_scope *scope)
{
    if (scope->restore)
        (void)ops->set_device(scope->saved);
}

/* No work to order when both sides are the legacy default stream. */
static int same_legacy_stream(const tb_cuda_ops *ops, int device, const tb_stream *s)
{
    return s->handle == TB_STREAM_LEGACY && ops->torch_stream_is_default && ops->torch_stream_is_default(device);
}

/* Records an event on libtorch's current stream of `device`, once the
 * runtime is known to have the call that will use it (`next_missing`:
 * NULL when it has): NULL, or why not. The caller destroys the event. */
static const char *record_torch_event(const tb_cuda_ops *ops, int device, const char *next_missing, void **event)
{
    const char *e = MISSING(ops, torch_record_event);
    if (!e)
        e = next_missing;
    return e ? e
             : tb_cuda_failed("recording an event on libtorch's current stream",
                              ops->torch_record_event(device, event));
}

const char *tb_stream_export(const tb_cuda_ops *ops, int device, const tb_stream *consumer)
{
    if (!consumer->sync || same_legacy_stream(ops, device, consumer))
        return NULL;
    void *event = NULL;
    const char *e = record_torch_event(ops, device, MISSING(ops, stream_wait_event), &event);
    if (e)
        return e;
    device_scope scope;
    /* The legacy and per-thread streams are those of the current device. */
    e = enter(ops, device, &scope);
    if (!e)
        e = tb_cuda_failed("cudaStreamWaitEvent on the consumer's stream",
                           ops->stream_wait_event(consumer->handle, event));
    leave(ops, &scope);
    ops->torch_destroy_event(device, event);
    return e;
}

const char *tb_stream_import(const tb_cuda_ops *ops, int device, const tb_stream *producer)
{
    if (!producer->sync || same_legacy_stream(ops, device, producer))
        return NULL;
    const char *e = MISSING(ops, event_create);
    if (!e)
        e = MISSING(ops, event_record);
    if (!e)
        e = MISSING(ops, torch_wait_event);
    if (e)
        return e;
    device_scope scope;
    void *event = NULL;
    e = enter(ops, device, &scope);
    if (!e)
        e = tb_cuda_failed("cudaEventCreateWithFlags", ops->event_create(&event));
    if (!e)
        e = tb_cuda_failed("cudaEventRecord on the producer's stream", ops->event_record(event, producer->handle));
    leave(ops, &scope);
    if (!e)
        e = tb_cuda_failed("making libtorch's current stream wait", ops->torch_wait_event(device, event));
    /* Destroying an event whose wait is queued is allowed: the runtime
     * releases it once the wait is done. */
    if (event && ops->event_destroy)
        (void)ops->event_destroy(event);
    return e;
}

const char *tb_stream_host_wait(const tb_cuda_ops *ops, int device, const tb_stream *producer)
{
    if (!producer->given || !producer->sync)
        return NULL;
    const char *e = MISSING(ops, stream_synchronize);
    if (e)
        return e;
    device_scope scope;
    e = enter(ops, device, &scope);
    if (!e)
        e = tb_cuda_failed("cudaStreamSynchronize on the producer's stream", ops->stream_synchronize(producer->handle));
    leave(ops, &scope);
    return e;
}

const char *tb_stream_host_wait_torch(const tb_cuda_ops *ops, int device)
{
    void *event = NULL;
    const char *e = record_torch_event(ops, device, MISSING(ops, event_synchronize), &event);
    if (e)
        return e;
    e = tb_cuda_failed("cudaEventSynchronize", ops->event_synchronize(event));
    ops->torch_destroy_event(device, event);
    return e;
}

const char *tb_stream_device_wait(const tb_cuda_ops *ops, int device)
{
    const char *e = MISSING(ops, device_synchronize);
    if (e)
        return e;
    device_scope scope;
    e = enter(ops, device, &scope);
    if (!e)
        e = tb_cuda_failed("cudaDeviceSynchronize", ops->device_synchronize());
    leave(ops, &scope);
    return e;
}
