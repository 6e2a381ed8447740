/* A foreign NIF library, as another project would write one: its own
 * allocator and deleters, no libtorch, and tensor_blob reached only through
 * priv/include/tensor_blob.h. The tests use it to check DLPack both ways
 * and the bridge: exact-once deleters, identical bytes, either side
 * dropped first. */
#include <erl_nif.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_blob.h"

static atomic_long produced, freed;

/* One allocation: the managed tensor, its shape, then 64-byte aligned data. */
typedef struct {
    union {
        tb_DLManagedTensorVersioned versioned;
        tb_DLManagedTensor legacy;
    } m;
    int64_t shape[1];
    void *data;
} foreign_tensor;

static void foreign_free(void *ctx)
{
    foreign_tensor *f = ctx;
    free(f->data);
    free(f);
    atomic_fetch_add(&freed, 1);
}

static void delete_versioned(tb_DLManagedTensorVersioned *self)
{
    foreign_free(self->manager_ctx);
}

static void delete_legacy(tb_DLManagedTensor *self)
{
    foreign_free(self->manager_ctx);
}

/* produce(Bytes, versioned | legacy | read_only) -> Address: a 1-D float32
 * tensor holding a copy of Bytes, for tensor_blob to import. */
static ERL_NIF_TERM produce(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifBinary bin;
    char kind[16];
    if (!enif_inspect_binary(env, argv[0], &bin) || bin.size % 4 != 0 ||
        !enif_get_atom(env, argv[1], kind, sizeof kind, ERL_NIF_LATIN1))
        return enif_make_badarg(env);
    foreign_tensor *f = calloc(1, sizeof *f);
    f->data = aligned_alloc(64, bin.size ? (bin.size + 63) / 64 * 64 : 64);
    memcpy(f->data, bin.data, bin.size);
    f->shape[0] = (int64_t)(bin.size / 4);
    tb_DLTensor t = {.data = f->data,
                     .device = {tb_kDLCPU, 0},
                     .ndim = 1,
                     .dtype = {tb_kDLFloat, 32, 1},
                     .shape = f->shape,
                     .strides = NULL,
                     .byte_offset = 0};
    if (strcmp(kind, "legacy") == 0) {
        f->m.legacy.dl_tensor = t;
        f->m.legacy.manager_ctx = f;
        f->m.legacy.deleter = delete_legacy;
    } else {
        f->m.versioned.version.major = 1;
        f->m.versioned.version.minor = 0;
        f->m.versioned.manager_ctx = f;
        f->m.versioned.deleter = delete_versioned;
        f->m.versioned.flags = strcmp(kind, "read_only") == 0 ? TB_DLPACK_FLAG_READ_ONLY : 0;
        f->m.versioned.dl_tensor = t;
    }
    atomic_fetch_add(&produced, 1);
    return enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)&f->m);
}

/* Copies the elements of an n-d strided tensor, row-major, into out. */
static void gather(const tb_DLTensor *t, const char *base, int dim, size_t elem, unsigned char **out)
{
    if (dim == t->ndim) {
        memcpy(*out, base, elem);
        *out += elem;
        return;
    }
    int64_t stride = 1;
    if (t->strides) {
        stride = t->strides[dim];
    } else {
        for (int i = dim + 1; i < t->ndim; i++)
            stride *= t->shape[i];
    }
    for (int64_t i = 0; i < t->shape[dim]; i++)
        gather(t, base + i * stride * (int64_t)elem, dim + 1, elem, out);
}

static tb_DLManagedTensorVersioned *get_managed(ErlNifEnv *env, ERL_NIF_TERM term)
{
    ErlNifUInt64 address;
    if (!enif_get_uint64(env, term, &address) || address == 0)
        return NULL;
    return (tb_DLManagedTensorVersioned *)(uintptr_t)address;
}

/* read(Address) -> {Bytes, Shape, ReadOnly}: a versioned managed tensor's
 * elements, gathered row-major. The tensor stays the caller's. */
static ERL_NIF_TERM read_tensor(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_DLManagedTensorVersioned *m = get_managed(env, argv[0]);
    if (!m || m->version.major != 1 || m->dl_tensor.device.device_type != tb_kDLCPU)
        return enif_make_badarg(env);
    const tb_DLTensor *t = &m->dl_tensor;
    size_t elem = (size_t)t->dtype.bits / 8 * t->dtype.lanes, n = 1;
    ERL_NIF_TERM dims[64];
    for (int i = 0; i < t->ndim && i < 64; i++) {
        n *= (size_t)t->shape[i];
        dims[i] = enif_make_int64(env, t->shape[i]);
    }
    ERL_NIF_TERM bytes;
    unsigned char *out = enif_make_new_binary(env, n * elem, &bytes);
    if (n > 0)
        gather(t, (const char *)t->data + t->byte_offset, 0, elem, &out);
    return enif_make_tuple3(env, bytes, enif_make_list_from_array(env, dims, (unsigned)t->ndim),
                            enif_make_atom(env, m->flags & TB_DLPACK_FLAG_READ_ONLY ? "true" : "false"));
}

/* release(Address): the consumer's one call of the deleter. */
static ERL_NIF_TERM release(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_DLManagedTensorVersioned *m = get_managed(env, argv[0]);
    if (!m)
        return enif_make_badarg(env);
    if (m->deleter)
        m->deleter(m);
    return enif_make_atom(env, "ok");
}

/* take(Tensor, ReadOnly) -> {ok, Address} | {error, Status}, through the bridge. */
static ERL_NIF_TERM take(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    uint32_t flags = enif_is_identical(argv[1], enif_make_atom(env, "true")) ? TENSOR_BLOB_BRIDGE_READ_ONLY : 0;
    tb_DLManagedTensorVersioned *m = NULL;
    int status = tensor_blob_to_dlpack(env, argv[0], flags, &m);
    if (status != TENSOR_BLOB_BRIDGE_OK)
        return enif_make_tuple2(env, enif_make_atom(env, "error"), enif_make_int(env, status));
    return enif_make_tuple2(env, enif_make_atom(env, "ok"), enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)m));
}

/* take_with_version(Tensor, Version) -> Status: a caller built against
 * another layout of the call is refused, and gets nothing to free. */
static ERL_NIF_TERM take_with_version(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned version;
    if (!enif_get_uint(env, argv[1], &version))
        return enif_make_badarg(env);
    tensor_blob_bridge_call call = {version, 0, -1, NULL};
    if (enif_dynamic_resource_call(env, enif_make_atom(env, "tensor_blob_nif"),
                                   enif_make_atom(env, "tensor_blob_tensor"), argv[0], &call) != 0)
        return enif_make_atom(env, "not_a_tensor");
    return enif_make_tuple2(env, enif_make_int(env, call.status), enif_make_atom(env, call.tensor ? "tensor" : "none"));
}

static ERL_NIF_TERM counters(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    return enif_make_tuple2(env, enif_make_long(env, atomic_load(&produced)), enif_make_long(env, atomic_load(&freed)));
}

static ErlNifFunc funcs[] = {
    {"produce", 2, produce, 0},
    {"read", 1, read_tensor, 0},
    {"release", 1, release, 0},
    {"take", 2, take, 0},
    {"take_with_version", 2, take_with_version, 0},
    {"counters", 0, counters, 0},
};

ERL_NIF_INIT(foreign_tensor_nif, funcs, NULL, NULL, NULL, NULL)
