/* The DLPack NIFs: to_dlpack and the capsules it makes (consumed, read,
 * asked their version), and from_dlpack, the import of a capsule or an
 * address, into a tensor whose storage calls the producer's deleter. The
 * exports and capsules themselves are dlpack/tb_dlpack_export. */
#include <stdio.h>
#include <stdlib.h>

#include "tb_dlpack.h"
#include "tb_dlpack_check.h"
#include "tb_dlpack_device.h"
#include "tb_dlpack_export.h"
#include "tb_nifs.h"
#include "tb_release.h"
#include "tb_runtime.h"
#include "tb_state.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "tensor_blob_dlpack.h"
#include "torch_shim.h"

/* ---- Import: the storage ------------------------------------------------ */

/* Where an import's producer's deleter runs: at once, on the release
 * thread, or there inside its hold of Python's GIL. */
enum { DEFER_NO = 0, DEFER = 1, DEFER_PYTHON = 2 };

/* The storage of an imported tensor: it calls the producer's deleter, once,
 * when libtorch frees it. malloc: that may happen on any thread. */
typedef struct {
    tb_storage header;
    void *managed;
    int versioned;
    int deferred;       /* the deleter runs on the release thread (tb_release.h): a DEFER_ value */
    tb_release_job job; /* while queued there */
} tb_import;

static void release_import_job(tb_release_job *job)
{
    tb_import *im = (tb_import *)((char *)job - offsetof(tb_import, job));
    tb_dlpack_release(im->managed, im->versioned);
    free(im);
    tb_count_add(&tb_st->deferred, -1);
}

long tb_dlpack_deferred(void)
{
    return tb_count_read(&tb_st->deferred);
}

/* A deferred import's deleter never runs on the thread that frees the
 * storage (a scheduler, when the last tensor is collected): a producer's
 * deleter may block there (Python's takes the GIL). */
static void release_import(tb_storage *s)
{
    tb_import *im = (tb_import *)s;
    if (im->deferred) {
        tb_release_later(&im->job, im->deferred == DEFER_PYTHON);
        return;
    }
    tb_dlpack_release(im->managed, im->versioned);
    free(im);
}

/* A managed tensor an import refused, released as the import says. */
static void release_managed_as(void *managed, int versioned, int deferred)
{
    if (deferred)
        tb_dlpack_release_later(managed, versioned, deferred == DEFER_PYTHON);
    else
        tb_dlpack_release(managed, versioned);
}

/* ---- NIFs ------------------------------------------------------------ */

ERL_NIF_TERM tb_nif_to_dlpack(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc))
        return exc;
    int versioned, read_only;
    if (argv[1] != tb_atoms.versioned && argv[1] != tb_atoms.legacy)
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "version", "version: expected versioned or legacy, got %T",
                               argv[1]);
    versioned = argv[1] == tb_atoms.versioned;
    if (!tb_get_boolean(argv[2], &read_only))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "read_only", "read_only: expected a boolean, got %T", argv[2]);
    if (read_only && !versioned)
        return tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "read_only",
                               "read_only: a legacy DLManagedTensor cannot carry the READ_ONLY flag; "
                               "export it versioned");
    /* A read-only tensor stays read-only when passed on. */
    if (tb_storage_read_only(&d.info)) {
        if (!versioned)
            return tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "version",
                                   "version: the tensor is read-only (%s), and a legacy "
                                   "DLManagedTensor cannot carry the READ_ONLY flag; export it versioned",
                                   tb_storage_read_only_reason(&d.info));
        read_only = 1;
    }
    /* The stream contract (tb_stream.h); host tensors without a stream skip it. */
    if ((tb_device_runtime(d.info.device_type) != TB_RUNTIME_HOST || argv[3] != tb_atoms.undefined) &&
        !tb_dlpack_export_stream(env, &d.info, argv[3], &exc))
        return exc;
    return tb_capsule_make(env, d.tensor, versioned, read_only);
}

ERL_NIF_TERM tb_nif_consume_dlpack(TB_NIF_PARAMS)
{
    ERL_NIF_TERM exc;
    tb_capsule *c = tb_capsule_arg(env, argv[0], &exc);
    void *m = c ? tb_capsule_managed(env, c, 1, NULL, &exc) : NULL;
    if (!m)
        return exc;
    tb_dlpack_hand_out(m, c->versioned); /* a capsule holds only our exports */
    return enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)m);
}

/* What a caller may do about a DLPack tensor that fails the checks: the
 * reason of its error. */
static tb_reason status_reason(tb_dlc_status status)
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

/* dlpack_info(Capsule) -> the metadata of its managed tensor, read without
 * consuming it and without touching the memory: #{device, ptr, shape,
 * strides, dtype, read_only}. For any device, CUDA included. */
ERL_NIF_TERM tb_nif_dlpack_info(TB_NIF_PARAMS)
{
    ERL_NIF_TERM exc;
    tb_dlpack_checked chk;
    tb_capsule *c = tb_capsule_arg(env, argv[0], &exc);
    if (!c || !tb_capsule_managed(env, c, 0, &chk, &exc))
        return exc;
    if (chk.status != TB_DLC_OK)
        return tb_raise_badarg(env, status_reason(chk.status), "capsule", "capsule: %s",
                               tb_dlpack_status_text(chk.status));
    ERL_NIF_TERM device_type;
    ERL_NIF_TERM device = tb_dlpack_device_term(env, chk.device_type, chk.device_id, &device_type);
    ERL_NIF_TERM keys[] = {tb_atoms.device,    tb_atoms.device_type, tb_atoms.dtype,  tb_atoms.ptr,
                           tb_atoms.read_only, tb_atoms.shape,       tb_atoms.strides};
    ERL_NIF_TERM values[] = {device,
                             device_type,
                             tb_atoms.dtypes[chk.dtype],
                             enif_make_uint64(env, chk.layout.ptr),
                             (chk.flags & TB_DLPACK_FLAG_READ_ONLY) ? tb_atoms.true_ : tb_atoms.false_,
                             tb_make_shape(env, chk.layout.ndim, chk.layout.shape),
                             tb_make_strides(env, chk.layout.ndim, chk.layout.strides)};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, 7, &map);
    return map;
}

ERL_NIF_TERM tb_nif_dlpack_version(TB_NIF_PARAMS)
{
    ERL_NIF_TERM exc;
    tb_capsule *c = tb_capsule_arg(env, argv[0], &exc);
    if (!c)
        return exc;
    return c->versioned ? tb_atoms.versioned : tb_atoms.legacy;
}

/* A refused import. The tensor is released first when the import owns it
 * (see tb_dlpack_check.h); otherwise nothing in it is called and the
 * message says the caller still answers for it. */
static ERL_NIF_TERM refuse(ErlNifEnv *env, void *m, int versioned, int owned, int deferred, const tb_dlpack_checked *c)
{
    if (owned)
        release_managed_as(m, versioned, deferred);
    const char *fate = owned ? "the producer's deleter was called"
                             : "nothing in it was called: whoever passed the address still owns it";
    const char *dev = tb_dlpack_device_name(c->device_type);
    const char *code = tb_dlpack_type_code_name(c->dl_dtype.code);
    const tb_layout *l = &c->layout;
    tb_reason why = status_reason(c->status);

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

/* Our own export, imported as it is: the capsule's tensor is that tensor
 * (as from_blob of a tensor's own blob gives it back). The managed tensor is
 * released at once. */
static ERL_NIF_TERM import_own_export(ErlNifEnv *env, tb_capsule *c, void *m)
{
    ERL_NIF_TERM term = enif_make_resource(env, c->source);
    tb_dlpack_release(m, c->versioned);
    return term;
}

/* from_dlpack's options, decoded once before any work. */
typedef struct {
    enum { VERSION_ANY, VERSION_VERSIONED, VERSION_LEGACY } version; /* undefined: as the capsule holds */
    int read_only;
    int deferred; /* the producer's deleter runs on the release thread: a DEFER_ value */
    tb_dlpack_stream stream;
} import_args;

/* 0 with *exc set when an option is refused; what is wrong with the stream
 * is kept in the struct, said where the import uses it. */
static int get_import_args(ErlNifEnv *env, const ERL_NIF_TERM argv[], import_args *a, ERL_NIF_TERM *exc)
{
    ERL_NIF_TERM version = argv[1];
    if (version == tb_atoms.versioned)
        a->version = VERSION_VERSIONED;
    else if (version == tb_atoms.legacy)
        a->version = VERSION_LEGACY;
    else if (version == tb_atoms.undefined)
        a->version = VERSION_ANY;
    else {
        *exc =
            tb_raise_badarg(env, TB_WHY_BAD_VALUE, "version", "version: expected versioned or legacy, got %T", version);
        return 0;
    }
    if (!tb_get_boolean(argv[2], &a->read_only)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "read_only", "read_only: expected a boolean, got %T", argv[2]);
        return 0;
    }
    /* python (TensorBlob.Python's imports, tb_python.c): deferred, and
     * the deleter is Python's, so it runs inside the release thread's
     * hold of the GIL. */
    if (argv[4] == tb_atoms.python)
        a->deferred = DEFER_PYTHON;
    else if (!tb_get_boolean(argv[4], &a->deferred)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "defer_release", "defer_release: expected a boolean, got %T",
                               argv[4]);
        return 0;
    }
    tb_dlpack_stream_decode(env, argv[3], &a->stream);
    return 1;
}

/* The managed tensor an import takes: out of our capsule (*from_capsule),
 * or at an address whose producer answers for it. 1, or 0 with *answer set:
 * the error, or the tensor already (our own export, back as it was).
 * *claimed: what an address of ours was handed out as (a TB_HANDED_ value),
 * TB_HANDED_NO for any other source. */
static int take_managed(ErlNifEnv *env, const ERL_NIF_TERM argv[], const import_args *a, void **m, int *versioned,
                        int *from_capsule, int *claimed, ERL_NIF_TERM *answer)
{
    const tb_dlpack_stream *stream = &a->stream;
    int read_only = a->read_only;
    tb_capsule *c = tb_capsule_get(env, argv[0]);
    ErlNifUInt64 address;
    *claimed = 0;
    if (c) {
        *versioned = c->versioned;
        if (a->version != VERSION_ANY && (a->version == VERSION_VERSIONED) != *versioned) {
            *answer = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "version",
                                      "version: the capsule holds a %s tensor, got version %T",
                                      *versioned ? "versioned" : "legacy", argv[1]);
            return 0;
        }
        /* The options are checked first, against what the capsule holds
         * (read as dlpack_info reads it): a refused option leaves it armed. */
        tb_dlpack_checked held;
        if (stream->term != tb_atoms.undefined && tb_capsule_managed(env, c, 0, &held, answer) &&
            held.status == TB_DLC_OK &&
            !tb_dlpack_device_import_stream_check(env, held.device_type, stream, "; the capsule is still armed",
                                                  answer))
            return 0;
        /* Taken whatever happens next: a refused capsule is released, not
         * put back, so no second consumer can race a failed one. */
        if (!(*m = tb_capsule_managed(env, c, 1, NULL, answer)))
            return 0;
        /* With a stream, the stream contract runs for ours too. */
        if (stream->term == tb_atoms.undefined && tb_dlpack_own_export(*m, *versioned, read_only)) {
            *answer = import_own_export(env, c, *m);
            return 0;
        }
        *from_capsule = 1;
        return 1;
    }
    /* {unsafe_address, Address}: the caller vouches for a foreign address. */
    int unsafe = 0;
    const ERL_NIF_TERM *pair;
    int arity;
    ERL_NIF_TERM source = argv[0];
    if (enif_get_tuple(env, source, &arity, &pair) && arity == 2 && pair[0] == tb_atoms.unsafe_address) {
        unsafe = 1;
        source = pair[1];
    }
    if (enif_get_uint64(env, source, &address)) {
        /* Only what can be checked without reading: the rest is trusted. */
        if (address == 0) {
            *answer = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "address", "address: NULL is not a DLPack managed tensor");
            return 0;
        }
        if (address % _Alignof(tb_DLManagedTensorVersioned) != 0) {
            *answer = tb_raise_badarg(env, TB_WHY_MISALIGNED, "address",
                                      "address: %lu is not aligned to %u bytes, so it is no DLPack managed tensor",
                                      (unsigned long)address, (unsigned)_Alignof(tb_DLManagedTensorVersioned));
            return 0;
        }
        /* Ours, handed out and not yet taken: taken now, once; trusted as
         * a capsule is. Anything else is read only when the caller says
         * it answers for it: a second import of an address, or a freed
         * one, would call its deleter twice. */
        int handed = tb_dlpack_claim((uintptr_t)address);
        int ours = handed != TB_HANDED_NO;
        if (!ours && !unsafe) {
            *answer = tb_raise_badarg(env, TB_WHY_GONE, "address",
                                      "address: %lu is not a managed tensor this library handed out and still "
                                      "holds (it was imported already, deleted, or made by another "
                                      "producer); nothing in it was called. An address from another producer "
                                      "is trusted blindly (imported twice, or after it was freed, its deleter "
                                      "runs twice): to accept that risk, pass %C",
                                      (unsigned long)address, "#{unsafe_address => true}", "unsafe_address: true");
            return 0;
        }
        /* Ours: read as what it was handed out as (a version asked for
         * must be that one); unread, it stays handed out. */
        if (handed == TB_HANDED_VERSIONED || handed == TB_HANDED_LEGACY) {
            int held_versioned = handed == TB_HANDED_VERSIONED;
            if (a->version != VERSION_ANY && (a->version == VERSION_VERSIONED) != held_versioned) {
                tb_dlpack_hand_back((void *)(uintptr_t)address, handed);
                *answer = tb_raise_badarg(env, TB_WHY_BAD_OPTION, "version",
                                          "version: address %lu holds a %s managed tensor this library handed out, "
                                          "got version %T; nothing in it was called and it can still be imported: "
                                          "pass version %T, or none",
                                          (unsigned long)address, held_versioned ? "versioned" : "legacy", argv[1],
                                          held_versioned ? tb_atoms.versioned : tb_atoms.legacy);
                return 0;
            }
            *versioned = held_versioned;
        } else {
            *versioned = a->version != VERSION_LEGACY;
        }
        *m = (void *)(uintptr_t)address;
        *from_capsule = 0;
        *claimed = handed;
        return 1;
    }
    *answer = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "capsule",
                              "capsule: expected a DLPack capsule or a non-negative integer address, got %T", argv[0]);
    return 0;
}

ERL_NIF_TERM tb_nif_from_dlpack(TB_NIF_PARAMS)
{
    /* With a stream the import may wait for the GPU: on a dirty scheduler,
     * before anything is taken. */
    if (argv[3] != tb_atoms.undefined && enif_thread_type() != ERL_NIF_THR_DIRTY_IO_SCHEDULER)
        return enif_schedule_nif(env, "from_dlpack", ERL_NIF_DIRTY_JOB_IO_BOUND, tb_nif_from_dlpack, argc, argv);
    import_args args;
    ERL_NIF_TERM answer;
    if (!get_import_args(env, argv, &args, &answer))
        return answer;
    int read_only = args.read_only;
    tb_dlpack_stream *stream = &args.stream;

    void *m;
    int versioned, from_capsule, claimed;
    if (!take_managed(env, argv, &args, &m, &versioned, &from_capsule, &claimed, &answer))
        return answer;

    tb_dlpack_checked chk;
    tb_dlpack_check_managed(m, versioned, &chk);
    /* Our own capsules are always trusted: they hold our exports. */
    int owned = chk.owned || from_capsule;
    if (chk.status != TB_DLC_OK) {
        /* Refused unread (read as the wrong version): the address stays
         * the caller's, and one later import may still take it. */
        if (claimed && !owned)
            tb_dlpack_hand_back(m, claimed);
        return refuse(env, m, versioned, owned, args.deferred, &chk);
    }
    int st = tb_dtypes[chk.dtype].torch_scalar_type;
    if (!tb_shim_has_scalar_type(st)) {
        release_managed_as(m, versioned, args.deferred);
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
        release_managed_as(m, versioned, args.deferred);
        return exc;
    }

    read_only |= (chk.flags & TB_DLPACK_FLAG_READ_ONLY) != 0;
    tb_import *im = malloc(sizeof *im);
    if (!im) {
        release_managed_as(m, versioned, args.deferred);
        return tb_raise_error(env, TB_WHY_NO_MEMORY, NULL,
                              "from_dlpack: out of memory; the producer's deleter was called");
    }
    tb_storage_init(&im->header, TB_MEMORY_DLPACK, read_only ? TB_STORAGE_READ_ONLY : 0, release_import);
    im->managed = m;
    im->versioned = versioned;
    im->deferred = args.deferred;
    im->job.run = release_import_job;
    if (im->deferred)
        tb_count_add(&tb_st->deferred, 1);
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
