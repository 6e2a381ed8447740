/* What every NIF that exchanges DLPack does: an export's checks, and the
 * import of a managed tensor (tb_dlpack_exchange.h). */
#include "tb_dlpack_exchange.h"

#include <stdio.h>
#include <stdlib.h>

#include "tb_dlpack_export.h"
#include "tb_file_map.h"
#include "tb_raise.h"
#include "tb_release.h"
#include "tb_runtime.h"
#include "tb_state.h"
#include "tb_storage.h"
#include "tb_term.h"
#include "torch_shim.h"

/* ---- Exports ------------------------------------------------------------ */

int tb_dlpack_export_checks(ErlNifEnv *env, const tb_tensor_desc *d, int versioned, int *read_only, ERL_NIF_TERM stream,
                            ERL_NIF_TERM *exc)
{
    if (*read_only && !versioned) {
        *exc = tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "read_only",
                               "read_only: a legacy DLManagedTensor cannot carry the READ_ONLY flag; "
                               "export it versioned");
        return 0;
    }
    /* A read-only tensor stays read-only when passed on. */
    if (tb_storage_read_only(&d->info)) {
        if (!versioned) {
            *exc = tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "version",
                                   "version: the tensor is read-only (%s), and a legacy "
                                   "DLManagedTensor cannot carry the READ_ONLY flag; export it versioned",
                                   tb_storage_read_only_reason(&d->info));
            return 0;
        }
        *read_only = 1;
    }
    /* Its consumer reads without our SIGBUS guard: a mapped file cut
     * short under the tensor is refused here, as copies of it raise. */
    if (!tb_file_map_check(env, d, 0, "tensor", 0, exc))
        return 0;
    /* The stream contract (tb_stream.h); host tensors without a stream skip it. */
    if ((tb_device_runtime(d->info.device_type) != TB_RUNTIME_HOST || stream != tb_atoms.undefined) &&
        !tb_dlpack_export_stream(env, &d->info, stream, exc))
        return 0;
    return 1;
}

/* ---- Imports: the storage ------------------------------------------------ */

/* The storage of an imported tensor: it calls the producer's deleter, once,
 * when libtorch frees it. malloc: that may happen on any thread. */
typedef struct {
    tb_storage header;
    void *managed;
    int versioned;
    tb_defer deferred;  /* where the deleter runs */
    tb_release_job job; /* while queued there */
} tb_import;

static void release_import_job(tb_release_job *job)
{
    tb_import *im = (tb_import *)((char *)job - offsetof(tb_import, job));
    tb_dlpack_release(im->managed, im->versioned);
    free(im);
    tb_count_add(&tb_library_state->deferred, -1);
}

long tb_dlpack_deferred(void)
{
    return tb_count_read(&tb_library_state->deferred);
}

/* A deferred import's deleter never runs on the thread that frees the
 * storage (a scheduler, when the last tensor is collected): a producer's
 * deleter may block there (Python's takes the GIL). */
static void release_import(tb_storage *s)
{
    tb_import *im = (tb_import *)s;
    if (im->deferred) {
        tb_release_later(&im->job, im->deferred == TB_DEFER_PYTHON);
        return;
    }
    tb_dlpack_release(im->managed, im->versioned);
    free(im);
}

void tb_dlpack_release_as(void *managed, int versioned, tb_defer deferred)
{
    if (deferred)
        tb_dlpack_release_later(managed, versioned, deferred == TB_DEFER_PYTHON);
    else
        tb_dlpack_release(managed, versioned);
}

/* ---- Imports: the tensor ------------------------------------------------- */

tb_reason tb_dlpack_status_reason(tb_dlc_status status)
{
    switch (status) {
    case TB_DLC_OK:
    case TB_DLC_NOT_VERSIONED:
    case TB_DLC_UNKNOWN_DEVICE:
    case TB_DLC_LAYOUT: return TB_WHY_BAD_VALUE;
    case TB_DLC_MAJOR_VERSION:
    case TB_DLC_UNKNOWN_FLAGS:
    case TB_DLC_UNSUPPORTED_DEVICE:
    case TB_DLC_LANES:
    case TB_DLC_UNSUPPORTED_DTYPE: return TB_WHY_UNSUPPORTED;
    case TB_DLC_NDIM:
    case TB_DLC_NULL_SHAPE: return TB_WHY_BAD_SHAPE;
    case TB_DLC_UNKNOWN_DTYPE: return TB_WHY_BAD_DTYPE;
    case TB_DLC_BYTE_OFFSET: return TB_WHY_OUT_OF_EXTENT;
    }
    return TB_WHY_BAD_VALUE;
}

/* A refused import. The tensor is released first when the import owns it
 * (see tb_dlpack_check.h); otherwise nothing in it is called and the
 * message says the caller still answers for it. */
static ERL_NIF_TERM refuse(ErlNifEnv *env, void *m, int versioned, int owned, tb_defer deferred,
                           const tb_dlpack_checked *c)
{
    if (owned)
        tb_dlpack_release_as(m, versioned, deferred);
    const char *fate = owned ? "the producer's deleter was called"
                             : "nothing in it was called: whoever passed the address still owns it";
    const char *dev = tb_dlpack_device_name(c->device_type);
    const char *code = tb_dlpack_type_code_name(c->dl_dtype.code);
    const tb_layout *l = &c->layout;
    tb_reason why = tb_dlpack_status_reason(c->status);

    switch (c->status) {
    case TB_DLC_OK: break;
    case TB_DLC_NOT_VERSIONED:
        return tb_raise_badarg(env, why, "version",
                               "version: the address does not hold a DLManagedTensorVersioned "
                               "(its version reads %u.%u; a legacy DLManagedTensor needs version: legacy); %s",
                               c->version.major, c->version.minor, fate);
    case TB_DLC_MAJOR_VERSION:
        return tb_raise_error(env, why, "version", "version: DLPack %u.%u is not supported, this library reads 1.x; %s",
                              c->version.major, c->version.minor, fate);
    case TB_DLC_UNKNOWN_FLAGS:
        return tb_raise_error(env, why, "flags", "flags: %#lx has bits DLPack 1.3 does not define; %s",
                              (unsigned long)c->flags, fate);
    case TB_DLC_NDIM:
        return tb_raise_badarg(env, why, "ndim", "ndim: %d is out of range (0 to %d); %s", (int)c->ndim, TB_MAX_DIMS,
                               fate);
    case TB_DLC_UNKNOWN_DEVICE:
        return tb_raise_badarg(env, why, "device", "device: unknown DLPack device type %d; %s", (int)c->device_type,
                               fate);
    case TB_DLC_UNSUPPORTED_DEVICE:
        return tb_raise_error(env, why, "device",
                              "device: a %s tensor (device type %d, device %d): only %s tensors can be "
                              "imported; %s",
                              dev, (int)c->device_type, (int)c->device_id, tb_dlpack_imported_devices(), fate);
    case TB_DLC_UNKNOWN_DTYPE:
        return tb_raise_badarg(env, why, "dtype", "dtype: unknown DLPack type code %u (bits %u, lanes %u); %s",
                               c->dl_dtype.code, c->dl_dtype.bits, c->dl_dtype.lanes, fate);
    case TB_DLC_LANES:
        return tb_raise_error(env, why, "dtype",
                              "dtype: %s with %u lanes (type code %u, bits %u): vector types are not "
                              "supported; %s",
                              code, c->dl_dtype.lanes, c->dl_dtype.code, c->dl_dtype.bits, fate);
    case TB_DLC_UNSUPPORTED_DTYPE:
        return tb_raise_error(env, why, "dtype", "dtype: %s with %u bits (type code %u) has no dtype here; %s", code,
                              c->dl_dtype.bits, c->dl_dtype.code, fate);
    case TB_DLC_NULL_SHAPE:
        return tb_raise_badarg(env, why, "shape", "shape: NULL with ndim %d; %s", (int)c->ndim, fate);
    case TB_DLC_BYTE_OFFSET:
        return tb_raise_badarg(env, why, "byte_offset", "byte_offset: data + byte_offset overflows 64 bits; %s", fate);
    case TB_DLC_LAYOUT: {
        char suffix[120];
        snprintf(suffix, sizeof suffix, "; %s", fate);
        return tb_raise_layout(env, "data", l, c->spec, tb_dtypes[c->dtype].name, suffix);
    }
    }
    return tb_raise_badarg(env, TB_WHY_BAD_VALUE, NULL, "dlpack: invalid tensor; %s", fate);
}

ERL_NIF_TERM tb_dlpack_import(ErlNifEnv *env, void *m, int versioned, const tb_dlpack_import_how *how)
{
    const tb_dlpack_stream *stream = how->stream;
    int read_only = how->read_only;
    tb_dlpack_checked chk;
    tb_dlpack_check_managed(m, versioned, &chk);
    /* Taken out of a capsule (ours, or Python's): the deleter is ours. */
    int owned = chk.owned || how->owned;
    if (chk.status != TB_DLC_OK) {
        /* Refused unread (read as the wrong version): the address stays
         * the caller's, and one later import may still take it. */
        if (how->claimed && !owned)
            tb_dlpack_hand_back(m, how->claimed);
        return refuse(env, m, versioned, owned, how->deferred, &chk);
    }
    int st = tb_dtypes[chk.dtype].torch_scalar_type;
    if (!tb_shim_has_scalar_type(st)) {
        tb_dlpack_release_as(m, versioned, how->deferred);
        return tb_raise_error(env, TB_WHY_UNSUPPORTED, "dtype",
                              "dtype: %s is not supported by the linked libtorch %s; "
                              "the producer's deleter was called",
                              tb_dtypes[chk.dtype].name, tb_shim_torch_version());
    }

    /* The device libtorch sees, the runtime's check of the pointer, and the
     * wait for the producer's stream. */
    tb_device device = {TB_DEVICE_CPU, 0};
    ERL_NIF_TERM exc;
    if ((chk.device_type != tb_kDLCPU || stream->term != tb_atoms.undefined || tb_runtime_devices_anywhere()) &&
        !tb_dlpack_device_import(env, chk.device_type, chk.device_id, chk.layout.ptr, chk.spec.byte_size, stream,
                                 "; the producer's deleter was called", &device, &exc)) {
        tb_dlpack_release_as(m, versioned, how->deferred);
        return exc;
    }

    read_only |= (chk.flags & TB_DLPACK_FLAG_READ_ONLY) != 0;
    tb_import *im = malloc(sizeof *im);
    if (!im) {
        tb_dlpack_release_as(m, versioned, how->deferred);
        return tb_raise_error(env, TB_WHY_NO_MEMORY, NULL,
                              "from_dlpack: out of memory; the producer's deleter was called");
    }
    tb_storage_init(&im->header, TB_MEMORY_DLPACK, read_only ? TB_STORAGE_READ_ONLY : 0, release_import);
    im->managed = m;
    im->versioned = versioned;
    im->deferred = how->deferred;
    im->job.run = release_import_job;
    if (im->deferred)
        tb_count_add(&tb_library_state->deferred, 1);
    tb_shim_tensor *h;
    tb_shim_error err;
    /* The shim owns the storage from here: released when libtorch frees it,
     * or at once if the call fails. */
    if (!tb_shim_from_blob((void *)(uintptr_t)chk.layout.ptr, chk.layout.ndim, chk.layout.shape, chk.layout.strides, st,
                           device.type, device.index, &im->header, tb_storage_release, &h, &err))
        return tb_raise_error(env, TB_WHY_LIBTORCH, NULL, "from_dlpack: %s; the producer's deleter was called",
                              err.message);
    return tb_tensor_return(env, h);
}
