/* The DLPack NIFs: to_dlpack and the capsules it makes (consumed, read,
 * asked their version), and from_dlpack, the import of a capsule or an
 * address, into a tensor whose storage calls the producer's deleter. The
 * exports and capsules themselves are tensor/tb_dlpack_export. */
#include <stdio.h>
#include <stdlib.h>

#include "tb_dlpack_check.h"
#include "tb_dlpack_device.h"
#include "tb_dlpack_exchange.h"
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
    if (!tb_dlpack_export_checks(env, &d, versioned, &read_only, argv[3], &exc))
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
        return tb_raise_badarg(env, tb_dlpack_status_reason(chk.status), "capsule", "capsule: %s",
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
    tb_defer deferred; /* where the producer's deleter runs */
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
    int deferred;
    if (!tb_get_boolean(argv[4], &deferred)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "defer_release", "defer_release: expected a boolean, got %T",
                               argv[4]);
        return 0;
    }
    a->deferred = deferred ? TB_DEFER : TB_DEFER_NO;
    tb_dlpack_stream_decode(env, argv[3], &a->stream);
    return 1;
}

/* The managed tensor of our capsule c, taken unless an option is refused
 * first. 0 with *answer set: the error, or the tensor already (our own
 * export, back as it was). */
static int take_from_capsule(ErlNifEnv *env, const ERL_NIF_TERM argv[], const import_args *a, tb_capsule *c, void **m,
                             int *versioned, ERL_NIF_TERM *answer)
{
    const tb_dlpack_stream *stream = &a->stream;
    *versioned = c->versioned;
    if (a->version != VERSION_ANY && (a->version == VERSION_VERSIONED) != *versioned) {
        *answer =
            tb_raise_badarg(env, TB_WHY_BAD_VALUE, "version", "version: the capsule holds a %s tensor, got version %T",
                            *versioned ? "versioned" : "legacy", argv[1]);
        return 0;
    }
    /* The options are checked first, against what the capsule holds
     * (read as dlpack_info reads it): a refused option leaves it armed. */
    tb_dlpack_checked held;
    if (stream->term != tb_atoms.undefined && tb_capsule_managed(env, c, 0, &held, answer) &&
        held.status == TB_DLC_OK &&
        !tb_dlpack_device_import_stream_check(env, held.device_type, stream, "; the capsule is still armed", answer))
        return 0;
    /* Taken whatever happens next: a refused capsule is released, not
     * put back, so no second consumer can race a failed one. */
    if (!(*m = tb_capsule_managed(env, c, 1, NULL, answer)))
        return 0;
    /* With a stream, the stream contract runs for ours too. */
    if (stream->term == tb_atoms.undefined && tb_dlpack_own_export(*m, *versioned, a->read_only)) {
        *answer = import_own_export(env, c, *m);
        return 0;
    }
    return 1;
}

/* What can be checked of an address without reading it: the rest is
 * trusted. */
static int plausible_address(ErlNifEnv *env, ErlNifUInt64 address, ERL_NIF_TERM *answer)
{
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
    return 1;
}

/* The version the tensor at address is read as. Ours (handed: what it was
 * handed out as): that one, and a version asked for must be it (unread,
 * it stays handed out). Another producer's: the one asked for. */
static int address_version(ErlNifEnv *env, const ERL_NIF_TERM argv[], const import_args *a, ErlNifUInt64 address,
                           int handed, int *versioned, ERL_NIF_TERM *answer)
{
    if (handed != TB_HANDED_VERSIONED && handed != TB_HANDED_LEGACY) {
        *versioned = a->version != VERSION_LEGACY;
        return 1;
    }
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
    return 1;
}

/* The managed tensor at address. Ours, handed out and not yet taken: taken
 * now, once; trusted as a capsule is. Anything else is read only when the
 * caller says it answers for it (unsafe): a second import of an address,
 * or a freed one, would call its deleter twice. */
static int take_at_address(ErlNifEnv *env, const ERL_NIF_TERM argv[], const import_args *a, ErlNifUInt64 address,
                           int unsafe, void **m, int *versioned, int *claimed, ERL_NIF_TERM *answer)
{
    if (!plausible_address(env, address, answer))
        return 0;
    int handed = tb_dlpack_claim((uintptr_t)address);
    if (handed == TB_HANDED_NO && !unsafe) {
        *answer = tb_raise_badarg(env, TB_WHY_GONE, "address",
                                  "address: %lu is not a managed tensor this library handed out and still "
                                  "holds (it was imported already, deleted, or made by another "
                                  "producer); nothing in it was called. An address from another producer "
                                  "is trusted blindly (imported twice, or after it was freed, its deleter "
                                  "runs twice): to accept that risk, pass %C",
                                  (unsigned long)address, "#{unsafe_address => true}", "unsafe_address: true");
        return 0;
    }
    if (!address_version(env, argv, a, address, handed, versioned, answer))
        return 0;
    *m = (void *)(uintptr_t)address;
    *claimed = handed;
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
    tb_capsule *c = tb_capsule_get(env, argv[0]);
    *claimed = 0;
    if (c) {
        if (!take_from_capsule(env, argv, a, c, m, versioned, answer))
            return 0;
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
    ErlNifUInt64 address;
    if (enif_get_uint64(env, source, &address)) {
        *from_capsule = 0;
        return take_at_address(env, argv, a, address, unsafe, m, versioned, claimed, answer);
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
    void *m;
    int versioned, from_capsule, claimed;
    if (!take_managed(env, argv, &args, &m, &versioned, &from_capsule, &claimed, &answer))
        return answer;

    tb_dlpack_import_how how = {.read_only = args.read_only,
                                .deferred = args.deferred,
                                .owned = from_capsule,
                                .claimed = claimed,
                                .stream = &args.stream};
    return tb_dlpack_import(env, m, versioned, &how);
}
