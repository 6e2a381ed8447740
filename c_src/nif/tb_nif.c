/* The top of the NIF: load and upgrade, the function table, and the NIFs
 * about the library itself (stats, dtypes, versions, load failures, the
 * benchmarks' baselines). The layers of c_src, from this unit down, are in
 * c_src/LAYERS (checked by scripts/check_c.sh).
 */
#define _GNU_SOURCE /* dladdr, RTLD_NODELETE */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "tb_binary.h"
#include "tb_blob.h"
#include "tb_bridge.h"
#include "tb_cuda.h"
#include "tb_cuda_runtime.h"
#include "tb_cuda_ipc.h"
#include "tb_dlpack.h"
#include "tb_fault.h"
#include "tb_load.h"
#include "tb_pin.h"
#include "tb_shm.h"
#include "tb_state.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "torch_shim.h"

/* The baseline for benchmarks: a NIF call that does nothing. */
static ERL_NIF_TERM nif_identity(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    return argv[0];
}

/* The second baseline: a NIF that returns a new resource of one word and
 * does nothing else. Its allocation, and the collection and destructor
 * the VM runs for it, are the floor of any call that makes a tensor. */
static ErlNifResourceType *bare_resource_type;

static void bare_resource_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    (void)obj;
}

static ERL_NIF_TERM nif_bare_resource(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    void *obj = enif_alloc_resource(bare_resource_type, sizeof(void *));
    if (!obj)
        return tb_raise_error(env, "out of memory allocating a resource");
    ERL_NIF_TERM term = enif_make_resource(env, obj);
    enif_release_resource(obj);
    return term;
}

static ERL_NIF_TERM nif_stats(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    ERL_NIF_TERM keys[] = {tb_atoms.tensors, tb_atoms.pins, tb_atoms.capsules, tb_atoms.binaries};
    ERL_NIF_TERM values[] = {enif_make_long(env, tb_tensor_live()), enif_make_long(env, tb_pin_live()),
                             enif_make_long(env, tb_dlpack_live()), enif_make_long(env, tb_storage_binary_views())};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, 4, &map);
    return map;
}

static ERL_NIF_TERM nif_torch_version(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    return tb_make_string(env, tb_shim_torch_version());
}

/* Canonical dtypes the linked libtorch can hold. */
static ERL_NIF_TERM nif_dtypes(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (int i = TB_DT_COUNT - 1; i >= 0; i--) {
        if (tb_shim_has_scalar_type(tb_dtypes[i].torch_scalar_type))
            list = enif_make_list_cell(env, tb_atoms.dtypes[i], list);
    }
    return list;
}

/* The Nx type {Kind, Bits} of a dtype, or nil when Nx has none. */
static ERL_NIF_TERM nif_nx_type(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_dtype_id id;
    if (!tb_dtype_of_term(env, argv[0], &id))
        return tb_raise_badarg(env, "dtype: unknown dtype %T", argv[0]);
    if (!tb_dtypes[id].nx_kind)
        return tb_atoms.nil;
    return enif_make_tuple2(env, enif_make_atom(env, tb_dtypes[id].nx_kind),
                            enif_make_uint(env, tb_dtypes[id].nx_bits));
}

/* Why a load can fail: [{Name, Code, Message}], for the load tests. */
static ERL_NIF_TERM nif_load_failures(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    ERL_NIF_TERM list = enif_make_list(env, 0);
#define TB_LOAD_ENTRY(name, code, atom, message)                                                               \
    list = enif_make_list_cell(env, enif_make_tuple3(env, enif_make_atom(env, #atom), enif_make_int(env, code), \
                                                     tb_make_string(env, message)),                             \
                               list);
    TB_LOAD_FAILURES(TB_LOAD_ENTRY)
#undef TB_LOAD_ENTRY
    return list;
}

static ErlNifFunc nif_funcs[] = {
    {"load_failures", 0, nif_load_failures, 0},
    {"nx_type", 1, nif_nx_type, 0},
    {"identity", 1, nif_identity, 0},
    {"bare_resource", 0, nif_bare_resource, 0},
    {"stats", 0, nif_stats, 0},
    {"torch_version", 0, nif_torch_version, 0},
    {"dtypes", 0, nif_dtypes, 0},
    {"zeros", 2, tb_nif_zeros, 0},
    {"from_binary", 3, tb_nif_from_binary, 0},
    {"to_binary", 1, tb_nif_to_binary, 0},
    {"from_binary_view", 4, tb_nif_from_binary_view, 0},
    {"to_binary_view", 3, tb_nif_to_binary_view, 0},
    {"write", 2, tb_nif_write, 0},
    {"to_device", 2, tb_nif_to_device, 0},
    {"narrow", 4, tb_nif_narrow, 0},
    {"transpose", 3, tb_nif_transpose, 0},
    {"shape", 1, tb_nif_shape, 0},
    {"strides", 1, tb_nif_strides, 0},
    {"dtype", 1, tb_nif_dtype, 0},
    {"device", 1, tb_nif_device, 0},
    {"memory", 1, tb_nif_memory, 0},
    {"blob_fields", 1, tb_nif_blob_fields, 0},
    {"from_blob", 3, tb_nif_from_blob, 0},
    {"from_blob_fields", 7, tb_nif_from_blob_fields, 0},
    {"to_dlpack", 4, tb_nif_to_dlpack, 0},
    {"from_dlpack", 4, tb_nif_from_dlpack, 0},
    {"consume_dlpack", 1, tb_nif_consume_dlpack, 0},
    {"dlpack_version", 1, tb_nif_dlpack_version, 0},
    {"cuda_info", 0, tb_nif_cuda_info, 0},
    {"dlpack_info", 1, tb_nif_dlpack_info, 0},
    {"cuda_synchronize", 1, tb_nif_cuda_synchronize, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"ipc_zeros", 2, tb_nif_ipc_zeros, 0},
    {"ipc_name", 1, tb_nif_ipc_name, 0},
    {"ipc_open", 3, tb_nif_ipc_open, 0},
    {"ipc_reclaim", 0, tb_nif_ipc_reclaim, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"torch_shm_zeros", 2, tb_nif_torch_shm_zeros, 0},
    {"torch_shm_open", 3, tb_nif_torch_shm_open, 0},
    {"torch_shm_name", 1, tb_nif_torch_shm_name, 0},
    {"cuda_memory", 1, tb_nif_cuda_memory, 0},
    /* Both wait for the GPU (a stream, the mapping of an allocation). */
    {"cuda_ipc_export", 1, tb_nif_cuda_ipc_export, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"cuda_ipc_open", 4, tb_nif_cuda_ipc_open, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"cuda_torch_open", 10, tb_nif_cuda_torch_open, ERL_NIF_DIRTY_JOB_IO_BOUND},
};

/* libtorch storages made by this build call its functions when they are
 * freed, which may be long after a newer build took over: this build's
 * code must stay mapped for the life of the VM, so it is never unloaded. */
static int keep_mapped(void)
{
    Dl_info info;
    if (!dladdr((void *)tb_storage_release, &info) || !info.dli_fname)
        return 0;
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) != NULL;
}

/* A failed load says why: on stderr, and in its return code. */
static int fail(tb_load_failure why)
{
    switch (why) {
#define TB_LOAD_REPORT(name, code, atom, message)                                                                \
    case name:                                                                                                     \
        enif_fprintf(stderr, "tensor_blob: cannot load the NIF library (%d: %s): %s\r\n", code, #atom, message); \
        break;
        TB_LOAD_FAILURES(TB_LOAD_REPORT)
#undef TB_LOAD_REPORT
    case TB_LOAD_OK:
        break;
    }
    return (int)why;
}

static int load_build(ErlNifEnv *env, void **priv, void *old_priv, ErlNifResourceFlags flags)
{
    tb_term_load(env);
    if (tb_load_fault(TB_LOAD_NOT_MAPPED) || !keep_mapped())
        return fail(TB_LOAD_NOT_MAPPED);
    /* A build reloaded after a purge finds its own state still there. */
    tb_load_failure why = tb_state_load(old_priv ? old_priv : tb_st, tb_storage_release);
    if (why != TB_LOAD_OK)
        return fail(why);
    *priv = tb_st;
    /* The SIGBUS guard of every touch of region memory: copies (here and
     * in the shim), PyTorch headers, the journal. */
    tb_fault_install();
    tb_cuda_load();
    tb_shm_load();
    if (tb_load_fault(TB_LOAD_BARE_TYPE) ||
        !(bare_resource_type =
              enif_open_resource_type(env, NULL, "tensor_blob_bare_resource", bare_resource_dtor, flags, NULL)))
        return fail(TB_LOAD_BARE_TYPE);
    if (tb_load_fault(TB_LOAD_TENSOR_TYPE) || !tb_tensor_open_type(env, flags, tb_bridge_dyncall))
        return fail(TB_LOAD_TENSOR_TYPE);
    if (tb_load_fault(TB_LOAD_CAPSULE_TYPE) || !tb_dlpack_open_type(env, flags))
        return fail(TB_LOAD_CAPSULE_TYPE);
    if (tb_load_fault(TB_LOAD_BINARY_TYPE) || !tb_binary_open_type(env, flags))
        return fail(TB_LOAD_BINARY_TYPE);
    return TB_LOAD_OK;
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)info;
    return load_build(env, priv, NULL, ERL_NIF_RT_CREATE);
}

/* A new build takes the resource types and the state over, so tensors made
 * by the old code stay valid, counted and guarded, and are freed by the new
 * code. */
static int upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info)
{
    (void)info;
    return load_build(env, priv, *old_priv, ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER);
}

ERL_NIF_INIT(tensor_blob_nif, nif_funcs, load, NULL, upgrade, NULL)
