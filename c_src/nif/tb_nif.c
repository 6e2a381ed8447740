/* The top of the NIF: load and upgrade, the function table, and the NIFs
 * about the library itself (stats, dtypes, versions, load failures). The
 * benchmarks' baselines are a library of their own (bench/nif). The
 * layers of c_src, from this unit down, are in c_src/LAYERS (checked by
 * scripts/check_c.sh).
 */
#define _GNU_SOURCE /* dladdr, RTLD_NODELETE */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "tb_binary.h"
#include "tb_bridge.h"
#include "tb_dlpack_exchange.h"
#include "tb_dlpack_export.h"
#include "tb_fault.h"
#include "tb_load.h"
#include "tb_nifs.h"
#include "tb_pin.h"
#include "tb_python.h"
#include "tb_runtime.h"
#include "tb_shm.h"
#include "tb_state.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "torch_shim.h"

ERL_NIF_TERM tb_nif_stats(TB_NIF_PARAMS)
{
    ERL_NIF_TERM keys[] = {tb_atoms.tensors, tb_atoms.pins, tb_atoms.capsules, tb_atoms.binaries, tb_atoms.deferred};
    ERL_NIF_TERM values[] = {enif_make_long(env, tb_tensor_live()), enif_make_long(env, tb_pin_live()),
                             enif_make_long(env, tb_dlpack_live()), enif_make_long(env, tb_storage_binary_views()),
                             enif_make_long(env, tb_dlpack_deferred())};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, 5, &map);
    return map;
}

ERL_NIF_TERM tb_nif_torch_version(TB_NIF_PARAMS)
{
    return tb_make_string(env, tb_shim_torch_version());
}

/* Canonical dtypes the linked libtorch can hold. */
ERL_NIF_TERM tb_nif_dtypes(TB_NIF_PARAMS)
{
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (int i = TB_DT_COUNT - 1; i >= 0; i--) {
        if (tb_shim_has_scalar_type(tb_dtypes[i].torch_scalar_type))
            list = enif_make_list_cell(env, tb_atoms.dtypes[i], list);
    }
    return list;
}

/* A map of keys and values made here (keys as atoms). */
static ERL_NIF_TERM make_map(ErlNifEnv *env, const char *const *keys, const ERL_NIF_TERM *values, unsigned n)
{
    ERL_NIF_TERM map = enif_make_new_map(env);
    for (unsigned i = 0; i < n; i++)
        enif_make_map_put(env, map, enif_make_atom(env, keys[i]), values[i], &map);
    return map;
}

static ERL_NIF_TERM make_dtype(ErlNifEnv *env, tb_dtype_id id)
{
    const tb_dtype *d = &tb_dtypes[id];
    ERL_NIF_TERM aliases = enif_make_list(env, 0);
    for (int a = TB_DT_ALIAS_COUNT - 1; a >= 0; a--)
        if (tb_dtype_aliases[a].id == id)
            aliases = enif_make_list_cell(env, enif_make_atom(env, tb_dtype_aliases[a].name), aliases);
    static const char *const keys[] = {"name", "element_size", "dlpack", "kind",      "bits",
                                       "nx",   "aliases",      "since",  "available", "safetensors"};
    ERL_NIF_TERM values[] = {
        tb_atoms.dtypes[id],
        enif_make_uint(env, d->element_size),
        enif_make_tuple3(env, enif_make_uint(env, d->dl_code), enif_make_uint(env, d->dl_bits),
                         enif_make_uint(env, d->dl_lanes)),
        enif_make_atom(env, tb_dtype_kind(id)),
        enif_make_uint(env, d->dl_bits),
        d->nx_kind ? enif_make_tuple2(env, enif_make_atom(env, d->nx_kind), enif_make_uint(env, d->nx_bits))
                   : tb_atoms.nil,
        aliases,
        tb_make_string(env, tb_dtype_since[id]),
        tb_shim_has_scalar_type(d->torch_scalar_type) ? tb_atoms.true_ : tb_atoms.false_,
        tb_dtype_safetensors_name(id) ? tb_make_string(env, tb_dtype_safetensors_name(id)) : tb_atoms.nil,
    };
    return make_map(env, keys, values, sizeof values / sizeof values[0]);
}

/* The dtype, device, storage kind and error-reason tables (tb_dtype.h,
 * tb_device.h, tb_storage.h, tb_raise.h) as the facades and the tests read
 * them: #{dtypes => [Dtype], devices => [Device], storage => [Kind],
 * reasons => [atom()], safetensors => [FormatDtype]}, in table order. Called once; the Erlang facade
 * keeps the answer. */
ERL_NIF_TERM tb_nif_tables(TB_NIF_PARAMS)
{
    ERL_NIF_TERM dtypes = enif_make_list(env, 0);
    for (int i = TB_DT_COUNT - 1; i >= 0; i--)
        dtypes = enif_make_list_cell(env, make_dtype(env, (tb_dtype_id)i), dtypes);
    ERL_NIF_TERM devices = enif_make_list(env, 0);
    static const char *const device_keys[] = {"name", "dlpack", "indexed"};
    for (int t = TB_DEVICE_COUNT - 1; t >= 0; t--) {
        /* An indexed device type's devices are numbered: {cuda, 0}. */
        ERL_NIF_TERM values[] = {tb_atoms.devices[t], enif_make_int(env, tb_devices[t].dlpack_type),
                                 tb_devices[t].indexed ? tb_atoms.true_ : tb_atoms.false_};
        devices = enif_make_list_cell(env, make_map(env, device_keys, values, 3), devices);
    }
    ERL_NIF_TERM storage = enif_make_list(env, 0);
    static const char *const storage_keys[] = {"name", "memory", "keeps_owner", "region"};
    for (int k = TB_MEMORY_COUNT - 1; k >= 0; k--) {
        const tb_storage_kind_info *i = &tb_storage_kinds[k];
        ERL_NIF_TERM values[] = {enif_make_atom(env, i->name), tb_storage_atoms[k],
                                 i->keeps_owner ? tb_atoms.true_ : tb_atoms.false_,
                                 i->region ? tb_atoms.true_ : tb_atoms.false_};
        storage = enif_make_list_cell(env, make_map(env, storage_keys, values, 4), storage);
    }
    ERL_NIF_TERM formats = enif_make_list(env, 0);
    static const char *const format_keys[] = {"name", "bits", "dtype"};
    for (int f = TB_ST_DTYPE_COUNT - 1; f >= 0; f--) {
        /* The safetensors format's dtypes: each one's bits a value, and the
         * dtype of the table that holds its values (nil: none). */
        const tb_st_dtype *d = &tb_st_dtypes[f];
        ERL_NIF_TERM values[] = {tb_make_string(env, d->name), enif_make_uint(env, d->bits),
                                 d->id == TB_DT_NONE ? tb_atoms.nil : tb_atoms.dtypes[d->id]};
        formats = enif_make_list_cell(env, make_map(env, format_keys, values, 3), formats);
    }
    static const char *const keys[] = {"dtypes", "devices", "storage", "reasons", "safetensors"};
    ERL_NIF_TERM values[] = {dtypes, devices, storage, tb_raise_reasons(env), formats};
    return make_map(env, keys, values, sizeof values / sizeof values[0]);
}

/* The Nx type {Kind, Bits} of a dtype, or nil when Nx has none. */
ERL_NIF_TERM tb_nif_nx_type(TB_NIF_PARAMS)
{
    tb_dtype_id id;
    if (!tb_dtype_of_term(env, argv[0], &id))
        return tb_raise_badarg(env, TB_WHY_BAD_DTYPE, "dtype", "dtype: unknown dtype %T", argv[0]);
    if (!tb_dtypes[id].nx_kind)
        return tb_atoms.nil;
    return enif_make_tuple2(env, enif_make_atom(env, tb_dtypes[id].nx_kind),
                            enif_make_uint(env, tb_dtypes[id].nx_bits));
}

/* Why a load can fail: [{Name, Code, Message}], for the load tests. */
ERL_NIF_TERM tb_nif_load_failures(TB_NIF_PARAMS)
{
    ERL_NIF_TERM list = enif_make_list(env, 0);
#define TB_LOAD_ENTRY(name, code, atom, message)                                                                   \
    list = enif_make_list_cell(                                                                                    \
        env,                                                                                                       \
        enif_make_tuple3(env, enif_make_atom(env, #atom), enif_make_int(env, code), tb_make_string(env, message)), \
        list);
    TB_LOAD_FAILURES(TB_LOAD_ENTRY)
#undef TB_LOAD_ENTRY
    return list;
}

#define TB_NIF_ENTRY(name, arity, fun, schedule) {#name, arity, fun, TB_ERTS_FLAGS(schedule)},
static ErlNifFunc nif_funcs[] = {TB_NIFS(TB_NIF_ENTRY)};
#undef TB_NIF_ENTRY

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
    case name:                                                                                                   \
        enif_fprintf(stderr, "tensor_blob: cannot load the NIF library (%d: %s): %s\r\n", code, #atom, message); \
        break;
        TB_LOAD_FAILURES(TB_LOAD_REPORT)
#undef TB_LOAD_REPORT
    case TB_LOAD_OK: break;
    }
    return (int)why;
}

static int load_build(ErlNifEnv *env, void **priv, void *old_priv, ErlNifResourceFlags flags)
{
    tb_term_load(env);
    tb_storage_load(env);
    if (tb_load_fault(TB_LOAD_NOT_MAPPED) || !keep_mapped())
        return fail(TB_LOAD_NOT_MAPPED);
    /* A build reloaded after a purge finds its own state still there. */
    tb_load_failure why = tb_state_load(old_priv ? old_priv : tb_library_state, tb_storage_release);
    if (why != TB_LOAD_OK)
        return fail(why);
    *priv = tb_library_state;
    /* The SIGBUS guard of every touch of region memory: copies (here and
     * in the shim), PyTorch headers, the journal. */
    tb_fault_install();
    tb_runtime_load();
    tb_shm_load();
    if (tb_load_fault(TB_LOAD_TENSOR_TYPE) || !tb_tensor_open_type(env, flags, tb_bridge_dyncall))
        return fail(TB_LOAD_TENSOR_TYPE);
    if (tb_load_fault(TB_LOAD_CAPSULE_TYPE) || !tb_dlpack_open_type(env, flags))
        return fail(TB_LOAD_CAPSULE_TYPE);
    if (tb_load_fault(TB_LOAD_BINARY_TYPE) || !tb_binary_open_type(env, flags))
        return fail(TB_LOAD_BINARY_TYPE);
    if (tb_load_fault(TB_LOAD_PYTHON_SLOT_TYPE) || !tb_python_open_type(env, flags))
        return fail(TB_LOAD_PYTHON_SLOT_TYPE);
    tb_bridge_load();
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

/* This build's code is purged (after an upgrade, or with its module): the
 * library stays mapped, but the bridge table it handed out retires. */
static void unload(ErlNifEnv *env, void *priv)
{
    (void)env;
    (void)priv;
    tb_bridge_unload();
}

ERL_NIF_INIT(tensor_blob_nif, nif_funcs, load, NULL, upgrade, unload)
