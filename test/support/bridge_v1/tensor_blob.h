/* The bridge header as it first shipped (TENSOR_BLOB_BRIDGE_VERSION 1),
 * kept unchanged: the tests build a consumer against it
 * (foreign_tensor_nif_v1) and check that it works with today's library. */
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
 * Needs OTP 24 or later (enif_dynamic_resource_call). */
#ifndef TENSOR_BLOB_H
#define TENSOR_BLOB_H

#include <erl_nif.h>
#include <stdint.h>

#include "tensor_blob_dlpack.h"

/* The layout of tensor_blob_bridge_call; tensor_blob refuses other versions. */
#define TENSOR_BLOB_BRIDGE_VERSION 1

/* Ask for a read-only export. */
#define TENSOR_BLOB_BRIDGE_READ_ONLY 1u

enum {
    TENSOR_BLOB_BRIDGE_OK = 0,
    TENSOR_BLOB_BRIDGE_NOT_A_TENSOR = 1, /* or tensor_blob is not loaded */
    TENSOR_BLOB_BRIDGE_BAD_VERSION = 2,  /* of tensor_blob_bridge_call */
    TENSOR_BLOB_BRIDGE_NO_MEMORY = 3
};

/* What enif_dynamic_resource_call passes to tensor_blob. */
typedef struct {
    uint32_t version;                    /* in: TENSOR_BLOB_BRIDGE_VERSION */
    uint32_t flags;                      /* in: TENSOR_BLOB_BRIDGE_READ_ONLY or 0 */
    int32_t status;                      /* out: TENSOR_BLOB_BRIDGE_* */
    tb_DLManagedTensorVersioned *tensor; /* out, when status is OK: yours */
} tensor_blob_bridge_call;

/* tensor_blob's tensor resource type is striped over threads (the VM's
 * count of live resources is per type, and one shared count would make
 * busy schedulers take turns): "tensor_blob_tensor", "tensor_blob_tensor_1",
 * ... up to TENSOR_BLOB_TENSOR_TYPES. A tensor is of one of them. */
#define TENSOR_BLOB_TENSOR_TYPES 8

/* Passes call to the tensor resource behind term; 0 when it was one. */
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

/* A DLManagedTensorVersioned over the memory of the tensor term (a tensor
 * resource, a %TensorBlob.Tensor{}, or a %TensorBlob.BlobView{}: what the
 * Elixir facade's from_blob returns). Returns TENSOR_BLOB_BRIDGE_OK and
 * sets *out, or another status and leaves *out alone. */
static inline int tensor_blob_to_dlpack(ErlNifEnv *env, ERL_NIF_TERM term, uint32_t flags,
                                        tb_DLManagedTensorVersioned **out)
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
    tensor_blob_bridge_call call = {TENSOR_BLOB_BRIDGE_VERSION, flags, TENSOR_BLOB_BRIDGE_NOT_A_TENSOR, NULL};
    if (tensor_blob_dyncall(env, term, &call) != 0)
        return TENSOR_BLOB_BRIDGE_NOT_A_TENSOR;
    if (call.status == TENSOR_BLOB_BRIDGE_OK)
        *out = call.tensor;
    return call.status;
}

#endif
