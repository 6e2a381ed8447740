/* The benchmarks' baselines, in a NIF library of their own that only
 * bench/ loads (built by `make bench`, never shipped): a NIF call that
 * does nothing, and one that makes a resource of one word and does
 * nothing else. A NIF call costs the same whichever library defines it,
 * so these are the floor of tensor_blob's calls without being in the
 * library every user loads. Its module, :tensor_blob_bench_nif, is
 * bench/nif/tensor_blob_bench_nif.ex. */
#include "exchange_loop.h" /* first: it sets _POSIX_C_SOURCE */

#include <erl_nif.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "tensor_blob.h"

static ErlNifResourceType *bare_resource_type;

static void bare_resource_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    (void)obj;
}

/* (X) -> X: the bare call. */
static ERL_NIF_TERM identity(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    return argv[0];
}

/* () -> a new resource of one word: its allocation, and the collection and
 * destructor the VM runs for it, are the floor of any call that makes a
 * tensor. */
static ERL_NIF_TERM bare_resource(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    void *obj = enif_alloc_resource(bare_resource_type, sizeof(void *));
    if (!obj)
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    ERL_NIF_TERM term = enif_make_resource(env, obj);
    enif_release_resource(obj);
    return term;
}

/* A consumer of priv/include/tensor_blob.h, as another library's NIF
 * would be: take(Tensor) -> Address of a managed tensor from the bridge;
 * release(Address) calls its deleter. Together: the bridge from the BEAM. */
static ERL_NIF_TERM take(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_DLManagedTensorVersioned *m;
    if (tensor_blob_to_dlpack(env, argv[0], 0, &m) != TENSOR_BLOB_BRIDGE_OK)
        return enif_make_badarg(env);
    return enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)m);
}

static ERL_NIF_TERM release(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifUInt64 address;
    if (!enif_get_uint64(env, argv[0], &address) || address == 0)
        return enif_make_badarg(env);
    tb_DLManagedTensorVersioned *m = (tb_DLManagedTensorVersioned *)(uintptr_t)address;
    m->deleter(m);
    return argv[0];
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* bridge_loop(Tensor, N) -> ns: N exports and deleters in a C loop, inside
 * one call: the bridge's own cost, without the VM's calls around it. */
static ERL_NIF_TERM bridge_loop(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned n;
    if (!enif_get_uint(env, argv[1], &n))
        return enif_make_badarg(env);
    int64_t t0 = now_ns();
    for (unsigned i = 0; i < n; i++) {
        tb_DLManagedTensorVersioned *m;
        if (tensor_blob_to_dlpack(env, argv[0], 0, &m) != TENSOR_BLOB_BRIDGE_OK)
            return enif_make_badarg(env);
        m->deleter(m);
    }
    return enif_make_int64(env, now_ns() - t0);
}

/* The parts of an export and its deleter, each alone in a C loop of n:
 * what the VM's API and the machine cost whoever does the work.
 * floors(Tensor, N) -> #{Part => ns per round}, Tensor a %TensorBlob.Tensor{}. */
static ERL_NIF_TERM atom_struct, atom_ref;
static atomic_long word;
static void *volatile kept;

static ERL_NIF_TERM floors(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned n;
    ERL_NIF_TERM name, ref;
    if (!enif_get_uint(env, argv[1], &n) || n == 0 || !enif_get_map_value(env, argv[0], atom_struct, &name))
        return enif_make_badarg(env);
    void *obj = enif_alloc_resource(bare_resource_type, sizeof(void *));
    if (!obj)
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    ERL_NIF_TERM resource = enif_make_resource(env, obj);
    enif_release_resource(obj);
    int64_t ns[5];
    int ok = 1;

    /* The struct's fields: what a %TensorBlob.Tensor{} argument costs
     * before its resource is reached. */
    int64_t t0 = now_ns();
    for (unsigned i = 0; i < n; i++)
        ok &= enif_is_map(env, argv[0]) && enif_get_map_value(env, argv[0], atom_struct, &name) &&
              enif_get_map_value(env, argv[0], atom_ref, &ref);
    ns[0] = now_ns() - t0;

    /* A resource term to its object, of the right type. */
    t0 = now_ns();
    for (unsigned i = 0; i < n; i++) {
        void *got;
        ok &= enif_get_resource(env, resource, bare_resource_type, &got);
        kept = got;
    }
    ns[1] = now_ns() - t0;

    /* The allocation of a managed tensor of 2 dimensions, and its free. */
    t0 = now_ns();
    for (unsigned i = 0; i < n; i++) {
        kept = malloc(240);
        free(kept);
    }
    ns[2] = now_ns() - t0;

    /* A reference taken and dropped (libtorch's count, an atomic add). */
    t0 = now_ns();
    for (unsigned i = 0; i < n; i++) {
        atomic_fetch_add(&word, 1);
        atomic_fetch_sub(&word, 1);
    }
    ns[3] = now_ns() - t0;

    /* An address put in a slot and taken out, by compare-and-swap each. */
    t0 = now_ns();
    for (unsigned i = 0; i < n; i++) {
        long empty = 0, held = (long)i + 1;
        ok &= atomic_compare_exchange_strong(&word, &empty, (long)i + 1);
        ok &= atomic_compare_exchange_strong(&word, &held, 0);
    }
    ns[4] = now_ns() - t0;

    if (!ok)
        return enif_make_badarg(env);
    static const char *const names[] = {"struct_fields", "get_resource", "malloc_free", "atomic_add_pair", "cas_pair"};
    ERL_NIF_TERM map = enif_make_new_map(env);
    for (int i = 0; i < 5; i++)
        enif_make_map_put(env, map, enif_make_atom(env, names[i]), enif_make_double(env, (double)ns[i] / n), &map);
    return map;
}

/* exchange_loop(Tensor, N, Rounds) -> ns: the least ns per export and
 * deleter through tensor_blob's DLPack exchange API table over terms
 * (priv/include/tensor_blob.h), in loops of N, best of Rounds: the loop
 * shape the bench's Python extension runs PyTorch's table in. */
static ERL_NIF_TERM exchange_loop(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned n;
    int rounds;
    const tensor_blob_exchange_api *api = tensor_blob_exchange_api_of(env, argv[0]);
    if (!api || !enif_get_uint(env, argv[1], &n) || n == 0 || !enif_get_int(env, argv[2], &rounds) || rounds <= 0)
        return enif_make_badarg(env);
    double best;
    EXCHANGE_LOOP(best, n, rounds, api->managed_tensor_from_term_no_sync(env, argv[0], &m));
    return best < 0 ? enif_make_badarg(env) : enif_make_double(env, best);
}

static int open_type(ErlNifEnv *env, ErlNifResourceFlags flags)
{
    atom_struct = enif_make_atom(env, "__struct__");
    atom_ref = enif_make_atom(env, "ref");
    bare_resource_type =
        enif_open_resource_type(env, NULL, "tensor_blob_bench_bare_resource", bare_resource_dtor, flags, NULL);
    return bare_resource_type ? 0 : 1;
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)info;
    return open_type(env, ERL_NIF_RT_CREATE);
}

static int upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)old_priv;
    (void)info;
    return open_type(env, ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER);
}

static ErlNifFunc funcs[] = {{"identity", 1, identity, 0},
                             {"bare_resource", 0, bare_resource, 0},
                             {"take", 1, take, 0},
                             {"release", 1, release, 0},
                             {"bridge_loop", 2, bridge_loop, 0},
                             {"floors", 2, floors, 0},
                             {"exchange_loop", 3, exchange_loop, ERL_NIF_DIRTY_JOB_CPU_BOUND}};

ERL_NIF_INIT(tensor_blob_bench_nif, funcs, load, NULL, upgrade, NULL)
