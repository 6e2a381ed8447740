#define _GNU_SOURCE /* dl_iterate_phdr, dladdr */
#include "tb_cuda.h"

#include <stdio.h>

#include "tb_term.h"
#include "torch_shim.h"

#if TB_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <string.h>

/* The few runtime entry points used, resolved once. */
static struct {
    int loaded;
    cudaError_t (*get_device_count)(int *);
    cudaError_t (*set_device)(int);
    cudaError_t (*device_synchronize)(void);
    cudaError_t (*pointer_get_attributes)(struct cudaPointerAttributes *, const void *);
    cudaError_t (*get_last_error)(void);
    const char *(*get_error_string)(cudaError_t);
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

void tb_cuda_load(void)
{
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
    *(void **)&rt.get_device_count = dlsym(lib, "cudaGetDeviceCount");
    *(void **)&rt.set_device = dlsym(lib, "cudaSetDevice");
    *(void **)&rt.device_synchronize = dlsym(lib, "cudaDeviceSynchronize");
    *(void **)&rt.pointer_get_attributes = dlsym(lib, "cudaPointerGetAttributes");
    *(void **)&rt.get_last_error = dlsym(lib, "cudaGetLastError");
    *(void **)&rt.get_error_string = dlsym(lib, "cudaGetErrorString");
    rt.loaded = rt.get_device_count && rt.set_device && rt.device_synchronize && rt.pointer_get_attributes &&
                rt.get_last_error && rt.get_error_string;
    tb_cuda_device_count();
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

tb_mem_kind tb_cuda_pointer_kind(uint64_t ptr, int *device, const char **error)
{
    struct cudaPointerAttributes a;
    *error = NULL;
    if (!rt.loaded)
        return TB_MEM_UNKNOWN;
    cudaError_t e = rt.pointer_get_attributes(&a, (const void *)(uintptr_t)ptr);
    if (e != cudaSuccess) {
        rt.get_last_error(); /* clear it: the runtime keeps the last error */
        *error = rt.get_error_string(e);
        return TB_MEM_UNKNOWN;
    }
    *device = a.device;
    switch (a.type) {
    case cudaMemoryTypeHost: return TB_MEM_PINNED_HOST;
    case cudaMemoryTypeDevice: return TB_MEM_DEVICE;
    case cudaMemoryTypeManaged: return TB_MEM_MANAGED;
    default: return TB_MEM_HOST;
    }
}

static const char *error_text(cudaError_t e)
{
    return rt.get_error_string ? rt.get_error_string(e) : "unknown CUDA error";
}
#else
void tb_cuda_load(void)
{
}

const char *tb_cuda_runtime_path(void)
{
    return NULL;
}

int tb_cuda_device_count(void)
{
    return 0;
}

tb_mem_kind tb_cuda_pointer_kind(uint64_t ptr, int *device, const char **error)
{
    (void)ptr;
    *device = -1;
    *error = NULL;
    return TB_MEM_UNKNOWN;
}
#endif

int tb_cuda_check_pointer(uint64_t ptr, const tb_device *declared, char *why, size_t why_size)
{
    /* Asking costs a runtime call: only where a GPU could own the pointer. */
    int count = tb_cuda_device_count();
    if (declared->type == TB_DEVICE_CPU && count == 0)
        return 1;
    if (declared->type == TB_DEVICE_CUDA && declared->index >= count) {
        snprintf(why, why_size, "CUDA device %d does not exist (%d found)", declared->index, count);
        return 0;
    }
    int device = -1;
    const char *error;
    tb_mem_kind kind = tb_cuda_pointer_kind(ptr, &device, &error);
    if (kind == TB_MEM_UNKNOWN && error && declared->type == TB_DEVICE_CUDA) {
        /* A freed device pointer, for one: say what the runtime said. */
        snprintf(why, why_size, "the CUDA runtime does not know it as memory of CUDA device %d: %s", declared->index,
                 error);
        return 0;
    }
    if (kind == TB_MEM_UNKNOWN || kind == TB_MEM_MANAGED)
        return 1; /* managed memory is valid on the host and on its device */
    if (declared->type == TB_DEVICE_CPU && kind == TB_MEM_DEVICE) {
        snprintf(why, why_size, "memory of CUDA device %d, declared as CPU memory", device);
        return 0;
    }
    if (declared->type == TB_DEVICE_CUDA && kind != TB_MEM_DEVICE) {
        snprintf(why, why_size, "%s memory, declared as memory of CUDA device %d",
                 kind == TB_MEM_PINNED_HOST ? "pinned host" : "host", declared->index);
        return 0;
    }
    if (declared->type == TB_DEVICE_CUDA && device != declared->index) {
        snprintf(why, why_size, "memory of CUDA device %d, declared as memory of CUDA device %d", device, declared->index);
        return 0;
    }
    return 1;
}

/* cuda_info() -> #{built => boolean(), runtime => boolean(), devices => N, libtorch => boolean()} */
ERL_NIF_TERM tb_nif_cuda_info(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    ERL_NIF_TERM keys[] = {enif_make_atom(env, "built"), enif_make_atom(env, "devices"),
                           enif_make_atom(env, "libtorch"), enif_make_atom(env, "runtime"),
                           enif_make_atom(env, "runtime_path")};
#if TB_CUDA
    int built = 1, runtime = rt.loaded;
#else
    int built = 0, runtime = 0;
#endif
    ERL_NIF_TERM values[] = {built ? tb_atoms.true_ : tb_atoms.false_, enif_make_int(env, tb_cuda_device_count()),
                             tb_shim_cuda_built() ? tb_atoms.true_ : tb_atoms.false_,
                             runtime ? tb_atoms.true_ : tb_atoms.false_,
                             tb_cuda_runtime_path() ? tb_make_string(env, tb_cuda_runtime_path()) : tb_atoms.nil};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, 5, &map);
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
    cudaError_t e = rt.set_device(index);
    if (e == cudaSuccess)
        e = rt.device_synchronize();
    if (e != cudaSuccess)
        return tb_raise_error(env, "cuda: synchronizing device %d failed: %s", index, error_text(e));
#endif
    return tb_atoms.ok;
}
