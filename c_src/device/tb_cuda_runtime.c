#define _GNU_SOURCE /* dl_iterate_phdr, dladdr */
#include "tb_cuda_runtime.h"

#include <stdatomic.h>
#include <stdio.h>

#include "tb_runtime_api.h"
#include "tb_stream.h"
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

long tb_cuda_mappings(void)
{
    return atomic_load(&mappings);
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
#include <pthread.h>
#include <string.h>

_Static_assert(sizeof(cudaIpcMemHandle_t) == TB_CUDA_IPC_HANDLE_SIZE, "cudaIpcMemHandle_t is 64 bytes");
_Static_assert(sizeof(cudaIpcEventHandle_t) == 64, "cudaIpcEventHandle_t is 64 bytes");
_Static_assert((uintptr_t)cudaStreamLegacy == TB_STREAM_LEGACY, "cudaStreamLegacy is the array API's 1");
_Static_assert((uintptr_t)cudaStreamPerThread == TB_STREAM_PER_THREAD, "cudaStreamPerThread is the array API's 2");

/* The runtime's entry points, each written once: X(field, symbol, type,
 * parameters, role). The role says what the field is for:
 *   NEEDED     needed to say anything: without it there is no runtime;
 *   NEEDED_OP  the same, and behind the table entry of its name;
 *   OP         behind the table entry of its name (NULL where it lacks);
 *   USED       used where present.
 * cudaGetDriverEntryPointByVersion is CUDA 12.5+; cudaGetDriverEntryPoint
 * 11.3+ (its fourth argument came with 12.0 and is ignored before). */
#define TB_CUDA_RUNTIME_CALLS(X)                                                                                      \
    X(get_device_count, cudaGetDeviceCount, cudaError_t, (int *), NEEDED)                                             \
    X(set_device, cudaSetDevice, cudaError_t, (int), NEEDED_OP)                                                       \
    X(device_synchronize, cudaDeviceSynchronize, cudaError_t, (void), NEEDED_OP)                                      \
    X(pointer_type, cudaPointerGetAttributes, cudaError_t, (struct cudaPointerAttributes *, const void *), NEEDED_OP) \
    X(get_last_error, cudaGetLastError, cudaError_t, (void), NEEDED)                                                  \
    X(get_error_string, cudaGetErrorString, const char *, (cudaError_t), NEEDED)                                      \
    X(get_device, cudaGetDevice, cudaError_t, (int *), OP)                                                            \
    X(ipc_get_handle, cudaIpcGetMemHandle, cudaError_t, (cudaIpcMemHandle_t *, void *), OP)                           \
    X(ipc_open_handle, cudaIpcOpenMemHandle, cudaError_t, (void **, cudaIpcMemHandle_t, unsigned int), OP)            \
    X(ipc_close_handle, cudaIpcCloseMemHandle, cudaError_t, (void *), OP)                                             \
    X(ipc_open_event, cudaIpcOpenEventHandle, cudaError_t, (cudaEvent_t *, cudaIpcEventHandle_t), OP)                 \
    X(event_create, cudaEventCreateWithFlags, cudaError_t, (cudaEvent_t *, unsigned int), OP)                         \
    X(event_record, cudaEventRecord, cudaError_t, (cudaEvent_t, cudaStream_t), OP)                                    \
    X(event_synchronize, cudaEventSynchronize, cudaError_t, (cudaEvent_t), OP)                                        \
    X(event_destroy, cudaEventDestroy, cudaError_t, (cudaEvent_t), OP)                                                \
    X(stream_wait_event, cudaStreamWaitEvent, cudaError_t, (cudaStream_t, cudaEvent_t, unsigned int), OP)             \
    X(stream_synchronize, cudaStreamSynchronize, cudaError_t, (cudaStream_t), OP)                                     \
    X(entry_point_by_version, cudaGetDriverEntryPointByVersion, int,                                                  \
      (const char *, void **, unsigned int, unsigned long long, int *), USED)                                         \
    X(entry_point, cudaGetDriverEntryPoint, int, (const char *, void **, unsigned long long, int *), USED)

/* The driver's, reached through the runtime (CUresult is an int); asked
 * only where there is a device to speak of. */
#define TB_CUDA_DRIVER_CALLS(X)                                                                           \
    X(address_range, cuMemGetAddressRange, int, (unsigned long long *, size_t *, unsigned long long), OP) \
    X(driver_error_string, cuGetErrorString, int, (int, const char **), USED)

static struct {
    int loaded;
#define TB_FIELD(field, symbol, type, params, role) type(*field) params;
    TB_CUDA_RUNTIME_CALLS(TB_FIELD)
    TB_CUDA_DRIVER_CALLS(TB_FIELD)
#undef TB_FIELD
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

static const char *op_device_synchronize(void)
{
    return rt_error(rt.device_synchronize());
}

static const char *op_pointer_type(uint64_t ptr, tb_mem_type *type, int *device)
{
    struct cudaPointerAttributes a;
    const char *e = rt_error(rt.pointer_type(&a, (const void *)(uintptr_t)ptr));
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
    int e = rt.address_range(&b, &s, (unsigned long long)ptr);
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
    const char *e = rt_error(rt.ipc_get_handle(&h, (void *)(uintptr_t)base));
    if (!e)
        memcpy(handle, &h, sizeof h);
    return e;
}

static const char *op_ipc_open_handle(const unsigned char handle[TB_CUDA_IPC_HANDLE_SIZE], uint64_t *base)
{
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    void *p = NULL;
    const char *e = rt_error(rt.ipc_open_handle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    *base = (uint64_t)(uintptr_t)p;
    return e;
}

static const char *op_ipc_close_handle(uint64_t base)
{
    return rt_error(rt.ipc_close_handle((void *)(uintptr_t)base));
}

static const char *op_ipc_open_event(const unsigned char handle[64], void **event)
{
    cudaIpcEventHandle_t h;
    memcpy(&h, handle, sizeof h);
    cudaEvent_t ev = NULL;
    const char *e = rt_error(rt.ipc_open_event(&ev, h));
    *event = ev;
    return e;
}

static const char *op_event_create(void **event)
{
    cudaEvent_t ev = NULL;
    const char *e = rt_error(rt.event_create(&ev, cudaEventDisableTiming));
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

/* The table's entries, from the calls the runtime has. */
static void fill_runtime_ops(void)
{
#define TB_OP_NEEDED(field)
#define TB_OP_USED(field)
#define TB_OP_NEEDED_OP(field) ops.field = op_##field;
#define TB_OP_OP(field) ops.field = rt.field ? op_##field : NULL;
#define TB_OP(field, symbol, type, params, role) TB_OP_##role(field)
    TB_CUDA_RUNTIME_CALLS(TB_OP)
    TB_CUDA_DRIVER_CALLS(TB_OP)
    /* An event made must be destroyed. */
    if (!rt.event_destroy) {
        ops.event_create = NULL;
        ops.ipc_open_event = NULL;
    }
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
#define TB_RESOLVE(field, symbol, type, params, role) *(void **)&rt.field = dlsym(lib, #symbol);
    TB_CUDA_RUNTIME_CALLS(TB_RESOLVE)
#undef TB_RESOLVE
#define TB_HAS_NEEDED(field) &&rt.field
#define TB_HAS_NEEDED_OP(field) &&rt.field
#define TB_HAS_OP(field)
#define TB_HAS_USED(field)
#define TB_HAS(field, symbol, type, params, role) TB_HAS_##role(field)
    rt.loaded = 1 TB_CUDA_RUNTIME_CALLS(TB_HAS);
    if (!rt.loaded)
        return;
    /* The driver is asked only where it has a device to speak of. */
    if (tb_cuda_device_count() > 0) {
#define TB_RESOLVE_DRIVER(field, symbol, type, params, role) *(void **)&rt.field = driver_entry(#symbol);
        TB_CUDA_DRIVER_CALLS(TB_RESOLVE_DRIVER)
#undef TB_RESOLVE_DRIVER
    }
    fill_runtime_ops();
}

/* Asked once (at load, after the runtime is opened): from_blob consults it
 * on every call, and the runtime's answer costs far more than the rest of
 * from_blob. Any scheduler may ask first: pthread_once makes the one ask,
 * and publishes its answer to every thread. */
static int device_count;
static pthread_once_t device_count_once = PTHREAD_ONCE_INIT;

static void ask_device_count(void)
{
    int n = 0;
    if (!rt.loaded || rt.get_device_count(&n) != cudaSuccess) {
        if (rt.loaded)
            rt.get_last_error(); /* clear it: the runtime keeps the last error */
        n = 0;
    }
    device_count = n;
}

int tb_cuda_device_count(void)
{
    /* Before the runtime is loaded there is nothing to ask, and nothing
     * to remember. */
    if (!rt.loaded)
        return 0;
    pthread_once(&device_count_once, ask_device_count);
    return device_count;
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

int tb_cuda_runtime_loaded(void)
{
    return rt.loaded;
}

const char *tb_cuda_synchronize(int index)
{
    return tb_stream_device_wait(&ops, index);
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

int tb_cuda_runtime_loaded(void)
{
    return 0;
}

const char *tb_cuda_synchronize(int index)
{
    (void)index;
    return NULL;
}

const char *tb_cuda_ipc_unavailable(void)
{
    return "CUDA IPC is not supported by this build (built without CUDA headers, TB_CUDA=0); only CPU shared "
           "memory is";
}
#endif

tb_mem_answer tb_cuda_ask(uint64_t ptr)
{
    tb_mem_answer a;
    a.type = tb_cuda_pointer_type(ptr, &a.device, &a.error);
    return a;
}

/* ---- CUDA as a runtime of the device table (tb_runtime_api.h) ---------- */

static const char *export_stream(int device, const tb_stream *consumer)
{
    return tb_stream_export(&ops, device, consumer);
}

static const char *import_stream(int device, const tb_stream *producer)
{
    return tb_stream_import(&ops, device, producer);
}

static const char *host_wait(int device, const tb_stream *producer)
{
    return tb_stream_host_wait(&ops, device, producer);
}

const tb_runtime tb_runtime_cuda = {
    .load = tb_cuda_load,
    .device_count = tb_cuda_device_count,
    .ask = tb_cuda_ask,
    .stream_export = export_stream,
    .stream_import = import_stream,
    .stream_host_wait = host_wait,
    .streams_refused = TB_CUDA ? NULL : "this build has no CUDA runtime calls (TB_CUDA=0)",
};
