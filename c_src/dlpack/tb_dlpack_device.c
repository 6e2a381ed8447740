#include "tb_dlpack_device.h"

#include "tb_cuda_runtime.h"
#include "tb_dlpack_check.h"
#include "tb_stream.h"
#include "tb_term.h"
#include "tensor_blob_dlpack.h"

void tb_dlpack_stream_decode(ErlNifEnv *env, ERL_NIF_TERM term, tb_dlpack_stream *out)
{
    int given = term != tb_atoms.undefined;
    ErlNifSInt64 value = 0;
    out->term = term;
    out->why = NULL;
    out->s = (tb_stream){0};
    if (given && !enif_get_int64(env, term, &value))
        out->status = TB_STREAM_NOT_INTEGER;
    else if (!tb_stream_parse(given, value, &out->s, &out->why))
        out->status = TB_STREAM_REFUSED;
    else
        out->status = TB_STREAM_OK;
#if !TB_CUDA
    if (out->status == TB_STREAM_OK && given && out->s.sync)
        out->status = TB_STREAM_NO_RUNTIME;
#endif
}

/* A decoded stream: 1, or 0 with *exc saying what is wrong with it, its
 * message ending with suffix. */
static int stream_ok(ErlNifEnv *env, const tb_dlpack_stream *st, const char *suffix, ERL_NIF_TERM *exc)
{
    switch (st->status) {
    case TB_STREAM_OK: return 1;
    case TB_STREAM_NOT_INTEGER:
        *exc = tb_raise_badarg(env,
                               "stream: expected an integer (a cudaStream_t, 1 or 2 for the default streams, "
                               "-1 for no synchronization), got %T%s",
                               st->term, suffix);
        return 0;
    case TB_STREAM_REFUSED: *exc = tb_raise_badarg(env, "stream: %s, got %T%s", st->why, st->term, suffix); return 0;
    default:
        *exc = tb_raise_error(env,
                              "stream: this build has no CUDA runtime calls (TB_CUDA=0), so it cannot order "
                              "work on CUDA streams; pass no stream, or -1%s",
                              suffix);
        return 0;
    }
}

int tb_dlpack_export_stream(ErlNifEnv *env, const tb_shim_info *info, ERL_NIF_TERM stream, ERL_NIF_TERM *exc)
{
    if (tb_device_runtime(info->device_type) == TB_RUNTIME_HOST) {
        if (stream == tb_atoms.undefined)
            return 1;
        /* The array API: on CPU and devices without streams only None. */
        *exc = tb_raise_badarg(env,
                               "stream: a %s tensor has no stream (the array API takes none for CPU "
                               "memory), got %T",
                               tb_devices[info->device_type].c10_name, stream);
        return 0;
    }
    tb_dlpack_stream s;
    tb_dlpack_stream_decode(env, stream, &s);
    if (!stream_ok(env, &s, "", exc))
        return 0;
    const char *e = tb_stream_export(tb_cuda_ops_get(), info->device_index, &s.s);
    if (e) {
        *exc = tb_raise_error(env, "stream: making the consumer's stream wait for libtorch's failed: %s", e);
        return 0;
    }
    return 1;
}

int tb_dlpack_device_import_stream_check(ErlNifEnv *env, int32_t dl_type, const tb_dlpack_stream *stream,
                                         const char *suffix, ERL_NIF_TERM *exc)
{
    int row = tb_dlpack_device_row_of(dl_type);
    if (row >= 0 && tb_dlpack_devices[row].check == TB_DLCHECK_HOST && stream->term != tb_atoms.undefined) {
        *exc = tb_raise_badarg(env,
                               "stream: a %s tensor has no stream (the array API takes none for CPU "
                               "memory), got %T%s",
                               tb_dlpack_device_name(dl_type), stream->term, suffix);
        return 0;
    }
    return stream_ok(env, stream, suffix, exc);
}

int tb_dlpack_device_import(ErlNifEnv *env, int32_t dl_type, int32_t dl_id, uint64_t ptr, uint64_t bytes,
                            const tb_dlpack_stream *stream, const char *suffix, tb_device *device, ERL_NIF_TERM *exc)
{
    const char *name = tb_dlpack_device_name(dl_type);
    tb_dl_placement place;
    tb_devmem_dlpack_placement(dl_type, dl_id, &place);
    if (!tb_shim_runtime_built(place.runtime)) {
        *exc = tb_raise_error(env,
                              "device: a %s tensor (device %d): this libtorch was built without %s, so it "
                              "cannot be imported (%C reads its metadata)%s",
                              name, (int)dl_id, tb_devices[place.type].c10_name, "tensor_blob:dlpack_info/1",
                              "TensorBlob.CUDA.info/1", suffix);
        return 0;
    }
    if (!tb_dlpack_device_import_stream_check(env, dl_type, stream, suffix, exc))
        return 0;

    int count = tb_cuda_device_count();
    char why[200];
    if (bytes > 0) {
        tb_mem_answer a = {TB_MEM_UNKNOWN, -1, NULL};
        if (tb_devmem_dlpack_needs_answer(dl_type, dl_id, count))
            a = tb_cuda_ask(ptr);
        if (!tb_devmem_dlpack_verdict(dl_type, dl_id, count, &a, why, sizeof why)) {
            *exc = tb_raise_badarg(env, "data: %s%s", why, suffix);
            return 0;
        }
    }
    const char *e = NULL;
    if (place.runtime == TB_RUNTIME_CUDA)
        e = tb_stream_import(tb_cuda_ops_get(), place.index, &stream->s);
    else if (tb_dlpack_devices[tb_dlpack_device_row_of(dl_type)].check == TB_DLCHECK_PAGE_LOCKED)
        e = tb_stream_host_wait(tb_cuda_ops_get(), dl_id >= 0 && dl_id < count ? dl_id : 0, &stream->s);
    if (e) {
        *exc = tb_raise_error(env, "stream: waiting for the producer's stream failed: %s%s", e, suffix);
        return 0;
    }
    *device = (tb_device){place.type, place.index};
    return 1;
}

ERL_NIF_TERM tb_dlpack_device_term(ErlNifEnv *env, int32_t dl_type, int32_t dl_id, ERL_NIF_TERM *device_type)
{
    int row = tb_dlpack_device_row_of(dl_type);
    *device_type = tb_atoms.dlpack_devices[row < 0 ? 0 : row];
    tb_dl_placement place;
    tb_devmem_dlpack_placement(dl_type, dl_id, &place);
    return tb_make_device(env, place.type, place.index);
}
