#include "tb_dlpack_device.h"

#include "tb_dlpack_check.h"
#include "tb_runtime.h"
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
}

/* A decoded stream for a runtime (TB_RUNTIME_*): 1, or 0 with *exc saying
 * what is wrong with it, its message ending with suffix. */
static int stream_ok(ErlNifEnv *env, const tb_dlpack_stream *st, int runtime, const char *suffix, ERL_NIF_TERM *exc)
{
    const char *refused = tb_runtime_get(runtime)->streams_refused;
    switch (st->status) {
    case TB_STREAM_OK:
        if (!refused || !st->s.given || !st->s.sync)
            return 1;
        *exc = tb_raise_error(env, TB_WHY_UNSUPPORTED, "stream",
                              "stream: %s, so it cannot order work on %s streams; pass no stream, or -1%s", refused,
                              tb_runtime_names[runtime], suffix);
        return 0;
    case TB_STREAM_NOT_INTEGER:
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "stream",
                               "stream: expected an integer (a cudaStream_t, 1 or 2 for the default streams, "
                               "-1 for no synchronization), got %T%s",
                               st->term, suffix);
        return 0;
    default:
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "stream", "stream: %s, got %T%s", st->why, st->term, suffix);
        return 0;
    }
}

int tb_dlpack_export_stream(ErlNifEnv *env, const tb_shim_info *info, ERL_NIF_TERM stream, ERL_NIF_TERM *exc)
{
    int runtime = tb_device_runtime(info->device_type);
    if (runtime == TB_RUNTIME_HOST) {
        if (stream == tb_atoms.undefined)
            return 1;
        /* The array API: on CPU and devices without streams only None. */
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "stream",
                               "stream: a %s tensor has no stream (the array API takes none for CPU "
                               "memory), got %T",
                               tb_devices[info->device_type].c10_name, stream);
        return 0;
    }
    tb_dlpack_stream s;
    tb_dlpack_stream_decode(env, stream, &s);
    if (!stream_ok(env, &s, runtime, "", exc))
        return 0;
    const char *e = tb_runtime_get(runtime)->stream_export(info->device_index, &s.s);
    if (e) {
        *exc = tb_raise_error(env, TB_WHY_RUNTIME, "stream",
                              "stream: making the consumer's stream wait for libtorch's failed: %s", e);
        return 0;
    }
    return 1;
}

int tb_dlpack_device_import_stream_check(ErlNifEnv *env, int32_t dl_type, const tb_dlpack_stream *stream,
                                         const char *suffix, ERL_NIF_TERM *exc)
{
    int row = tb_dlpack_device_row_of(dl_type);
    if (row < 0)
        return stream_ok(env, stream, TB_RUNTIME_HOST, suffix, exc);
    if (tb_dlpack_devices[row].check == TB_DLCHECK_HOST && stream->term != tb_atoms.undefined) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "stream",
                               "stream: a %s tensor has no stream (the array API takes none for CPU "
                               "memory), got %T%s",
                               tb_dlpack_device_name(dl_type), stream->term, suffix);
        return 0;
    }
    return stream_ok(env, stream, tb_dlpack_devices[row].runtime, suffix, exc);
}

int tb_dlpack_device_import(ErlNifEnv *env, int32_t dl_type, int32_t dl_id, uint64_t ptr, uint64_t bytes,
                            const tb_dlpack_stream *stream, const char *suffix, tb_device *device, ERL_NIF_TERM *exc)
{
    const char *name = tb_dlpack_device_name(dl_type);
    tb_dl_placement place;
    tb_devmem_dlpack_placement(dl_type, dl_id, &place);
    if (!tb_shim_device_built(place.type)) {
        *exc = tb_raise_error(env, TB_WHY_UNSUPPORTED, "device",
                              "device: a %s tensor (device %d): this libtorch was built without %s, so it "
                              "cannot be imported (%C reads its metadata)%s",
                              name, (int)dl_id, tb_devices[place.type].c10_name, "tensor_blob:dlpack_info/1",
                              "TensorBlob.CUDA.info/1", suffix);
        return 0;
    }
    if (!tb_dlpack_device_import_stream_check(env, dl_type, stream, suffix, exc))
        return 0;

    char why[200];
    if (bytes > 0 && !tb_runtime_check_dlpack_pointer(dl_type, dl_id, ptr, why, sizeof why)) {
        *exc = tb_raise_badarg(env, TB_WHY_WRONG_DEVICE, "data", "data: %s%s", why, suffix);
        return 0;
    }
    /* Device memory waits on its device's stream; host memory that a
     * device runtime orders (page-locked) on the calling thread. */
    const tb_runtime *own = tb_runtime_get(place.runtime), *checker = tb_runtime_get(place.checker);
    const char *e = NULL;
    if (own->stream_import)
        e = own->stream_import(place.index, &stream->s);
    else if (checker->stream_host_wait)
        e = checker->stream_host_wait(dl_id >= 0 && dl_id < checker->device_count() ? dl_id : 0, &stream->s);
    if (e) {
        *exc = tb_raise_error(env, TB_WHY_RUNTIME, "stream", "stream: waiting for the producer's stream failed: %s%s",
                              e, suffix);
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
