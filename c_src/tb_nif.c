/* Load and upgrade, the function table, atoms and error raising. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tb_binary.h"
#include "tb_blob.h"
#include "tb_cuda.h"
#include "tb_dlpack.h"
#include "tb_ipc.h"
#include "tb_nif.h"
#include "tb_pin.h"
#include "tb_tensor.h"
#include "torch_shim.h"

tb_atom_table tb_atoms;

/* Alias atoms and Nx kinds, resolved to table entries once at load. */
static struct {
    ERL_NIF_TERM atom;
    tb_dtype_id id;
} alias_atoms[32];
static size_t alias_atom_count;

static struct {
    ERL_NIF_TERM kind;
    unsigned bits;
    tb_dtype_id id;
} nx_types[TB_DT_COUNT];
static size_t nx_type_count;

static ERL_NIF_TERM atom(ErlNifEnv *env, const char *name)
{
    return enif_make_atom(env, name);
}

static void make_atoms(ErlNifEnv *env)
{
    tb_atom_table *a = &tb_atoms;
    a->ok = atom(env, "ok");
    a->true_ = atom(env, "true");
    a->false_ = atom(env, "false");
    a->nil = atom(env, "nil");
    a->undefined = atom(env, "undefined");
    a->badarg = atom(env, "badarg");
    a->tensor_blob = atom(env, "tensor_blob");
    a->ptr = atom(env, "ptr");
    a->shape = atom(env, "shape");
    a->strides = atom(env, "strides");
    a->dtype = atom(env, "dtype");
    a->device = atom(env, "device");
    a->element_size = atom(env, "element_size");
    a->byte_size = atom(env, "byte_size");
    a->owner = atom(env, "owner");
    a->struct_ = atom(env, "__struct__");
    a->ref = atom(env, "ref");
    a->cpu = atom(env, "cpu");
    a->cuda = atom(env, "cuda");
    a->owned = atom(env, "owned");
    a->pinned = atom(env, "pinned");
    a->unpinned = atom(env, "unpinned");
    a->tensors = atom(env, "tensors");
    a->pins = atom(env, "pins");
    a->capsules = atom(env, "capsules");
    a->binaries = atom(env, "binaries");
    a->alignment = atom(env, "alignment");
    a->versioned = atom(env, "versioned");
    a->legacy = atom(env, "legacy");
    a->tensor_struct = atom(env, "Elixir.TensorBlob.Tensor");

    for (int i = 0; i < TB_DT_COUNT; i++)
        a->dtypes[i] = atom(env, tb_dtypes[i].name);

    alias_atom_count = 0;
    for (size_t i = 0; i < tb_dtype_alias_count && i < sizeof alias_atoms / sizeof alias_atoms[0]; i++) {
        alias_atoms[alias_atom_count].atom = atom(env, tb_dtype_aliases[i].name);
        alias_atoms[alias_atom_count].id = tb_dtype_aliases[i].id;
        alias_atom_count++;
    }
    nx_type_count = 0;
    for (int i = 0; i < TB_DT_COUNT; i++) {
        if (!tb_dtypes[i].nx_kind)
            continue;
        nx_types[nx_type_count].kind = atom(env, tb_dtypes[i].nx_kind);
        nx_types[nx_type_count].bits = tb_dtypes[i].nx_bits;
        nx_types[nx_type_count].id = (tb_dtype_id)i;
        nx_type_count++;
    }
}

int tb_dtype_of_term(ErlNifEnv *env, ERL_NIF_TERM term, tb_dtype_id *out)
{
    /* Atoms compare as words: no string work on the hot path. */
    for (int i = 0; i < TB_DT_COUNT; i++) {
        if (tb_atoms.dtypes[i] == term) {
            *out = (tb_dtype_id)i;
            return 1;
        }
    }
    for (size_t i = 0; i < alias_atom_count; i++) {
        if (alias_atoms[i].atom == term) {
            *out = alias_atoms[i].id;
            return 1;
        }
    }
    int arity;
    const ERL_NIF_TERM *elems;
    unsigned bits;
    if (enif_get_tuple(env, term, &arity, &elems) && arity == 2 && enif_get_uint(env, elems[1], &bits)) {
        for (size_t i = 0; i < nx_type_count; i++) {
            if (nx_types[i].kind == elems[0] && nx_types[i].bits == bits) {
                *out = nx_types[i].id;
                return 1;
            }
        }
    }
    return 0;
}

static ERL_NIF_TERM raise_v(ErlNifEnv *env, ERL_NIF_TERM kind, const char *fmt, va_list ap)
{
    char buf[1024];
    int n = enif_vsnprintf(buf, sizeof buf, fmt, ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof buf)
        n = sizeof buf - 1;
    ERL_NIF_TERM message;
    unsigned char *bytes = enif_make_new_binary(env, (size_t)n, &message);
    memcpy(bytes, buf, (size_t)n);
    return enif_raise_exception(env, enif_make_tuple2(env, kind, message));
}

ERL_NIF_TERM tb_raise_badarg(ErlNifEnv *env, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ERL_NIF_TERM r = raise_v(env, tb_atoms.badarg, fmt, ap);
    va_end(ap);
    return r;
}

ERL_NIF_TERM tb_raise_error(ErlNifEnv *env, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ERL_NIF_TERM r = raise_v(env, tb_atoms.tensor_blob, fmt, ap);
    va_end(ap);
    return r;
}

/* The baseline for benchmarks: a NIF call that does nothing. */
static ERL_NIF_TERM nif_identity(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    return argv[0];
}

static ERL_NIF_TERM nif_stats(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    ERL_NIF_TERM keys[] = {tb_atoms.tensors, tb_atoms.pins, tb_atoms.capsules, tb_atoms.binaries};
    ERL_NIF_TERM values[] = {enif_make_long(env, tb_tensor_live()), enif_make_long(env, tb_pin_live()),
                             enif_make_long(env, tb_dlpack_live()), enif_make_long(env, tb_binary_live())};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, 4, &map);
    return map;
}

static ERL_NIF_TERM nif_torch_version(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    const char *v = tb_shim_torch_version();
    ERL_NIF_TERM bin;
    unsigned char *bytes = enif_make_new_binary(env, strlen(v), &bin);
    memcpy(bytes, v, strlen(v));
    return bin;
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
    return enif_make_tuple2(env, enif_make_atom(env, tb_dtypes[id].nx_kind), enif_make_uint(env, tb_dtypes[id].nx_bits));
}

static ErlNifFunc nif_funcs[] = {
    {"nx_type", 1, nif_nx_type, 0},
    {"identity", 1, nif_identity, 0},
    {"stats", 0, nif_stats, 0},
    {"torch_version", 0, nif_torch_version, 0},
    {"dtypes", 0, nif_dtypes, 0},
    {"zeros", 2, tb_nif_zeros, 0},
    {"from_binary", 3, tb_nif_from_binary, 0},
    {"to_binary", 1, tb_nif_to_binary, 0},
    {"from_binary_view", 4, tb_nif_from_binary_view, 0},
    {"to_binary_view", 1, tb_nif_to_binary_view, 0},
    {"write", 2, tb_nif_write, 0},
    {"narrow", 4, tb_nif_narrow, 0},
    {"transpose", 3, tb_nif_transpose, 0},
    {"shape", 1, tb_nif_shape, 0},
    {"strides", 1, tb_nif_strides, 0},
    {"dtype", 1, tb_nif_dtype, 0},
    {"device", 1, tb_nif_device, 0},
    {"memory", 1, tb_nif_memory, 0},
    {"to_blob", 3, tb_nif_to_blob, 0},
    {"from_blob", 3, tb_nif_from_blob, 0},
    {"to_dlpack", 3, tb_nif_to_dlpack, 0},
    {"from_dlpack", 3, tb_nif_from_dlpack, 0},
    {"consume_dlpack", 1, tb_nif_consume_dlpack, 0},
    {"dlpack_version", 1, tb_nif_dlpack_version, 0},
    {"cuda_info", 0, tb_nif_cuda_info, 0},
    {"dlpack_info", 1, tb_nif_dlpack_info, 0},
    {"cuda_synchronize", 1, tb_nif_cuda_synchronize, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"ipc_zeros", 2, tb_nif_ipc_zeros, 0},
    {"ipc_name", 1, tb_nif_ipc_name, 0},
    {"ipc_open", 3, tb_nif_ipc_open, 0},
};

static int open_types(ErlNifEnv *env, ErlNifResourceFlags flags, void **priv, void *old_priv)
{
    make_atoms(env);
    return tb_tensor_open_type(env, flags) && tb_dlpack_open_type(env, flags) &&
                   tb_binary_load(env, flags, priv, old_priv)
               ? 0
               : 1;
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)info;
    tb_cuda_load();
    return open_types(env, ERL_NIF_RT_CREATE, priv, NULL);
}

/* A reload takes the resource type over, so tensors made by the old code
 * stay valid and are freed by the new code. */
static int upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info)
{
    (void)info;
    tb_cuda_load();
    return open_types(env, ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER, priv, *old_priv);
}

ERL_NIF_INIT(tensor_blob_nif, nif_funcs, load, NULL, upgrade, NULL)
