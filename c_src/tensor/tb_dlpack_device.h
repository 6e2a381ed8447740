/* DLPack devices and streams, over the runtimes (tb_runtime.h): the device libtorch
 * sees a DLPack tensor on, the runtime's check of its pointer, and the
 * stream contract of an export or an import (tb_stream.h), as terms. */
#ifndef TB_DLPACK_DEVICE_H
#define TB_DLPACK_DEVICE_H

#include <erl_nif.h>
#include <stdint.h>

#include "tb_stream.h"
#include "torch_shim.h"

/* A stream option, decoded once, before any work: undefined, or an integer
 * as __dlpack__ takes it. What is wrong with it is kept, not raised: an
 * import says so where it did before taking the capsule or after calling
 * the producer's deleter, with the message's suffix of that moment. */
typedef struct {
    ERL_NIF_TERM term;
    tb_stream s;
    enum { TB_STREAM_OK, TB_STREAM_NOT_INTEGER, TB_STREAM_REFUSED } status;
    const char *why; /* TB_STREAM_REFUSED: tb_stream_parse's reason */
} tb_dlpack_stream;

void tb_dlpack_stream_decode(ErlNifEnv *env, ERL_NIF_TERM term, tb_dlpack_stream *out);

/* The stream contract of an export of the tensor `info` describes (see
 * tb_stream.h): `stream` is undefined or an integer as __dlpack__ takes it.
 * A CPU tensor takes no stream. 0 with *exc set when refused or failed. */
int tb_dlpack_export_stream(ErlNifEnv *env, const tb_shim_info *info, ERL_NIF_TERM stream, ERL_NIF_TERM *exc);

/* An import of a DLPack tensor on device (dl_type, dl_id) whose `bytes`
 * bytes start at ptr: the device libtorch sees it on (*device), the check
 * of the pointer by the runtime, and the wait for the producer's `stream`
 * (undefined, or an integer). 0 with *exc set when refused, its message
 * ending with `suffix`. */
int tb_dlpack_device_import(ErlNifEnv *env, int32_t dl_type, int32_t dl_id, uint64_t ptr, uint64_t bytes,
                            const tb_dlpack_stream *stream, const char *suffix, tb_device *device, ERL_NIF_TERM *exc);

/* The part of that import's checks that reads only the stream option and
 * the device type: run before a capsule is taken, so that a refused option
 * leaves it armed. */
int tb_dlpack_device_import_stream_check(ErlNifEnv *env, int32_t dl_type, const tb_dlpack_stream *stream,
                                         const char *suffix, ERL_NIF_TERM *exc);

/* The device libtorch sees a DLPack device as (cpu or {cuda, I}); sets
 * *device_type to the DLPack type's name (cpu, cuda, cuda_host,
 * cuda_managed). */
ERL_NIF_TERM tb_dlpack_device_term(ErlNifEnv *env, int32_t dl_type, int32_t dl_id, ERL_NIF_TERM *device_type);

#endif
