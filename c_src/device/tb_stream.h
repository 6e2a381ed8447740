/* The stream contract of DLPack exchange, as the array API states it for
 * __dlpack__(stream=...): the producer makes its data safe to use on the
 * consumer's stream, by recording an event on the stream it wrote on and
 * making the consumer's stream wait for that event. Pure C over the calls
 * of tb_cuda_ops.h: unit-tested with a stand-in in c_test/test_cuda.c.
 *
 * A stream value is what __dlpack__ takes for CUDA:
 *   absent  the consumer uses the legacy default stream (the array API's
 *           None); nothing is done where libtorch's current stream is the
 *           default stream, which is the legacy default stream
 *   -1      no synchronization at all
 *   0       refused: ambiguous for CUDA (the array API forbids it)
 *   1       the legacy default stream (cudaStreamLegacy)
 *   2       the per-thread default stream (cudaStreamPerThread)
 *   other   a cudaStream_t
 * The producer's side, for an export, is libtorch's current stream of the
 * tensor's device on the calling thread: the default stream, unless native
 * code set another on that thread. */
#ifndef TB_STREAM_H
#define TB_STREAM_H

#include <stdint.h>

#include "tb_cuda_ops.h"

#define TB_STREAM_LEGACY ((uintptr_t)1)
#define TB_STREAM_PER_THREAD ((uintptr_t)2)

typedef struct {
    int given;        /* 0: the caller named no stream */
    int sync;         /* 0: -1, no synchronization */
    uintptr_t handle; /* the stream, when sync */
} tb_stream;

/* Reads a stream value (given: whether there is one). 0 with *why (a
 * phrase) when it is refused. */
int tb_stream_parse(int given, int64_t value, tb_stream *out, const char **why);

/* Each returns NULL, or what failed and the runtime's message (valid until
 * the thread's next call). Events made here are always destroyed. */

/* Export: `consumer` waits for the work libtorch queued on its current
 * stream of `device`. */
const char *tb_stream_export(const tb_cuda_ops *ops, int device, const tb_stream *consumer);
/* Import onto a device: libtorch's current stream of `device` waits for the
 * work queued on `producer`. */
const char *tb_stream_import(const tb_cuda_ops *ops, int device, const tb_stream *producer);
/* Import into host memory (pinned): the calling thread waits for
 * `producer`, when one is given; without one nothing is waited for. */
const char *tb_stream_host_wait(const tb_cuda_ops *ops, int device, const tb_stream *producer);
/* The calling thread waits for libtorch's current stream of `device` (an
 * IPC export: another process reads the memory next). */
const char *tb_stream_host_wait_torch(const tb_cuda_ops *ops, int device);
/* The calling thread waits for all work of `device`; its current device is
 * put back afterwards (a scheduler thread's current device is libtorch's
 * and other NIFs' business too). */
const char *tb_stream_device_wait(const tb_cuda_ops *ops, int device);

#endif
