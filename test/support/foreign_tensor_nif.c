/* A foreign NIF library, as another project would write one: its own
 * allocator and deleters, no libtorch, and tensor_blob reached only through
 * priv/include/tensor_blob.h. The tests use it to check DLPack both ways
 * and the bridge: exact-once deleters, identical bytes, either side
 * dropped first. On a GPU machine it is also a CUDA producer and consumer
 * (device, pinned and managed memory; its own streams), through the CUDA
 * runtime already loaded in the process (libtorch's), reached with dlsym:
 * it builds without CUDA headers, and answers no_cuda without a GPU. */
#define _GNU_SOURCE /* dl_iterate_phdr, RTLD_NOLOAD */
#include <dlfcn.h>
#include <erl_nif.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor_blob.h"

static atomic_long produced, freed;

/* The CUDA runtime calls used, as plain C types (no CUDA header). */
static struct {
    int tried, ok;
    int (*get_device_count)(int *);
    int (*malloc_device)(void **, size_t);
    int (*malloc_host)(void **, size_t);
    int (*malloc_managed)(void **, size_t, unsigned);
    int (*free_device)(void *);
    int (*free_host)(void *);
    int (*memcpy_sync)(void *, const void *, size_t, int);
    int (*memcpy_async)(void *, const void *, size_t, int, void *);
    int (*memset_sync)(void *, int, size_t);
    int (*memset_async)(void *, int, size_t, void *);
    int (*stream_create)(void **, unsigned);
    int (*stream_destroy)(void *);
    int (*stream_synchronize)(void *);
    int (*launch_host_func)(void *, void (*)(void *), void *);
    int (*device_synchronize)(void);
} cu;

enum { CUDA_MEMCPY_DEFAULT = 4, CUDA_STREAM_NON_BLOCKING = 1, CUDA_MEM_ATTACH_GLOBAL = 1 };

static char runtime_name[512];

static int find_runtime(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (base && strncmp(base + 1, "libcudart.so", 12) == 0) {
        snprintf(runtime_name, sizeof runtime_name, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

/* 1 when a runtime and a device answer. Called from NIFs only (the BEAM
 * serialises nothing here; a race only resolves the same symbols twice). */
static int cuda_ready(void)
{
    if (cu.tried)
        return cu.ok;
    void *lib = dl_iterate_phdr(find_runtime, NULL) ? dlopen(runtime_name, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (!lib)
        lib = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
#define SYM(field, name) (*(void **)&cu.field = dlsym(lib, name))
        SYM(get_device_count, "cudaGetDeviceCount");
        SYM(malloc_device, "cudaMalloc");
        SYM(malloc_host, "cudaMallocHost");
        SYM(malloc_managed, "cudaMallocManaged");
        SYM(free_device, "cudaFree");
        SYM(free_host, "cudaFreeHost");
        SYM(memcpy_sync, "cudaMemcpy");
        SYM(memcpy_async, "cudaMemcpyAsync");
        SYM(memset_sync, "cudaMemset");
        SYM(memset_async, "cudaMemsetAsync");
        SYM(stream_create, "cudaStreamCreateWithFlags");
        SYM(stream_destroy, "cudaStreamDestroy");
        SYM(stream_synchronize, "cudaStreamSynchronize");
        SYM(launch_host_func, "cudaLaunchHostFunc");
        SYM(device_synchronize, "cudaDeviceSynchronize");
#undef SYM
    }
    int n = 0;
    cu.ok = lib && cu.get_device_count && cu.malloc_device && cu.malloc_host && cu.malloc_managed && cu.free_device &&
            cu.free_host && cu.memcpy_sync && cu.memcpy_async && cu.memset_sync && cu.memset_async &&
            cu.stream_create && cu.stream_destroy && cu.stream_synchronize && cu.launch_host_func &&
            cu.device_synchronize && cu.get_device_count(&n) == 0 && n > 0;
    cu.tried = 1;
    return cu.ok;
}

typedef enum { MEM_HOST, MEM_CUDA, MEM_CUDA_HOST, MEM_CUDA_MANAGED } mem_kind;

/* One allocation: the managed tensor, its shape, then the data: 64-byte
 * aligned host memory, or CUDA memory of the kind said, and the stream
 * that writes it late (cuda_produce_late), or NULL. */
typedef struct {
    union {
        tb_DLManagedTensorVersioned versioned;
        tb_DLManagedTensor legacy;
    } m;
    int64_t shape[1];
    void *data;
    mem_kind kind;
    void *stream;
} foreign_tensor;

static void foreign_free(void *ctx)
{
    foreign_tensor *f = ctx;
    if (f->stream) {
        cu.stream_synchronize(f->stream);
        cu.stream_destroy(f->stream);
    }
    if (f->kind == MEM_HOST)
        free(f->data);
    else if (f->kind == MEM_CUDA_HOST)
        cu.free_host(f->data);
    else
        cu.free_device(f->data); /* device and managed memory */
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
    tensor_blob_bridge_call call = {.version = version, .status = -1};
    if (tensor_blob_dyncall(env, argv[0], &call) != 0)
        return enif_make_atom(env, "not_a_tensor");
    return enif_make_tuple2(env, enif_make_int(env, call.status), enif_make_atom(env, call.tensor ? "tensor" : "none"));
}

/* release_on_thread(Address): the deleter called from a thread the VM
 * never saw, as a consumer's worker pool would. */
static void *release_there(void *m)
{
    ((tb_DLManagedTensorVersioned *)m)->deleter(m);
    return NULL;
}

static ERL_NIF_TERM release_on_thread(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_DLManagedTensorVersioned *m = get_managed(env, argv[0]);
    ErlNifTid tid;
    if (!m || enif_thread_create("foreign_release", &tid, release_there, m, NULL) != 0)
        return enif_make_badarg(env);
    enif_thread_join(tid, NULL);
    return enif_make_atom(env, "ok");
}

#ifdef TENSOR_BLOB_BRIDGE_VERSION_FIRST /* the table's header */
/* The table a lookup by name answered with, kept by table_find: what
 * tensor_blob_to_dlpack keeps, here to be called as it is. */
static const tensor_blob_bridge *kept_table;

/* table_find(Tensor) -> ok | Status: looks tensor_blob up by name. */
static ERL_NIF_TERM table_find(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_DLManagedTensorVersioned *m = NULL;
    const tensor_blob_bridge *b = NULL;
    int status = tensor_blob_to_dlpack_by_name(env, argv[0], 0, &m, &b);
    if (status != TENSOR_BLOB_BRIDGE_OK)
        return enif_make_int(env, status);
    m->deleter(m);
    if (!b)
        return enif_make_atom(env, "no_table");
    kept_table = b;
    return enif_make_atom(env, "ok");
}

/* table_take(Tensor) -> {ok, Address} | {error, Status}: through the kept
 * table alone, never by name. */
static ERL_NIF_TERM table_take(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_DLManagedTensorVersioned *m = NULL;
    if (!kept_table)
        return enif_make_badarg(env);
    int status = kept_table->to_dlpack(env, argv[0], 0, &m);
    if (status != TENSOR_BLOB_BRIDGE_OK)
        return enif_make_tuple2(env, enif_make_atom(env, "error"), enif_make_int(env, status));
    return enif_make_tuple2(env, enif_make_atom(env, "ok"), enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)m));
}
#endif

#ifdef TENSOR_BLOB_EXCHANGE_API
/* DLPack 1.3's exchange API over terms, called as a NIF written against
 * the standard's entry points would call it. */
static ERL_NIF_TERM status_error(ErlNifEnv *env, int status)
{
    return enif_make_tuple2(env, enif_make_atom(env, "error"), enif_make_int(env, status));
}

/* exchange_api(Tensor) -> {Major, Minor, PrevIsNull} | none */
static ERL_NIF_TERM exchange_api(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    const tensor_blob_exchange_api *api = tensor_blob_exchange_api_of(env, argv[0]);
    if (!api)
        return enif_make_atom(env, "none");
    return enif_make_tuple3(env, enif_make_uint(env, api->header.version.major),
                            enif_make_uint(env, api->header.version.minor),
                            enif_make_atom(env, api->header.prev_api ? "false" : "true"));
}

/* exchange_round(Tensor) -> {ok, Tensor2} | {error, Status}: from the term
 * to a managed tensor, and back to a term. */
static ERL_NIF_TERM exchange_round(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    const tensor_blob_exchange_api *api = tensor_blob_exchange_api_of(env, argv[0]);
    tb_DLManagedTensorVersioned *m;
    ERL_NIF_TERM out;
    if (!api)
        return enif_make_badarg(env);
    int status = api->managed_tensor_from_term_no_sync(env, argv[0], &m);
    if (status != 0)
        return status_error(env, status);
    if (api->managed_tensor_to_term_no_sync(env, m, &out) != 0)
        return out; /* the raised error */
    return enif_make_tuple2(env, enif_make_atom(env, "ok"), out);
}

/* exchange_view(Tensor) -> {Address, Shape, Strides, {Code, Bits, Lanes},
 * {DeviceType, DeviceId}} | {error, Status} */
static ERL_NIF_TERM exchange_view(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    const tensor_blob_exchange_api *api = tensor_blob_exchange_api_of(env, argv[0]);
    tb_DLTensor t;
    if (!api)
        return enif_make_badarg(env);
    int status = api->dltensor_from_term_no_sync(env, argv[0], &t);
    if (status != 0)
        return status_error(env, status);
    ERL_NIF_TERM shape[64], strides[64];
    for (int i = 0; i < t.ndim && i < 64; i++) {
        shape[i] = enif_make_int64(env, t.shape[i]);
        strides[i] = enif_make_int64(env, t.strides[i]);
    }
    ERL_NIF_TERM dtype = enif_make_tuple3(env, enif_make_uint(env, t.dtype.code), enif_make_uint(env, t.dtype.bits),
                                          enif_make_uint(env, t.dtype.lanes));
    ERL_NIF_TERM device =
        enif_make_tuple2(env, enif_make_int(env, t.device.device_type), enif_make_int(env, t.device.device_id));
    ERL_NIF_TERM items[5] = {enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)t.data),
                             enif_make_list_from_array(env, shape, (unsigned)t.ndim),
                             enif_make_list_from_array(env, strides, (unsigned)t.ndim), dtype, device};
    return enif_make_tuple_from_array(env, items, 5);
}

typedef struct {
    char kind[64], message[256];
} alloc_error;

static void set_alloc_error(void *ctx, const char *kind, const char *message)
{
    alloc_error *e = ctx;
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    snprintf(e->message, sizeof e->message, "%s", message);
}

/* exchange_alloc(Tensor, Shape, {Code, Bits, Lanes}, DeviceType) ->
 * {ok, NewTensor} | {error, Kind, Message}: the allocator of the table
 * Tensor's build answers with. */
static ERL_NIF_TERM exchange_alloc(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    const tensor_blob_exchange_api *api = tensor_blob_exchange_api_of(env, argv[0]);
    int64_t shape[64];
    unsigned ndim = 0, code, bits, lanes;
    int arity, device_type;
    const ERL_NIF_TERM *dt;
    ERL_NIF_TERM list = argv[1], head, out;
    while (ndim < 64 && enif_get_list_cell(env, list, &head, &list) && enif_get_int64(env, head, &shape[ndim]))
        ndim++;
    if (!api || !enif_is_empty_list(env, list) || !enif_get_tuple(env, argv[2], &arity, &dt) || arity != 3 ||
        !enif_get_uint(env, dt[0], &code) || !enif_get_uint(env, dt[1], &bits) || !enif_get_uint(env, dt[2], &lanes) ||
        !enif_get_int(env, argv[3], &device_type))
        return enif_make_badarg(env);
    tb_DLTensor prototype = {.device = {.device_type = device_type, .device_id = 0},
                             .ndim = (int32_t)ndim,
                             .dtype = {.code = (uint8_t)code, .bits = (uint8_t)bits, .lanes = (uint16_t)lanes},
                             .shape = shape};
    tb_DLManagedTensorVersioned *m = NULL;
    alloc_error e = {"", ""};
    if (api->managed_tensor_allocator(&prototype, &m, &e, set_alloc_error) != 0)
        return enif_make_tuple3(env, enif_make_atom(env, "error"), enif_make_atom(env, e.kind),
                                enif_make_string(env, e.message, ERL_NIF_LATIN1));
    if (api->managed_tensor_to_term_no_sync(env, m, &out) != 0)
        return out;
    return enif_make_tuple2(env, enif_make_atom(env, "ok"), out);
}

/* exchange_stream(Tensor, DeviceType) -> {Status, null | Address} */
static ERL_NIF_TERM exchange_stream(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    const tensor_blob_exchange_api *api = tensor_blob_exchange_api_of(env, argv[0]);
    int device_type;
    void *stream = (void *)1;
    if (!api || !enif_get_int(env, argv[1], &device_type))
        return enif_make_badarg(env);
    int status = api->current_work_stream((tb_DLDeviceType)device_type, 0, &stream);
    return enif_make_tuple2(env, enif_make_int(env, status),
                            stream ? enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)stream)
                                   : enif_make_atom(env, "null"));
}
#endif

static ERL_NIF_TERM counters(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    return enif_make_tuple2(env, enif_make_long(env, atomic_load(&produced)), enif_make_long(env, atomic_load(&freed)));
}

static ERL_NIF_TERM no_cuda(ErlNifEnv *env)
{
    return enif_make_atom(env, "no_cuda");
}

/* A versioned 1-D managed tensor over data (CUDA memory of `kind`). */
static foreign_tensor *cuda_tensor(void *data, mem_kind kind, int32_t device_type, uint8_t code, uint8_t bits,
                                   int64_t length)
{
    foreign_tensor *f = calloc(1, sizeof *f);
    f->data = data;
    f->kind = kind;
    f->shape[0] = length;
    f->m.versioned.version.major = 1;
    f->m.versioned.version.minor = 0;
    f->m.versioned.manager_ctx = f;
    f->m.versioned.deleter = delete_versioned;
    f->m.versioned.dl_tensor = (tb_DLTensor){.data = data,
                                             .device = {device_type, 0},
                                             .ndim = 1,
                                             .dtype = {code, bits, 1},
                                             .shape = f->shape,
                                             .strides = NULL,
                                             .byte_offset = 0};
    atomic_fetch_add(&produced, 1);
    return f;
}

/* cuda_produce(Bytes, cuda | cuda_host | cuda_managed) -> Address | no_cuda:
 * a versioned 1-D float32 tensor holding a copy of Bytes in device, pinned
 * host or managed memory (kDLCUDA, kDLCUDAHost, kDLCUDAManaged), the copy
 * finished before it returns. */
static ERL_NIF_TERM cuda_produce(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifBinary bin;
    char kind[16];
    if (!enif_inspect_binary(env, argv[0], &bin) || bin.size % 4 != 0 || bin.size == 0 ||
        !enif_get_atom(env, argv[1], kind, sizeof kind, ERL_NIF_LATIN1))
        return enif_make_badarg(env);
    if (!cuda_ready())
        return no_cuda(env);
    void *p = NULL;
    mem_kind k;
    int32_t type;
    int e;
    if (strcmp(kind, "cuda_host") == 0) {
        k = MEM_CUDA_HOST, type = tb_kDLCUDAHost;
        e = cu.malloc_host(&p, bin.size);
    } else if (strcmp(kind, "cuda_managed") == 0) {
        k = MEM_CUDA_MANAGED, type = tb_kDLCUDAManaged;
        e = cu.malloc_managed(&p, bin.size, CUDA_MEM_ATTACH_GLOBAL);
    } else {
        k = MEM_CUDA, type = tb_kDLCUDA;
        e = cu.malloc_device(&p, bin.size);
    }
    if (e != 0)
        return enif_make_tuple2(env, enif_make_atom(env, "error"), enif_make_int(env, e));
    cu.memcpy_sync(p, bin.data, bin.size, CUDA_MEMCPY_DEFAULT);
    cu.device_synchronize();
    foreign_tensor *f = cuda_tensor(p, k, type, tb_kDLFloat, 32, (int64_t)(bin.size / 4));
    return enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)&f->m);
}

static void sleep_a_while(void *ms)
{
    struct timespec t = {(long)(uintptr_t)ms / 1000, ((long)(uintptr_t)ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* cuda_produce_late(Size, Byte, Ms) -> {Address, Stream} | no_cuda: a
 * versioned 1-D uint8 kDLCUDA tensor of Size zero bytes, which a stream of
 * its own (non-blocking: the legacy default stream does not wait for it)
 * fills with Byte after Ms milliseconds. A consumer that does not wait for
 * that stream reads zeros. */
static ERL_NIF_TERM cuda_produce_late(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned size, byte, ms;
    if (!enif_get_uint(env, argv[0], &size) || size == 0 || !enif_get_uint(env, argv[1], &byte) || byte > 255 ||
        !enif_get_uint(env, argv[2], &ms))
        return enif_make_badarg(env);
    if (!cuda_ready())
        return no_cuda(env);
    void *p = NULL, *stream = NULL;
    if (cu.malloc_device(&p, size) != 0 || cu.memset_sync(p, 0, size) != 0 ||
        cu.stream_create(&stream, CUDA_STREAM_NON_BLOCKING) != 0)
        return enif_make_atom(env, "error");
    cu.launch_host_func(stream, sleep_a_while, (void *)(uintptr_t)ms);
    cu.memset_async(p, (int)byte, size, stream);
    foreign_tensor *f = cuda_tensor(p, MEM_CUDA, tb_kDLCUDA, tb_kDLUInt, 8, size);
    f->stream = stream;
    return enif_make_tuple2(env, enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)&f->m),
                            enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)stream));
}

/* cuda_stream() -> Stream | no_cuda: a new non-blocking stream. */
static ERL_NIF_TERM cuda_stream(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    void *stream = NULL;
    if (!cuda_ready())
        return no_cuda(env);
    if (cu.stream_create(&stream, CUDA_STREAM_NON_BLOCKING) != 0)
        return enif_make_atom(env, "error");
    return enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)stream);
}

static ERL_NIF_TERM cuda_stream_destroy(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifUInt64 stream;
    if (!enif_get_uint64(env, argv[0], &stream) || !cuda_ready())
        return enif_make_badarg(env);
    cu.stream_synchronize((void *)(uintptr_t)stream);
    cu.stream_destroy((void *)(uintptr_t)stream);
    return enif_make_atom(env, "ok");
}

/* cuda_read(Address, Stream) -> Bytes: a consumer's read of a contiguous
 * versioned kDLCUDA tensor, queued on its own Stream (as a consumer that
 * passed Stream to the producer does), then waited for. The tensor stays
 * the caller's. */
static ERL_NIF_TERM cuda_read(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_DLManagedTensorVersioned *m = get_managed(env, argv[0]);
    ErlNifUInt64 stream;
    if (!m || m->version.major != 1 || m->dl_tensor.device.device_type != tb_kDLCUDA ||
        !enif_get_uint64(env, argv[1], &stream) || !cuda_ready())
        return enif_make_badarg(env);
    const tb_DLTensor *t = &m->dl_tensor;
    size_t n = (size_t)t->dtype.bits / 8;
    for (int i = 0; i < t->ndim; i++)
        n *= (size_t)t->shape[i];
    ERL_NIF_TERM bytes;
    unsigned char *out = enif_make_new_binary(env, n, &bytes);
    void *staging = NULL;
    if (n > 0) {
        /* Pinned staging, so the copy is truly queued on the stream. */
        if (cu.malloc_host(&staging, n) != 0)
            return enif_make_atom(env, "error");
        cu.memcpy_async(staging, (const char *)t->data + t->byte_offset, n, CUDA_MEMCPY_DEFAULT,
                        (void *)(uintptr_t)stream);
        cu.stream_synchronize((void *)(uintptr_t)stream);
        memcpy(out, staging, n);
        cu.free_host(staging);
    }
    return bytes;
}

static ErlNifFunc funcs[] = {
    {"cuda_produce", 2, cuda_produce, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"cuda_produce_late", 3, cuda_produce_late, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"cuda_stream", 0, cuda_stream, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"cuda_stream_destroy", 1, cuda_stream_destroy, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"cuda_read", 2, cuda_read, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"produce", 2, produce, 0},
    {"read", 1, read_tensor, 0},
    {"release", 1, release, 0},
    {"take", 2, take, 0},
    {"take_with_version", 2, take_with_version, 0},
    {"counters", 0, counters, 0},
    {"release_on_thread", 1, release_on_thread, 0},
#ifdef TENSOR_BLOB_BRIDGE_VERSION_FIRST /* the table's header */
    {"table_find", 1, table_find, 0},
    {"table_take", 1, table_take, 0},
#endif
#ifdef TENSOR_BLOB_EXCHANGE_API
    {"exchange_api", 1, exchange_api, 0},
    {"exchange_round", 1, exchange_round, 0},
    {"exchange_view", 1, exchange_view, 0},
    {"exchange_alloc", 4, exchange_alloc, 0},
    {"exchange_stream", 2, exchange_stream, 0},
#endif
};

/* The module: another one for the build against the bridge's first header
 * (test/support/bridge_v1), so that both load at once. */
#ifndef FOREIGN_TENSOR_NIF_MODULE
#define FOREIGN_TENSOR_NIF_MODULE foreign_tensor_nif
#endif
#define FOREIGN_INIT(name) ERL_NIF_INIT(name, funcs, NULL, NULL, NULL, NULL)
FOREIGN_INIT(FOREIGN_TENSOR_NIF_MODULE)
