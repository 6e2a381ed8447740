/* tensor_blob's bridge for other NIF libraries.
 *
 * A NIF of your own (a custom op in C or C++) can take a tensor_blob tensor
 * term, the Erlang resource or an Elixir %TensorBlob.Tensor{}, and get a
 * DLPack DLManagedTensorVersioned over the same memory, without a copy and
 * without linking to tensor_blob or libtorch:
 *
 *     #include <tensor_blob.h>
 *
 *     static ERL_NIF_TERM my_sum(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
 *     {
 *         tb_DLManagedTensorVersioned *m;
 *         if (tensor_blob_to_dlpack(env, argv[0], TENSOR_BLOB_BRIDGE_READ_ONLY, &m) != TENSOR_BLOB_BRIDGE_OK)
 *             return enif_make_badarg(env);
 *         const tb_DLTensor *t = &m->dl_tensor;   // shape, strides, dtype, device
 *         ... read t->data, honouring t->strides ...
 *         m->deleter(m);                          // once, from any thread, when done
 *         return result;
 *     }
 *
 * The managed tensor holds its own reference to the memory: it stays valid
 * after the term is garbage-collected, until you call its deleter, which
 * you must do exactly once (from any thread). Keep it past the NIF call as
 * long as you like. READ_ONLY in the flags (or a read-only tensor, such as
 * a view of a binary) sets TB_DLPACK_FLAG_READ_ONLY: do not write then.
 *
 * The other way: a NIF that made a DLManagedTensorVersioned (or a legacy
 * DLManagedTensor) returns its address as an integer,
 * enif_make_uint64(env, (uintptr_t)m), and Elixir or Erlang code imports it
 * with TensorBlob.DLPack.import(address) / tensor_blob:from_dlpack(Address).
 * tensor_blob then owns it and calls its deleter once, when the last tensor
 * over the memory is freed.
 *
 * Build with -I"$(erl -noshell -eval 'io:format("~s", [code:priv_dir(tensor_blob)])' -s init stop)/include".
 * The types are tensor_blob_dlpack.h's: the DLPack 1.x ABI with a tb_
 * prefix, so they never clash with a dlpack.h of your own; the layouts are
 * DLPack's, so a pointer may be cast to DLManagedTensorVersioned *.
 * Needs OTP 24 or later (enif_dynamic_resource_call).
 *
 * The cost: the first call in each file that includes this header finds
 * tensor_blob by name (enif_dynamic_resource_call, about a microsecond)
 * and keeps the table of functions it answers with; every later call goes
 * straight to it, with no atom made and no lookup. The table stays valid
 * for the life of the VM; after a hot upgrade of tensor_blob, once the old
 * code is purged, the next call finds the new build's table by itself. */
#ifndef TENSOR_BLOB_H
#define TENSOR_BLOB_H

#include <erl_nif.h>
#include <stdint.h>

#include "tensor_blob_dlpack.h"

/* The layout of tensor_blob_bridge_call. Every build of tensor_blob takes
 * the first layout too (without `bridge`), and a build from before the
 * table refuses this one with BAD_VERSION: tensor_blob_to_dlpack then asks
 * it in the first layout, so a consumer built with this header works with
 * older builds, and one built with an older header works with this one. */
#define TENSOR_BLOB_BRIDGE_VERSION 2
#define TENSOR_BLOB_BRIDGE_VERSION_FIRST 1

/* Ask for a read-only export. */
#define TENSOR_BLOB_BRIDGE_READ_ONLY 1u

enum {
    TENSOR_BLOB_BRIDGE_OK = 0,
    TENSOR_BLOB_BRIDGE_NOT_A_TENSOR = 1, /* or tensor_blob is not loaded */
    TENSOR_BLOB_BRIDGE_BAD_VERSION = 2,  /* of tensor_blob_bridge_call */
    TENSOR_BLOB_BRIDGE_NO_MEMORY = 3,
    /* From a table whose build was unloaded (its code purged after an
     * upgrade): look tensor_blob up again. tensor_blob_to_dlpack does. */
    TENSOR_BLOB_BRIDGE_RETIRED = 4,
    /* dltensor_from_term_no_sync of memory that may not be written. */
    TENSOR_BLOB_BRIDGE_READ_ONLY_MEMORY = 5
};

/* A build's functions, found once: valid for the life of the VM (a build
 * is never unmapped). Later versions only add fields after these. */
typedef struct tensor_blob_bridge {
    uint32_t version; /* the TENSOR_BLOB_BRIDGE_VERSION it was built with */
    uint32_t size;    /* of the table, in bytes */
    /* tensor_blob_to_dlpack's work on any tensor term, without a lookup:
     * a TENSOR_BLOB_BRIDGE_ status; *out set when OK. */
    int (*to_dlpack)(ErlNifEnv *env, ERL_NIF_TERM term, uint32_t flags, tb_DLManagedTensorVersioned **out);
    /* From 0.1.0 (size says whether a table has it): DLPack 1.3's exchange
     * API over terms (tensor_blob_exchange_api below). */
    const struct tensor_blob_exchange_api *exchange;
} tensor_blob_bridge;

/* What enif_dynamic_resource_call passes to tensor_blob. */
typedef struct {
    uint32_t version;                    /* in: TENSOR_BLOB_BRIDGE_VERSION */
    uint32_t flags;                      /* in: TENSOR_BLOB_BRIDGE_READ_ONLY or 0 */
    int32_t status;                      /* out: TENSOR_BLOB_BRIDGE_* */
    tb_DLManagedTensorVersioned *tensor; /* out, when status is OK: yours */
    /* Version 2 on: out, the answering build's table (the first layout
     * ends before it). */
    const tensor_blob_bridge *bridge;
} tensor_blob_bridge_call;

/* tensor_blob's tensor resource type is striped over threads (the VM's
 * count of live resources is per type, and one shared count would make
 * busy schedulers take turns): "tensor_blob_tensor", "tensor_blob_tensor_1",
 * ... up to TENSOR_BLOB_TENSOR_TYPES. A tensor is of one of them. */
#define TENSOR_BLOB_TENSOR_TYPES 8

/* Passes call to the tensor resource behind term; 0 when it was one. The
 * lookup by name: tensor_blob_to_dlpack needs it once. */
static inline int tensor_blob_dyncall(ErlNifEnv *env, ERL_NIF_TERM term, tensor_blob_bridge_call *call)
{
    ERL_NIF_TERM module = enif_make_atom(env, "tensor_blob_nif");
    for (int i = 0; i < TENSOR_BLOB_TENSOR_TYPES; i++) {
        char name[32] = "tensor_blob_tensor";
        if (i > 0) {
            name[18] = '_';
            name[19] = (char)('0' + i);
            name[20] = '\0';
        }
        if (enif_dynamic_resource_call(env, module, enif_make_atom(env, name), term, call) == 0)
            return 0;
    }
    return 1;
}

/* The export by name, as the first call makes it: *bridge set to the
 * answering build's table where it has one. */
static inline int tensor_blob_to_dlpack_by_name(ErlNifEnv *env, ERL_NIF_TERM term, uint32_t flags,
                                                tb_DLManagedTensorVersioned **out, const tensor_blob_bridge **bridge)
{
    ERL_NIF_TERM name, ref;
    if (enif_is_map(env, term) && enif_get_map_value(env, term, enif_make_atom(env, "__struct__"), &name) &&
        enif_compare(name, enif_make_atom(env, "Elixir.TensorBlob.BlobView")) == 0 &&
        !enif_get_map_value(env, term, enif_make_atom(env, "tensor"), &term))
        return TENSOR_BLOB_BRIDGE_NOT_A_TENSOR;
    if (enif_is_map(env, term)) {
        if (!enif_get_map_value(env, term, enif_make_atom(env, "__struct__"), &name) ||
            enif_compare(name, enif_make_atom(env, "Elixir.TensorBlob.Tensor")) != 0 ||
            !enif_get_map_value(env, term, enif_make_atom(env, "ref"), &ref))
            return TENSOR_BLOB_BRIDGE_NOT_A_TENSOR;
        term = ref;
    }
    tensor_blob_bridge_call call = {TENSOR_BLOB_BRIDGE_VERSION, flags, TENSOR_BLOB_BRIDGE_NOT_A_TENSOR, NULL, NULL};
    if (tensor_blob_dyncall(env, term, &call) != 0)
        return TENSOR_BLOB_BRIDGE_NOT_A_TENSOR;
    if (call.status == TENSOR_BLOB_BRIDGE_BAD_VERSION) {
        /* A build from before the table: the first layout. */
        call.version = TENSOR_BLOB_BRIDGE_VERSION_FIRST;
        call.status = TENSOR_BLOB_BRIDGE_NOT_A_TENSOR;
        call.bridge = NULL;
        if (tensor_blob_dyncall(env, term, &call) != 0)
            return TENSOR_BLOB_BRIDGE_NOT_A_TENSOR;
    }
    if (call.status == TENSOR_BLOB_BRIDGE_OK)
        *out = call.tensor;
    if (call.version >= 2 && call.bridge && call.bridge->version >= 2 && call.bridge->to_dlpack)
        *bridge = call.bridge;
    return call.status;
}

/* A DLManagedTensorVersioned over the memory of the tensor term (a tensor
 * resource, a %TensorBlob.Tensor{}, or a %TensorBlob.BlobView{}: what the
 * Elixir facade's from_blob returns). Returns TENSOR_BLOB_BRIDGE_OK and
 * sets *out, or another status and leaves *out alone. From any thread
 * that may use env. */
static inline int tensor_blob_to_dlpack(ErlNifEnv *env, ERL_NIF_TERM term, uint32_t flags,
                                        tb_DLManagedTensorVersioned **out)
{
    /* This file's table, once found. Threads racing to find it store the
     * same table, or tables of two live builds: either serves. */
    static const tensor_blob_bridge *found;
    const tensor_blob_bridge *bridge = __atomic_load_n(&found, __ATOMIC_ACQUIRE);
    if (bridge) {
        int status = bridge->to_dlpack(env, term, flags, out);
        /* Not a tensor of that build's: maybe of a build loaded since. */
        if (status != TENSOR_BLOB_BRIDGE_NOT_A_TENSOR && status != TENSOR_BLOB_BRIDGE_RETIRED)
            return status;
    }
    const tensor_blob_bridge *answered = NULL;
    int status = tensor_blob_to_dlpack_by_name(env, term, flags, out, &answered);
    if (answered && answered != bridge)
        __atomic_store_n(&found, answered, __ATOMIC_RELEASE);
    return status;
}

/* ---- DLPack 1.3's exchange API, over terms ----------------------------
 *
 * DLPack 1.3 gives Python's tensor types a table of C functions
 * (DLPackExchangeAPI, found on the type as __dlpack_c_exchange_api__) so
 * that a kernel library takes and makes tensors with no Python-level call.
 * tensor_blob offers the same table with the BEAM's object where Python's
 * is a PyObject *: a term with the ErlNifEnv it lives in. A NIF written
 * against the standard's entry points takes tensor_blob tensors with the
 * same code shape:
 *
 *     const tensor_blob_exchange_api *api = tensor_blob_exchange_api_of(env, argv[0]);
 *     tb_DLManagedTensorVersioned *m;
 *     if (!api || api->managed_tensor_from_term_no_sync(env, argv[0], &m) != 0)
 *         return enif_make_badarg(env);
 *     ... m->dl_tensor; then m->deleter(m), once, from any thread ...
 *
 * Where the BEAM differs from Python:
 * - The table is found from a tensor term (as Python's from a tensor's
 *   type), and stays valid for the life of the VM; after a hot upgrade the
 *   retired build's entries answer TENSOR_BLOB_BRIDGE_RETIRED and
 *   tensor_blob_exchange_api_of finds the new one.
 * - Statuses are TENSOR_BLOB_BRIDGE_* (0 is success, as the standard's 0),
 *   and no exception is left pending: to_term's failure gives the raised
 *   term to return, the allocator's goes through set_error as the
 *   standard's does, its kind a reason of tensor_blob:tables/0.
 * - A term lives while its env does: a DLTensor of
 *   dltensor_from_term_no_sync is valid until the NIF call returns (keep
 *   the managed tensor of managed_tensor_from_term_no_sync past it). It
 *   refuses read-only memory (a view of a binary), which a bare DLTensor
 *   cannot flag: take the managed tensor, whose flags say so.
 * - tensor_blob queues no device work of its own: current_work_stream
 *   answers NULL (the device's default stream; nothing on the host). */

/* This header has the exchange API. */
#define TENSOR_BLOB_EXCHANGE_API 1

typedef struct tensor_blob_exchange_api_header {
    tb_DLPackVersion version; /* 1.3 */
    struct tensor_blob_exchange_api_header *prev_api;
} tensor_blob_exchange_api_header;

typedef struct tensor_blob_exchange_api {
    tensor_blob_exchange_api_header header;
    /* A new tensor of the prototype's dtype, shape and device (zeros),
     * owned by the caller: 0 and *out, or -1 after set_error(error_ctx,
     * reason, message). Needs no env: from any thread. */
    int (*managed_tensor_allocator)(tb_DLTensor *prototype, tb_DLManagedTensorVersioned **out, void *error_ctx,
                                    void (*set_error)(void *error_ctx, const char *kind, const char *message));
    /* tensor_blob_to_dlpack's export of a tensor term: a status, *out
     * when 0. */
    int (*managed_tensor_from_term_no_sync)(ErlNifEnv *env, ERL_NIF_TERM term, tb_DLManagedTensorVersioned **out);
    /* A tensor term over the managed tensor, whose ownership it takes (its
     * deleter runs once, when the last tensor over it is freed; at once on
     * failure): 0 and *out the term, or -1 and *out the raised error, which
     * the NIF returns at once. Inside a NIF call on env. */
    int (*managed_tensor_to_term_no_sync)(ErlNifEnv *env, tb_DLManagedTensorVersioned *tensor, ERL_NIF_TERM *out);
    /* A view that owns nothing, valid while the term is (the NIF call): a
     * status; READ_ONLY_MEMORY for memory that may not be written. */
    int (*dltensor_from_term_no_sync)(ErlNifEnv *env, ERL_NIF_TERM term, tb_DLTensor *out);
    /* 0, *out_current_stream = NULL. */
    int (*current_work_stream)(tb_DLDeviceType device_type, int32_t device_id, void **out_current_stream);
} tensor_blob_exchange_api;

/* The exchange API of the build that made the tensor term, or NULL (not a
 * tensor, or a build without it). Costs an export the first time: cache
 * it, as a Python consumer caches a type's table. */
static inline const tensor_blob_exchange_api *tensor_blob_exchange_api_of(ErlNifEnv *env, ERL_NIF_TERM term)
{
    tb_DLManagedTensorVersioned *m = NULL;
    const tensor_blob_bridge *bridge = NULL;
    if (tensor_blob_to_dlpack_by_name(env, term, TENSOR_BLOB_BRIDGE_READ_ONLY, &m, &bridge) == TENSOR_BLOB_BRIDGE_OK)
        m->deleter(m);
    if (!bridge || bridge->size < sizeof(tensor_blob_bridge))
        return NULL;
    return bridge->exchange;
}

#endif
