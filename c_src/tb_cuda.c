#define _GNU_SOURCE /* dl_iterate_phdr, dladdr */
#include "tb_cuda.h"

#include <stdatomic.h>
#include <stdio.h>

#include "tb_dlpack_check.h"
#include "tb_stream.h"
#include "tb_term.h"
#include "tensor_blob_dlpack.h"
#include "torch_shim.h"

static tb_cuda_ops ops;
static atomic_long mappings;

const tb_cuda_ops *tb_cuda_ops_get(void)
{
    return &ops;
}

void tb_cuda_mappings_add(long delta)
{
    atomic_fetch_add(&mappings, delta);
}

/* ---- libtorch's stream calls (the shim), in the table's form ---------- */

static _Thread_local tb_shim_error shim_error;

static const char *torch_record_event(int device, void **event)
{
    return tb_shim_cuda_record_event(device, event, &shim_error) ? NULL : shim_error.message;
}

static const char *torch_wait_event(int device, void *event)
{
    return tb_shim_cuda_wait_event(device, event, &shim_error) ? NULL : shim_error.message;
}

static void fill_torch_ops(void)
{
    ops.torch_stream_is_default = tb_shim_cuda_stream_is_default;
    ops.torch_record_event = torch_record_event;
    ops.torch_wait_event = torch_wait_event;
    ops.torch_destroy_event = tb_shim_cuda_destroy_event;
}

#if TB_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <string.h>

_Static_assert(sizeof(cudaIpcMemHandle_t) == TB_CUDA_IPC_HANDLE_SIZE, "cudaIpcMemHandle_t is 64 bytes");
_Static_assert((uintptr_t)cudaStreamLegacy == TB_STREAM_LEGACY, "cudaStreamLegacy is the array API's 1");
_Static_assert((uintptr_t)cudaStreamPerThread == TB_STREAM_PER_THREAD, "cudaStreamPerThread is the array API's 2");

/* The runtime entry points used, resolved once at load. The first six are
 * needed to say anything; the others are used where present. */
static struct {
    int loaded;
    cudaError_t (*get_device_count)(int *);
    cudaError_t (*set_device)(int);
    cudaError_t (*device_synchronize)(void);
    cudaError_t (*pointer_get_attributes)(struct cudaPointerAttributes *, const void *);
    cudaError_t (*get_last_error)(void);
    const char *(*get_error_string)(cudaError_t);
    cudaError_t (*get_device)(int *);
    cudaError_t (*ipc_get_mem_handle)(cudaIpcMemHandle_t *, void *);
    cudaError_t (*ipc_open_mem_handle)(void **, cudaIpcMemHandle_t, unsigned int);
    cudaError_t (*ipc_close_mem_handle)(void *);
    cudaError_t (*event_create_with_flags)(cudaEvent_t *, unsigned int);
    cudaError_t (*event_record)(cudaEvent_t, cudaStream_t);
    cudaError_t (*event_synchronize)(cudaEvent_t);
    cudaError_t (*event_destroy)(cudaEvent_t);
    cudaError_t (*stream_wait_event)(cudaStream_t, cudaEvent_t, unsigned int);
    cudaError_t (*stream_synchronize)(cudaStream_t);
    /* cudaGetDriverEntryPointByVersion (CUDA 12.5+) and cudaGetDriverEntryPoint
     * (11.3+; its fourth argument came with 12.0 and is ignored before). */
    int (*entry_point_by_version)(const char *, void **, unsigned int, unsigned long long, int *);
    int (*entry_point)(const char *, void **, unsigned long long, int *);
    /* The driver's, reached through the runtime: CUresult is an int. */
    int (*mem_get_address_range)(unsigned long long *, size_t *, unsigned long long);
    int (*driver_error_string)(int, const char **);
} rt;

/* The path of the CUDA runtime already in the process (libtorch_cuda's,
 * for one), so that one runtime serves both. */
static char runtime_path[512];

static int find_loaded_runtime(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (base && strncmp(base + 1, "libcudart.so", strlen("libcudart.so")) == 0) {
        snprintf(runtime_path, sizeof runtime_path, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

const char *tb_cuda_runtime_path(void)
{
    return runtime_path[0] ? runtime_path : NULL;
}

/* ---- The runtime's calls, in the table's form -------------------------- */

static const char *rt_error(cudaError_t e)
{
    if (e == cudaSuccess)
        return NULL;
    rt.get_last_error(); /* clear it: the runtime keeps the last error */
    return rt.get_error_string(e);
}

static const char *op_get_device(int *device)
{
    return rt_error(rt.get_device(device));
}

static const char *op_set_device(int device)
{
    return rt_error(rt.set_device(device));
}

static const char *op_pointer_type(uint64_t ptr, tb_mem_type *type, int *device)
{
    struct cudaPointerAttributes a;
    const char *e = rt_error(rt.pointer_get_attributes(&a, (const void *)(uintptr_t)ptr));
    if (e)
        return e;
    *device = a.device;
    switch (a.type) {
    case cudaMemoryTypeHost: *type = TB_MEM_PAGE_LOCKED_HOST; break;
    case cudaMemoryTypeDevice: *type = TB_MEM_DEVICE; break;
    case cudaMemoryTypeManaged: *type = TB_MEM_MANAGED; break;
    default: *type = TB_MEM_HOST; break;
    }
    return NULL;
}

static _Thread_local char driver_message[96];

static const char *op_address_range(uint64_t ptr, uint64_t *base, uint64_t *size)
{
    unsigned long long b = 0;
    size_t s = 0;
    int e = rt.mem_get_address_range(&b, &s, (unsigned long long)ptr);
    if (e != 0) {
        const char *text = NULL;
        if (!rt.driver_error_string || rt.driver_error_string(e, &text) != 0 || !text)
            text = "unknown error";
        snprintf(driver_message, sizeof driver_message, "%s (CUDA driver error %d)", text, e);
        return driver_message;
    }
    *base = b;
    *size = s;
    return NULL;
}

static const char *op_ipc_get_handle(uint64_t base, unsigned char handle[TB_CUDA_IPC_HANDLE_SIZE])
{
    cudaIpcMemHandle_t h;
    const char *e = rt_error(rt.ipc_get_mem_handle(&h, (void *)(uintptr_t)base));
    if (!e)
        memcpy(handle, &h, sizeof h);
    return e;
}

static const char *op_ipc_open_handle(const unsigned char handle[TB_CUDA_IPC_HANDLE_SIZE], uint64_t *base)
{
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    void *p = NULL;
    const char *e = rt_error(rt.ipc_open_mem_handle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    *base = (uint64_t)(uintptr_t)p;
    return e;
}

static const char *op_ipc_close_handle(uint64_t base)
{
    return rt_error(rt.ipc_close_mem_handle((void *)(uintptr_t)base));
}

static const char *op_event_create(void **event)
{
    cudaEvent_t ev = NULL;
    const char *e = rt_error(rt.event_create_with_flags(&ev, cudaEventDisableTiming));
    *event = ev;
    return e;
}

static const char *op_event_record(void *event, uintptr_t stream)
{
    return rt_error(rt.event_record((cudaEvent_t)event, (cudaStream_t)stream));
}

static const char *op_event_synchronize(void *event)
{
    return rt_error(rt.event_synchronize((cudaEvent_t)event));
}

static const char *op_event_destroy(void *event)
{
    return rt_error(rt.event_destroy((cudaEvent_t)event));
}

static const char *op_stream_wait_event(uintptr_t stream, void *event)
{
    return rt_error(rt.stream_wait_event((cudaStream_t)stream, (cudaEvent_t)event, 0));
}

static const char *op_stream_synchronize(uintptr_t stream)
{
    return rt_error(rt.stream_synchronize((cudaStream_t)stream));
}

/* A driver call through the runtime: no libcuda of our own. */
static void *driver_entry(const char *symbol)
{
    void *fn = NULL;
    int status = 0;
    if (rt.entry_point_by_version && rt.entry_point_by_version(symbol, &fn, 12000, 0, &status) == 0 && fn)
        return fn;
    fn = NULL;
    if (rt.entry_point && rt.entry_point(symbol, &fn, 0, &status) == 0 && fn)
        return fn;
    rt.get_last_error();
    return NULL;
}

#define RESOLVE(lib, field, name) (*(void **)&rt.field = dlsym((lib), (name)))

static void fill_runtime_ops(void)
{
#define OP(field, fn, needed) ops.field = (needed) ? fn : NULL
    OP(get_device, op_get_device, rt.get_device);
    OP(set_device, op_set_device, 1);
    OP(pointer_type, op_pointer_type, 1);
    OP(address_range, op_address_range, rt.mem_get_address_range);
    OP(ipc_get_handle, op_ipc_get_handle, rt.ipc_get_mem_handle);
    OP(ipc_open_handle, op_ipc_open_handle, rt.ipc_open_mem_handle);
    OP(ipc_close_handle, op_ipc_close_handle, rt.ipc_close_mem_handle);
    OP(event_create, op_event_create, rt.event_create_with_flags && rt.event_destroy);
    OP(event_record, op_event_record, rt.event_record);
    OP(event_synchronize, op_event_synchronize, rt.event_synchronize);
    OP(event_destroy, op_event_destroy, rt.event_destroy);
    OP(stream_wait_event, op_stream_wait_event, rt.stream_wait_event);
    OP(stream_synchronize, op_stream_synchronize, rt.stream_synchronize);
#undef OP
}

void tb_cuda_load(void)
{
    fill_torch_ops();
    if (rt.loaded)
        return;
    void *lib = NULL;
    if (dl_iterate_phdr(find_loaded_runtime, NULL))
        lib = dlopen(runtime_path, RTLD_NOW | RTLD_NOLOAD);
    static const char *names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"};
    for (size_t i = 0; !lib && i < sizeof names / sizeof names[0]; i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    if (!runtime_path[0]) {
        Dl_info where;
        void *sym = dlsym(lib, "cudaGetDeviceCount");
        if (sym && dladdr(sym, &where) && where.dli_fname)
            snprintf(runtime_path, sizeof runtime_path, "%s", where.dli_fname);
    }
    RESOLVE(lib, get_device_count, "cudaGetDeviceCount");
    RESOLVE(lib, set_device, "cudaSetDevice");
    RESOLVE(lib, device_synchronize, "cudaDeviceSynchronize");
    RESOLVE(lib, pointer_get_attributes, "cudaPointerGetAttributes");
    RESOLVE(lib, get_last_error, "cudaGetLastError");
    RESOLVE(lib, get_error_string, "cudaGetErrorString");
    rt.loaded = rt.get_device_count && rt.set_device && rt.device_synchronize && rt.pointer_get_attributes &&
                rt.get_last_error && rt.get_error_string;
    if (!rt.loaded)
        return;
    RESOLVE(lib, get_device, "cudaGetDevice");
    RESOLVE(lib, ipc_get_mem_handle, "cudaIpcGetMemHandle");
    RESOLVE(lib, ipc_open_mem_handle, "cudaIpcOpenMemHandle");
    RESOLVE(lib, ipc_close_mem_handle, "cudaIpcCloseMemHandle");
    RESOLVE(lib, event_create_with_flags, "cudaEventCreateWithFlags");
    RESOLVE(lib, event_record, "cudaEventRecord");
    RESOLVE(lib, event_synchronize, "cudaEventSynchronize");
    RESOLVE(lib, event_destroy, "cudaEventDestroy");
    RESOLVE(lib, stream_wait_event, "cudaStreamWaitEvent");
    RESOLVE(lib, stream_synchronize, "cudaStreamSynchronize");
    RESOLVE(lib, entry_point_by_version, "cudaGetDriverEntryPointByVersion");
    RESOLVE(lib, entry_point, "cudaGetDriverEntryPoint");
    /* The driver is asked only where it has a device to speak of. */
    if (tb_cuda_device_count() > 0) {
        *(void **)&rt.mem_get_address_range = driver_entry("cuMemGetAddressRange");
        *(void **)&rt.driver_error_string = driver_entry("cuGetErrorString");
    }
    fill_runtime_ops();
}

/* Asked once, at load: from_blob consults it on every call, and the
 * runtime's answer costs far more than the rest of from_blob. */
static int device_count = -1;

int tb_cuda_device_count(void)
{
    if (device_count >= 0)
        return device_count;
    int n = 0;
    if (!rt.loaded || rt.get_device_count(&n) != cudaSuccess) {
        if (rt.loaded)
            rt.get_last_error(); /* clear it: the runtime keeps the last error */
        n = 0;
    }
    device_count = n;
    return n;
}

tb_mem_type tb_cuda_pointer_type(uint64_t ptr, int *device, const char **error)
{
    tb_mem_type type = TB_MEM_UNKNOWN;
    *device = -1;
    *error = rt.loaded ? op_pointer_type(ptr, &type, device) : NULL;
    return *error ? TB_MEM_UNKNOWN : type;
}

const char *tb_cuda_ipc_unavailable(void)
{
    if (!tb_shim_cuda_built())
        return "CUDA IPC is not available: this libtorch was built without CUDA";
    if (!rt.loaded)
        return "CUDA IPC is not available: no CUDA runtime was found";
    if (tb_cuda_device_count() == 0)
        return "CUDA IPC is not available: no CUDA device here";
    if (!ops.ipc_get_handle || !ops.ipc_open_handle || !ops.ipc_close_handle)
        return "CUDA IPC is not available: the CUDA runtime lacks cudaIpcGetMemHandle or cudaIpcOpenMemHandle";
    if (!ops.address_range)
        return "CUDA IPC is not available: the driver's cuMemGetAddressRange cannot be reached through the runtime";
    return NULL;
}
#else
const char *tb_cuda_runtime_path(void)
{
    return NULL;
}

void tb_cuda_load(void)
{
    fill_torch_ops();
}

int tb_cuda_device_count(void)
{
    return 0;
}

tb_mem_type tb_cuda_pointer_type(uint64_t ptr, int *device, const char **error)
{
    (void)ptr;
    *device = -1;
    *error = NULL;
    return TB_MEM_UNKNOWN;
}

const char *tb_cuda_ipc_unavailable(void)
{
    return "CUDA IPC is not supported by this build (built without CUDA headers, TB_CUDA=0); only CPU shared "
           "memory is";
}
#endif

/* The runtime's answer about ptr. */
static tb_mem_answer ask(uint64_t ptr)
{
    tb_mem_answer a;
    a.type = tb_cuda_pointer_type(ptr, &a.device, &a.error);
    return a;
}

int tb_cuda_check_pointer(uint64_t ptr, const tb_device *declared, char *why, size_t why_size)
{
    int count = tb_cuda_device_count();
    tb_mem_answer a = {TB_MEM_UNKNOWN, -1, NULL};
    if (tb_devmem_needs_answer(declared->type, declared->index, count))
        a = ask(ptr);
    return tb_devmem_verdict(declared->type, declared->index, count, &a, why, why_size);
}

/* ---- DLPack ------------------------------------------------------------ */

/* A stream term: undefined, or an integer; 0 with *exc otherwise, its
 * message ending with suffix. */
static int get_stream(ErlNifEnv *env, ERL_NIF_TERM term, const char *suffix, tb_stream *out, ERL_NIF_TERM *exc)
{
    int given = term != tb_atoms.undefined;
    ErlNifSInt64 value = 0;
    const char *why = NULL;
    if (given && !enif_get_int64(env, term, &value)) {
        *exc = tb_raise_badarg(env, "stream: expected an integer (a cudaStream_t, 1 or 2 for the default streams, "
                                    "-1 for no synchronization), got %T%s",
                               term, suffix);
        return 0;
    }
    if (!tb_stream_parse(given, value, out, &why)) {
        *exc = tb_raise_badarg(env, "stream: %s, got %T%s", why, term, suffix);
        return 0;
    }
#if !TB_CUDA
    if (given && out->sync) {
        *exc = tb_raise_error(env, "stream: this build has no CUDA runtime calls (TB_CUDA=0), so it cannot order "
                                   "work on CUDA streams; pass no stream, or -1%s",
                              suffix);
        return 0;
    }
#endif
    return 1;
}

int tb_cuda_dlpack_export_stream(ErlNifEnv *env, const tb_shim_info *info, ERL_NIF_TERM stream, ERL_NIF_TERM *exc)
{
    if (info->device_type != TB_DEVICE_CUDA) {
        if (stream == tb_atoms.undefined)
            return 1;
        /* The array API: on CPU and devices without streams only None. */
        *exc = tb_raise_badarg(env, "stream: a CPU tensor has no stream (the array API takes none for CPU "
                                    "memory), got %T",
                               stream);
        return 0;
    }
    tb_stream s;
    if (!get_stream(env, stream, "", &s, exc))
        return 0;
    const char *e = tb_stream_export(&ops, info->device_index, &s);
    if (e) {
        *exc = tb_raise_error(env, "stream: making the consumer's stream wait for libtorch's failed: %s", e);
        return 0;
    }
    return 1;
}

int tb_cuda_dlpack_import(ErlNifEnv *env, int32_t dl_type, int32_t dl_id, uint64_t ptr, uint64_t bytes,
                          ERL_NIF_TERM stream, const char *suffix, tb_device *device, ERL_NIF_TERM *exc)
{
    const char *name = tb_dlpack_device_name(dl_type);
    tb_dl_placement place;
    tb_devmem_dlpack_placement(dl_type, dl_id, &place);
    if (place.needs_cuda_torch && !tb_shim_cuda_built()) {
        *exc = tb_raise_error(env, "device: a %s tensor (device %d): this libtorch was built without CUDA, so it "
                                   "cannot be imported (%C reads its metadata)%s",
                              name, (int)dl_id, "tensor_blob:dlpack_info/1", "TensorBlob.CUDA.info/1", suffix);
        return 0;
    }
    if (dl_type == tb_kDLCPU && stream != tb_atoms.undefined) {
        *exc = tb_raise_badarg(env, "stream: a kDLCPU tensor has no stream (the array API takes none for CPU "
                                    "memory), got %T%s",
                               stream, suffix);
        return 0;
    }
    tb_stream s;
    if (!get_stream(env, stream, suffix, &s, exc))
        return 0;

    int count = tb_cuda_device_count();
    char why[200];
    if (bytes > 0) {
        tb_mem_answer a = {TB_MEM_UNKNOWN, -1, NULL};
        if (tb_devmem_dlpack_needs_answer(dl_type, dl_id, count))
            a = ask(ptr);
        if (!tb_devmem_dlpack_verdict(dl_type, dl_id, count, &a, why, sizeof why)) {
            *exc = tb_raise_badarg(env, "data: %s%s", why, suffix);
            return 0;
        }
    }
    const char *e = NULL;
    if (place.type == TB_DEVICE_CUDA)
        e = tb_stream_import(&ops, place.index, &s);
    else if (dl_type == tb_kDLCUDAHost)
        e = tb_stream_host_wait(&ops, dl_id >= 0 && dl_id < count ? dl_id : 0, &s);
    if (e) {
        *exc = tb_raise_error(env, "stream: waiting for the producer's stream failed: %s%s", e, suffix);
        return 0;
    }
    *device = (tb_device){place.type, place.index};
    return 1;
}

ERL_NIF_TERM tb_cuda_dlpack_device(ErlNifEnv *env, int32_t dl_type, int32_t dl_id, ERL_NIF_TERM *device_type)
{
    switch (dl_type) {
    case tb_kDLCUDA: *device_type = tb_atoms.cuda; break;
    case tb_kDLCUDAHost: *device_type = tb_atoms.cuda_host; break;
    case tb_kDLCUDAManaged: *device_type = tb_atoms.cuda_managed; break;
    default: *device_type = tb_atoms.cpu; break;
    }
    tb_dl_placement place;
    tb_devmem_dlpack_placement(dl_type, dl_id, &place);
    return tb_make_device(env, place.type, place.index);
}

/* ---- NIFs -------------------------------------------------------------- */

/* cuda_info() -> #{built, devices, libtorch, runtime, runtime_path, ipc_mappings} */
ERL_NIF_TERM tb_nif_cuda_info(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    ERL_NIF_TERM keys[] = {enif_make_atom(env, "built"),        enif_make_atom(env, "devices"),
                           enif_make_atom(env, "ipc_mappings"), enif_make_atom(env, "libtorch"),
                           enif_make_atom(env, "runtime"),      enif_make_atom(env, "runtime_path")};
#if TB_CUDA
    int built = 1, runtime = rt.loaded;
#else
    int built = 0, runtime = 0;
#endif
    ERL_NIF_TERM values[] = {built ? tb_atoms.true_ : tb_atoms.false_, enif_make_int(env, tb_cuda_device_count()),
                             enif_make_long(env, atomic_load(&mappings)),
                             tb_shim_cuda_built() ? tb_atoms.true_ : tb_atoms.false_,
                             runtime ? tb_atoms.true_ : tb_atoms.false_,
                             tb_cuda_runtime_path() ? tb_make_string(env, tb_cuda_runtime_path()) : tb_atoms.nil};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, 6, &map);
    return map;
}

/* cuda_synchronize(Index): waits for the device's work; registered on a
 * dirty I/O scheduler in the function table. */
ERL_NIF_TERM tb_nif_cuda_synchronize(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    int index;
    int count = tb_cuda_device_count();
    if (!enif_get_int(env, argv[0], &index) || index < 0)
        return tb_raise_badarg(env, "device: expected a CUDA device index, got %T", argv[0]);
    if (count == 0)
        return tb_raise_error(env, "cuda: no CUDA device here (no runtime, driver or GPU)");
    if (index >= count)
        return tb_raise_badarg(env, "device: CUDA device %d does not exist (%d found)", index, count);
#if TB_CUDA
    const char *e = rt_error(rt.set_device(index));
    if (!e)
        e = rt_error(rt.device_synchronize());
    if (e)
        return tb_raise_error(env, "cuda: synchronizing device %d failed: %s", index, e);
#endif
    return tb_atoms.ok;
}

ERL_NIF_TERM tb_nif_cuda_memory(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifUInt64 ptr;
    if (!enif_get_uint64(env, argv[0], &ptr))
        return tb_raise_badarg(env, "ptr: expected a non-negative integer address, got %T", argv[0]);
    if (tb_cuda_device_count() == 0)
        return tb_atoms.unknown; /* no runtime, driver or GPU to tell */
    tb_mem_answer a = ask(ptr);
    switch (a.type) {
    case TB_MEM_HOST: return tb_atoms.cpu;
    case TB_MEM_PAGE_LOCKED_HOST: return tb_atoms.cuda_host;
    case TB_MEM_DEVICE: return tb_atoms.cuda;
    case TB_MEM_MANAGED: return tb_atoms.cuda_managed;
    default: return tb_atoms.unknown;
    }
}
