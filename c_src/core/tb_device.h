/* The device types: one line each, as tb_dtype.h is for dtypes. Pure C.
 *
 *   X(id, atom, c10::DeviceType name, its value, DLPack DLDeviceType value,
 *     indexed, runtime)
 *
 * The atom names the device in terms: an indexed device type is
 * {Type, Index} ({cuda, 0}), one that is not is its atom alone (cpu). The
 * runtime is the one that serves its memory (TB_RUNTIMES below): what
 * checks a pointer declared on it and orders its streams. Every decision
 * by device type reads these columns; none names a device type.
 *
 * TB_DLPACK_DEVICES lists the DLPack device codes an import takes: the
 * device libtorch sees such memory on, what a runtime must confirm, and
 * which runtime that is.
 *
 * Adding a device type: its line here (and its DLPack codes below), its
 * name in ?DEVICE_TYPES of test/tensor_blob_tests.erl, its term in the
 * device() type of src/tensor_blob.erl. If no runtime of TB_RUNTIMES
 * serves it, also its runtime's line there, the unit that defines that
 * runtime's functions (tb_runtime_api.h), and the unit's line in c_src/LAYERS. */
#ifndef TB_DEVICE_H
#define TB_DEVICE_H

/* The runtimes that serve memory: one line each.
 *
 *   X(id, name, how messages name it)
 *
 * TB_RUNTIME_HOST is memory the host reads (no streams; where a device
 * runtime answers, it must not place the pointer on its devices). Every
 * other runtime's functions (tb_runtime_api.h: its devices, what it knows of
 * a pointer, its streams) are defined by its own unit as
 * tb_runtime_<name>; tb_runtime.c finds them by this list. */
#define TB_RUNTIMES(X)               \
    X(TB_RUNTIME_HOST, host, "host") \
    X(TB_RUNTIME_CUDA, cuda, "CUDA")

enum {
#define TB_RUNTIME_ENUM(id, name, text) id,
    TB_RUNTIMES(TB_RUNTIME_ENUM)
#undef TB_RUNTIME_ENUM
        TB_RUNTIME_COUNT
};

static const char *const tb_runtime_names[TB_RUNTIME_COUNT] = {
#define TB_RUNTIME_NAME(id, name, text) text,
    TB_RUNTIMES(TB_RUNTIME_NAME)
#undef TB_RUNTIME_NAME
};

/* What a runtime says a pointer is. */
typedef enum { TB_MEM_UNKNOWN, TB_MEM_HOST, TB_MEM_PAGE_LOCKED_HOST, TB_MEM_DEVICE, TB_MEM_MANAGED } tb_mem_type;

#define TB_DEVICE_TYPES(X)                                            \
    X(TB_DEVICE_CPU, cpu, CPU, 0, 1 /* kDLCPU */, 0, TB_RUNTIME_HOST) \
    X(TB_DEVICE_CUDA, cuda, CUDA, 1, 2 /* kDLCUDA */, 1, TB_RUNTIME_CUDA)

typedef enum {
#define TB_DEVICE_ENUM(id, atom, c10, torch, dlpack, indexed, runtime) id,
    TB_DEVICE_TYPES(TB_DEVICE_ENUM)
#undef TB_DEVICE_ENUM
        TB_DEVICE_COUNT
} tb_device_type;

typedef struct {
    int type; /* tb_device_type */
    int index;
} tb_device;

/* A row of the table, in the enum's order (C++ includes this file too). */
typedef struct {
    const char *name;     /* the atom's text: "cpu" */
    const char *c10_name; /* libtorch's name, as messages spell it: "CPU" */
    int torch_type, dlpack_type;
    int indexed, runtime;
} tb_device_row;

static const tb_device_row tb_devices[TB_DEVICE_COUNT] = {
#define TB_DEVICE_ROW(id, atom, c10, torch, dlpack, indexed, runtime) {#atom, #c10, torch, dlpack, indexed, runtime},
    TB_DEVICE_TYPES(TB_DEVICE_ROW)
#undef TB_DEVICE_ROW
};

/* Our device type of a libtorch device type value: 0 when it is none of
 * ours. (Unrolled from the table: libtorch's tensor info asks it.) */
static inline int tb_device_of_torch(int torch_type, int *out)
{
#define TB_DEVICE_FROM_TORCH(id, atom, c10, torch, dlpack, indexed, runtime) \
    if (torch_type == (torch)) {                                             \
        *out = id;                                                           \
        return 1;                                                            \
    }
    TB_DEVICE_TYPES(TB_DEVICE_FROM_TORCH)
#undef TB_DEVICE_FROM_TORCH
    return 0;
}

static inline int tb_device_valid(int type)
{
    return type >= 0 && type < TB_DEVICE_COUNT;
}

/* The DLPack device type of ours (-1 when it is none). */
static inline int tb_device_dlpack_type(int type)
{
    return tb_device_valid(type) ? tb_devices[type].dlpack_type : -1;
}

/* The libtorch device type value of ours (-1 when it is none). */
static inline int tb_device_torch_type(int type)
{
    return tb_device_valid(type) ? tb_devices[type].torch_type : -1;
}

/* The runtime serving a device type (TB_RUNTIME_HOST for none of ours). */
static inline int tb_device_runtime(int type)
{
    return tb_device_valid(type) ? tb_devices[type].runtime : TB_RUNTIME_HOST;
}

/* 1 when a device type's devices are numbered. */
static inline int tb_device_indexed(int type)
{
    return tb_device_valid(type) && tb_devices[type].indexed;
}

/* The DLPack device codes an import takes:
 *
 *   X(code, DLPack's name of it, atom, our device type, check, runtime)
 *
 * The atom is the name dlpack_info/1 reports as device_type. The device is
 * where libtorch sees the memory, numbered by the DLPack device_id when
 * that type is indexed. The check is what the runtime must say of the
 * pointer (TB_DLCHECK_*, decided in tb_devmem.c); the runtime is the one
 * that answers it and orders the producer's stream (page-locked host
 * memory is the CPU's, but CUDA's to check and to wait for). */
enum {
    TB_DLCHECK_HOST,        /* not device memory */
    TB_DLCHECK_DEVICE,      /* device memory of that device */
    TB_DLCHECK_PAGE_LOCKED, /* host-readable: not device memory; ordered by the device's streams */
    TB_DLCHECK_MANAGED      /* managed memory */
};

#define TB_DLPACK_DEVICES(X)                                                             \
    X(1, kDLCPU, cpu, TB_DEVICE_CPU, TB_DLCHECK_HOST, TB_RUNTIME_HOST)                   \
    X(2, kDLCUDA, cuda, TB_DEVICE_CUDA, TB_DLCHECK_DEVICE, TB_RUNTIME_CUDA)              \
    X(3, kDLCUDAHost, cuda_host, TB_DEVICE_CPU, TB_DLCHECK_PAGE_LOCKED, TB_RUNTIME_CUDA) \
    X(13, kDLCUDAManaged, cuda_managed, TB_DEVICE_CUDA, TB_DLCHECK_MANAGED, TB_RUNTIME_CUDA)

enum {
#define TB_DLPACK_DEVICE_ENUM(code, dlname, atom, device, check, runtime) TB_DL_##atom,
    TB_DLPACK_DEVICES(TB_DLPACK_DEVICE_ENUM)
#undef TB_DLPACK_DEVICE_ENUM
        TB_DLPACK_DEVICE_COUNT
};

typedef struct {
    int code;
    const char *dlpack_name; /* DLPack's name of the code: "kDLCUDAHost" */
    const char *name;        /* the atom's text: "cuda_host" */
    int device, check, runtime;
} tb_dlpack_device_row;

static const tb_dlpack_device_row tb_dlpack_devices[TB_DLPACK_DEVICE_COUNT] = {
#define TB_DLPACK_DEVICE_ROW(code, dlname, atom, device, check, runtime) {code, #dlname, #atom, device, check, runtime},
    TB_DLPACK_DEVICES(TB_DLPACK_DEVICE_ROW)
#undef TB_DLPACK_DEVICE_ROW
};

/* The row of a DLPack device code: -1 when an import does not take it. */
static inline int tb_dlpack_device_row_of(int code)
{
    for (int i = 0; i < TB_DLPACK_DEVICE_COUNT; i++)
        if (tb_dlpack_devices[i].code == code)
            return i;
    return -1;
}

#endif
