/* The DLPack ABI, versions 1.0 to 1.3, declared for this project
 * (https://github.com/dmlc/dlpack describes the standard).
 *
 * Every name carries a tb_ / TB_ prefix, enum constants included. A file may
 * include this header together with any dlpack.h (libtorch ships one, of
 * version 0.6 in Debian's libtorch 1.13, of 1.x in newer releases) without a
 * clash of types, enum constants or macros. Guarding on DLPACK_VERSION would
 * make the two exclusive and tie us to whichever was included first;
 * prefixing lets c_test/test_dlpack_abi.c include both and compare the
 * layouts field by field.
 *
 * Fields that carry enum values coming from foreign code (device type, type
 * code) are declared as fixed-width integers: a value outside the enum is
 * then still well-defined to read, and is refused by tb_dlpack_check.c. */
#ifndef TB_DLPACK_ABI_H
#define TB_DLPACK_ABI_H

#include <stddef.h>
#include <stdint.h>

#define TB_DLPACK_MAJOR_VERSION 1
#define TB_DLPACK_MINOR_VERSION 3

/* A major version change means the layout of the versioned managed tensor
 * changed (only version, manager_ctx and deleter stay put); a minor change
 * only adds enum values. */
typedef struct {
    uint32_t major;
    uint32_t minor;
} tb_DLPackVersion;

typedef enum {
    tb_kDLCPU = 1,
    tb_kDLCUDA = 2,
    tb_kDLCUDAHost = 3,    /* CUDA pinned host memory (cudaMallocHost) */
    tb_kDLOpenCL = 4,
    tb_kDLVulkan = 7,
    tb_kDLMetal = 8,
    tb_kDLVPI = 9,         /* Verilog simulator buffer */
    tb_kDLROCM = 10,
    tb_kDLROCMHost = 11,   /* ROCm pinned host memory (hipMallocHost) */
    tb_kDLExtDev = 12,     /* reserved for extension devices */
    tb_kDLCUDAManaged = 13,/* CUDA unified memory (cudaMallocManaged) */
    tb_kDLOneAPI = 14,
    tb_kDLWebGPU = 15,
    tb_kDLHexagon = 16,
    tb_kDLMAIA = 17,
    tb_kDLTrn = 18         /* AWS Trainium, added in 1.2 */
} tb_DLDeviceType;

typedef struct {
    int32_t device_type; /* a tb_DLDeviceType */
    int32_t device_id;   /* 0 for CPU, pinned and managed memory */
} tb_DLDevice;

typedef enum {
    tb_kDLInt = 0,
    tb_kDLUInt = 1,
    tb_kDLFloat = 2,
    tb_kDLOpaqueHandle = 3,
    tb_kDLBfloat = 4,
    tb_kDLComplex = 5, /* two floats of bits / 2 each */
    tb_kDLBool = 6,    /* 8 bits a value */
    /* 8-bit floats (1.1) */
    tb_kDLFloat8_e3m4 = 7,
    tb_kDLFloat8_e4m3 = 8,
    tb_kDLFloat8_e4m3b11fnuz = 9,
    tb_kDLFloat8_e4m3fn = 10,
    tb_kDLFloat8_e4m3fnuz = 11,
    tb_kDLFloat8_e5m2 = 12,
    tb_kDLFloat8_e5m2fnuz = 13,
    tb_kDLFloat8_e8m0fnu = 14,
    /* 6- and 4-bit floats (1.1), packed unless IS_SUBBYTE_TYPE_PADDED */
    tb_kDLFloat6_e2m3fn = 15,
    tb_kDLFloat6_e3m2fn = 16,
    tb_kDLFloat4_e2m1fn = 17
} tb_DLDataTypeCode;

/* The last type code and device code this header knows. */
#define TB_DLPACK_LAST_TYPE_CODE tb_kDLFloat4_e2m1fn
#define TB_DLPACK_LAST_DEVICE_TYPE tb_kDLTrn

typedef struct {
    uint8_t code;   /* a tb_DLDataTypeCode */
    uint8_t bits;   /* of one lane */
    uint16_t lanes; /* > 1 for vector types */
} tb_DLDataType;

/* A strided view of memory; it manages nothing. */
typedef struct {
    void *data;           /* NULL allowed when the tensor has no elements */
    tb_DLDevice device;
    int32_t ndim;
    tb_DLDataType dtype;
    int64_t *shape;       /* ndim entries; NULL allowed when ndim == 0 */
    int64_t *strides;     /* in elements; NULL meant row-major before 1.2 */
    uint64_t byte_offset; /* from data to the first element */
} tb_DLTensor;

/* The legacy (pre-1.0) managed tensor: no version, no flags. The consumer
 * calls deleter(self) once, when it no longer needs the memory; the deleter
 * frees self too. It may be NULL. */
typedef struct tb_DLManagedTensor {
    tb_DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct tb_DLManagedTensor *self);
} tb_DLManagedTensor;

#define TB_DLPACK_FLAG_READ_ONLY (UINT64_C(1) << 0)
/* The producer made a copy: the consumer owns it alone until the deleter runs. */
#define TB_DLPACK_FLAG_IS_COPIED (UINT64_C(1) << 1)
/* A sub-byte type (fp6, fp4) is padded to one element a byte, not packed. */
#define TB_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2)
#define TB_DLPACK_KNOWN_FLAGS \
    (TB_DLPACK_FLAG_READ_ONLY | TB_DLPACK_FLAG_IS_COPIED | TB_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED)

/* The managed tensor of DLPack 1.x. version, manager_ctx and deleter come
 * first and stay put across major versions, so that a consumer that does not
 * know a major version can still call the deleter. */
typedef struct tb_DLManagedTensorVersioned {
    tb_DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct tb_DLManagedTensorVersioned *self);
    uint64_t flags;
    tb_DLTensor dl_tensor;
} tb_DLManagedTensorVersioned;

/* DLPack 1.3's C exchange API: a table of C functions that a Python tensor
 * type offers as its __dlpack_c_exchange_api__ attribute, a PyCapsule named
 * TB_DLPACK_EXCHANGE_API_NAME holding a pointer to the table, which lives
 * as long as the process. Every entry is called with the GIL held. A
 * Python object (PyObject *) is a void * here. */
#define TB_DLPACK_EXCHANGE_API_NAME "dlpack_exchange_api"
#define TB_DLPACK_EXCHANGE_API_ATTR "__dlpack_c_exchange_api__"

/* The part of the table every version keeps: its version, and the table of
 * an older version the producer also offers (NULL when none), which a
 * consumer that does not know this version may walk to. */
typedef struct tb_DLPackExchangeAPIHeader {
    tb_DLPackVersion version;
    struct tb_DLPackExchangeAPIHeader *prev_api;
} tb_DLPackExchangeAPIHeader;

/* The table of version 1.3. Each entry answers 0, or -1 with a Python
 * exception set (the allocator: calls set_error instead). */
typedef struct {
    tb_DLPackExchangeAPIHeader header;
    /* A new tensor of the producer's, laid out as prototype's dtype, ndim,
     * shape and device say. */
    int (*managed_tensor_allocator)(tb_DLTensor *prototype, tb_DLManagedTensorVersioned **out, void *error_ctx,
                                    void (*set_error)(void *error_ctx, const char *kind, const char *message));
    /* The managed tensor of a Python object of the type the table came
     * from: the consumer owes its deleter. No stream is synchronized. */
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, tb_DLManagedTensorVersioned **out);
    /* A new Python object of the producer's type over a managed tensor,
     * whose ownership it takes (on failure too). */
    int (*managed_tensor_to_py_object_no_sync)(tb_DLManagedTensorVersioned *tensor, void **out_py_object);
    /* A borrowed view, valid until the caller returns; may be NULL. */
    int (*dltensor_from_py_object_no_sync)(void *py_object, tb_DLTensor *out);
    /* The stream the producer works on for a device (NULL on the CPU). */
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_current_stream);
} tb_DLPackExchangeAPI;

/* The layout is the ABI: check it where it is declared. */
#ifdef __cplusplus
#define TB_DLPACK_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define TB_DLPACK_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

TB_DLPACK_ASSERT(sizeof(tb_DLPackVersion) == 8, "DLPackVersion is 8 bytes");
TB_DLPACK_ASSERT(sizeof(tb_DLDevice) == 8, "DLDevice is 8 bytes");
TB_DLPACK_ASSERT(sizeof(tb_DLDataType) == 4, "DLDataType is 4 bytes");
TB_DLPACK_ASSERT(offsetof(tb_DLDataType, bits) == 1 && offsetof(tb_DLDataType, lanes) == 2,
                 "DLDataType layout");

/* Absolute sizes and offsets hold where pointers are 64 bits. */
#if UINTPTR_MAX == UINT64_MAX
TB_DLPACK_ASSERT(sizeof(tb_DLTensor) == 48, "DLTensor is 48 bytes");
TB_DLPACK_ASSERT(offsetof(tb_DLTensor, data) == 0, "DLTensor.data");
TB_DLPACK_ASSERT(offsetof(tb_DLTensor, device) == 8, "DLTensor.device");
TB_DLPACK_ASSERT(offsetof(tb_DLTensor, ndim) == 16, "DLTensor.ndim");
TB_DLPACK_ASSERT(offsetof(tb_DLTensor, dtype) == 20, "DLTensor.dtype");
TB_DLPACK_ASSERT(offsetof(tb_DLTensor, shape) == 24, "DLTensor.shape");
TB_DLPACK_ASSERT(offsetof(tb_DLTensor, strides) == 32, "DLTensor.strides");
TB_DLPACK_ASSERT(offsetof(tb_DLTensor, byte_offset) == 40, "DLTensor.byte_offset");

TB_DLPACK_ASSERT(sizeof(tb_DLManagedTensor) == 64, "DLManagedTensor is 64 bytes");
TB_DLPACK_ASSERT(offsetof(tb_DLManagedTensor, dl_tensor) == 0, "DLManagedTensor.dl_tensor");
TB_DLPACK_ASSERT(offsetof(tb_DLManagedTensor, manager_ctx) == 48, "DLManagedTensor.manager_ctx");
TB_DLPACK_ASSERT(offsetof(tb_DLManagedTensor, deleter) == 56, "DLManagedTensor.deleter");

TB_DLPACK_ASSERT(sizeof(tb_DLManagedTensorVersioned) == 80, "DLManagedTensorVersioned is 80 bytes");
TB_DLPACK_ASSERT(offsetof(tb_DLManagedTensorVersioned, version) == 0, "DLManagedTensorVersioned.version");
TB_DLPACK_ASSERT(offsetof(tb_DLManagedTensorVersioned, manager_ctx) == 8, "DLManagedTensorVersioned.manager_ctx");
TB_DLPACK_ASSERT(offsetof(tb_DLManagedTensorVersioned, deleter) == 16, "DLManagedTensorVersioned.deleter");
TB_DLPACK_ASSERT(sizeof(tb_DLPackExchangeAPIHeader) == 16, "DLPackExchangeAPIHeader is 16 bytes");
TB_DLPACK_ASSERT(sizeof(tb_DLPackExchangeAPI) == 56, "DLPackExchangeAPI is 56 bytes");
TB_DLPACK_ASSERT(offsetof(tb_DLPackExchangeAPI, managed_tensor_from_py_object_no_sync) == 24,
                 "DLPackExchangeAPI.managed_tensor_from_py_object_no_sync");
TB_DLPACK_ASSERT(offsetof(tb_DLPackExchangeAPI, current_work_stream) == 48, "DLPackExchangeAPI.current_work_stream");
TB_DLPACK_ASSERT(offsetof(tb_DLManagedTensorVersioned, flags) == 24, "DLManagedTensorVersioned.flags");
TB_DLPACK_ASSERT(offsetof(tb_DLManagedTensorVersioned, dl_tensor) == 32, "DLManagedTensorVersioned.dl_tensor");
#endif

#endif
