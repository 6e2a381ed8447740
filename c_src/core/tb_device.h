/* The device types: one line each, as tb_dtype.h is for dtypes. Pure C.
 *
 *   X(id, atom, c10::DeviceType name, its value, DLPack DLDeviceType value)
 *
 * The atom names the device in terms (cpu, {cuda, Index}: a device type
 * other than cpu takes an index). Adding a device type: a line here, the
 * shim's check that libtorch agrees (torch_shim.cpp), and the runtime that
 * serves it. */
#ifndef TB_DEVICE_H
#define TB_DEVICE_H

#define TB_DEVICE_TYPES(X)                      \
    X(TB_DEVICE_CPU, cpu, CPU, 0, 1 /* kDLCPU */) \
    X(TB_DEVICE_CUDA, cuda, CUDA, 1, 2 /* kDLCUDA */)

typedef enum {
#define TB_DEVICE_ENUM(id, atom, c10, torch, dlpack) id,
    TB_DEVICE_TYPES(TB_DEVICE_ENUM)
#undef TB_DEVICE_ENUM
        TB_DEVICE_COUNT
} tb_device_type;

typedef struct {
    int type; /* tb_device_type */
    int index;
} tb_device;

/* Our device type of a libtorch device type value: 0 when it is none of
 * ours. */
static inline int tb_device_of_torch(int torch_type, int *out)
{
#define TB_DEVICE_FROM_TORCH(id, atom, c10, torch, dlpack) \
    if (torch_type == (torch)) {                       \
        *out = id;                                     \
        return 1;                                      \
    }
    TB_DEVICE_TYPES(TB_DEVICE_FROM_TORCH)
#undef TB_DEVICE_FROM_TORCH
    return 0;
}

/* The DLPack device type of ours (-1 when it is none). */
static inline int tb_device_dlpack_type(int type)
{
    switch (type) {
#define TB_DEVICE_TO_DLPACK(id, atom, c10, torch, dlpack) \
    case id: return dlpack;
        TB_DEVICE_TYPES(TB_DEVICE_TO_DLPACK)
#undef TB_DEVICE_TO_DLPACK
    }
    return -1;
}

/* The libtorch device type value of ours (-1 when it is none). */
static inline int tb_device_torch_type(int type)
{
    switch (type) {
#define TB_DEVICE_TO_TORCH(id, atom, c10, torch, dlpack) \
    case id: return torch;
        TB_DEVICE_TYPES(TB_DEVICE_TO_TORCH)
#undef TB_DEVICE_TO_TORCH
    }
    return -1;
}

#endif
