#include "tb_dlpack_device.h"

#include "tb_cuda_runtime.h"
#include "tb_dlpack_check.h"
#include "tb_stream.h"
#include "tb_term.h"
#include "tensor_blob_dlpack.h"

/* A stream term: undefined, or an integer; 0 with *exc otherwise, its
 * message ending with suffix. */
static int get_stream(ErlNifEnv *env, ERL_NIF_TERM term, const char *suffix, tb_stream *out, ERL_NIF_TERM *exc)
{
    int given = term != tb_atoms.undefined;
    ErlNifSInt64 value = 0;
    const char *why = NULL;
    if (given && !enif_get_int64(env, term, &value)) {
        *exc = tb_raise_badarg(env, "stream: expected an integer (a cudaStream_t, 1 or 2 for the default streams, "
                                    "-1 for no synchronization), got %T%s",
                               term, suffix);
        return 0;
    }
    if (!tb_stream_parse(given, value, out, &why)) {
        *exc = tb_raise_badarg(env, "stream: %s, got %T%s", why, term, suffix);
        return 0;
    }
#if !TB_CUDA
    if (given && out->sync) {
        *exc = tb_raise_error(env, "stream: this build has no CUDA runtime calls (TB_CUDA=0), so it cannot order "
                                   "work on CUDA streams; pass no stream, or -1%s",
                              suffix);
        return 0;
    }
#endif
    return 1;
}

int tb_dlpack_export_stream(ErlNifEnv *env, const tb_shim_info *info, ERL_NIF_TERM stream, ERL_NIF_TERM *exc)
{
    if (info->device_type != TB_DEVICE_CUDA) {
        if (stream == tb_atoms.undefined)
            return 1;
        /* The array API: on CPU and devices without streams only None. */
        *exc = tb_raise_badarg(env, "stream: a CPU tensor has no stream (the array API takes none for CPU "
                                    "memory), got %T",
                               stream);
        return 0;
    }
    tb_stream s;
    if (!get_stream(env, stream, "", &s, exc))
        return 0;
    const char *e = tb_stream_export(tb_cuda_ops_get(), info->device_index, &s);
    if (e) {
        *exc = tb_raise_error(env, "stream: making the consumer's stream wait for libtorch's failed: %s", e);
        return 0;
    }
    return 1;
}

int tb_dlpack_device_import_stream_check(ErlNifEnv *env, int32_t dl_type, ERL_NIF_TERM stream, const char *suffix,
                                         ERL_NIF_TERM *exc)
{
    if (dl_type == tb_kDLCPU && stream != tb_atoms.undefined) {
        *exc = tb_raise_badarg(env, "stream: a kDLCPU tensor has no stream (the array API takes none for CPU "
                                    "memory), got %T%s",
                               stream, suffix);
        return 0;
    }
    tb_stream s;
    return get_stream(env, stream, suffix, &s, exc);
}

int tb_dlpack_device_import(ErlNifEnv *env, int32_t dl_type, int32_t dl_id, uint64_t ptr, uint64_t bytes,
                          ERL_NIF_TERM stream, const char *suffix, tb_device *device, ERL_NIF_TERM *exc)
{
    const char *name = tb_dlpack_device_name(dl_type);
    tb_dl_placement place;
    tb_devmem_dlpack_placement(dl_type, dl_id, &place);
    if (place.needs_cuda_torch && !tb_shim_cuda_built()) {
        *exc = tb_raise_error(env, "device: a %s tensor (device %d): this libtorch was built without CUDA, so it "
                                   "cannot be imported (%C reads its metadata)%s",
                              name, (int)dl_id, "tensor_blob:dlpack_info/1", "TensorBlob.CUDA.info/1", suffix);
        return 0;
    }
    if (!tb_dlpack_device_import_stream_check(env, dl_type, stream, suffix, exc))
        return 0;
    tb_stream s;
    get_stream(env, stream, suffix, &s, exc); /* checked just above */

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
    if (place.type == TB_DEVICE_CUDA)
        e = tb_stream_import(tb_cuda_ops_get(), place.index, &s);
    else if (dl_type == tb_kDLCUDAHost)
        e = tb_stream_host_wait(tb_cuda_ops_get(), dl_id >= 0 && dl_id < count ? dl_id : 0, &s);
    if (e) {
        *exc = tb_raise_error(env, "stream: waiting for the producer's stream failed: %s%s", e, suffix);
        return 0;
    }
    *device = (tb_device){place.type, place.index};
    return 1;
}

ERL_NIF_TERM tb_dlpack_device_term(ErlNifEnv *env, int32_t dl_type, int32_t dl_id, ERL_NIF_TERM *device_type)
{
    switch (dl_type) {
    case tb_kDLCUDA: *device_type = tb_atoms.cuda; break;
    case tb_kDLCUDAHost: *device_type = tb_atoms.cuda_host; break;
    case tb_kDLCUDAManaged: *device_type = tb_atoms.cuda_managed; break;
    default: *device_type = tb_atoms.cpu; break;
    }
    tb_dl_placement place;
    tb_devmem_dlpack_placement(dl_type, dl_id, &place);
    return tb_make_device(env, place.type, place.index);
}

