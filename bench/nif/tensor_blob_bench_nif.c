/* The benchmarks' baselines, in a NIF library of their own that only
 * bench/ loads (built by `make bench`, never shipped): a NIF call that
 * does nothing, and one that makes a resource of one word and does
 * nothing else. A NIF call costs the same whichever library defines it,
 * so these are the floor of tensor_blob's calls without being in the
 * library every user loads. Its module, :tensor_blob_bench_nif, is
 * bench/nif/tensor_blob_bench_nif.ex. */
#include <erl_nif.h>

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

static int open_type(ErlNifEnv *env, ErlNifResourceFlags flags)
{
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

static ErlNifFunc funcs[] = {{"identity", 1, identity, 0}, {"bare_resource", 0, bare_resource, 0}};

ERL_NIF_INIT(tensor_blob_bench_nif, funcs, load, NULL, upgrade, NULL)
