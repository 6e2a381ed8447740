/* Our DLPack declarations (priv/include/tensor_blob_dlpack.h) against the dlpack.h shipped
 * with the linked libtorch: same sizes, same offsets, same codes, for what
 * that header declares (the legacy layout always; the versioned one when it
 * is DLPack 1.x). Both headers in one file: ours is prefixed for this. */
#include <ATen/dlpack.h>

#include "tensor_blob_dlpack.h"

#include <stddef.h>
#include <stdio.h>

static int checks;
static int failures;

#define SAME(ours, theirs)                                                                        \
    do {                                                                                          \
        long a_ = (long)(ours), b_ = (long)(theirs);                                              \
        checks++;                                                                                 \
        if (a_ != b_) {                                                                           \
            failures++;                                                                           \
            printf("%s:%d: %s = %ld but %s = %ld\n", __FILE__, __LINE__, #ours, a_, #theirs, b_); \
        }                                                                                         \
    } while (0)

#define SAME_FIELD(ours, theirs, field)                                 \
    do {                                                                \
        SAME(offsetof(ours, field), offsetof(theirs, field));           \
        SAME(sizeof(((ours *)0)->field), sizeof(((theirs *)0)->field)); \
    } while (0)

int main(void)
{
    SAME(sizeof(tb_DLDevice), sizeof(DLDevice));
    SAME_FIELD(tb_DLDevice, DLDevice, device_type);
    SAME_FIELD(tb_DLDevice, DLDevice, device_id);

    SAME(sizeof(tb_DLDataType), sizeof(DLDataType));
    SAME_FIELD(tb_DLDataType, DLDataType, code);
    SAME_FIELD(tb_DLDataType, DLDataType, bits);
    SAME_FIELD(tb_DLDataType, DLDataType, lanes);

    SAME(sizeof(tb_DLTensor), sizeof(DLTensor));
    SAME_FIELD(tb_DLTensor, DLTensor, data);
    SAME_FIELD(tb_DLTensor, DLTensor, device);
    SAME_FIELD(tb_DLTensor, DLTensor, ndim);
    SAME_FIELD(tb_DLTensor, DLTensor, dtype);
    SAME_FIELD(tb_DLTensor, DLTensor, shape);
    SAME_FIELD(tb_DLTensor, DLTensor, strides);
    SAME_FIELD(tb_DLTensor, DLTensor, byte_offset);

    SAME(sizeof(tb_DLManagedTensor), sizeof(DLManagedTensor));
    SAME_FIELD(tb_DLManagedTensor, DLManagedTensor, dl_tensor);
    SAME_FIELD(tb_DLManagedTensor, DLManagedTensor, manager_ctx);
    SAME_FIELD(tb_DLManagedTensor, DLManagedTensor, deleter);

    SAME(tb_kDLCPU, kDLCPU);
    SAME(tb_kDLCUDA, kDLCUDA);
    SAME(tb_kDLCUDAHost, kDLCUDAHost);
    SAME(tb_kDLOpenCL, kDLOpenCL);
    SAME(tb_kDLVulkan, kDLVulkan);
    SAME(tb_kDLMetal, kDLMetal);
    SAME(tb_kDLVPI, kDLVPI);
    SAME(tb_kDLROCM, kDLROCM);
    SAME(tb_kDLROCMHost, kDLROCMHost);
    SAME(tb_kDLExtDev, kDLExtDev);
    SAME(tb_kDLCUDAManaged, kDLCUDAManaged);
    SAME(tb_kDLInt, kDLInt);
    SAME(tb_kDLUInt, kDLUInt);
    SAME(tb_kDLFloat, kDLFloat);
    SAME(tb_kDLOpaqueHandle, kDLOpaqueHandle);
    SAME(tb_kDLBfloat, kDLBfloat);
    SAME(tb_kDLComplex, kDLComplex);

#ifdef DLPACK_MAJOR_VERSION
    /* A DLPack 1.x header (newer libtorch). */
    SAME(TB_DLPACK_MAJOR_VERSION, DLPACK_MAJOR_VERSION);
    SAME(sizeof(tb_DLPackVersion), sizeof(DLPackVersion));
    SAME_FIELD(tb_DLPackVersion, DLPackVersion, major);
    SAME_FIELD(tb_DLPackVersion, DLPackVersion, minor);
    SAME(sizeof(tb_DLManagedTensorVersioned), sizeof(DLManagedTensorVersioned));
    SAME_FIELD(tb_DLManagedTensorVersioned, DLManagedTensorVersioned, version);
    SAME_FIELD(tb_DLManagedTensorVersioned, DLManagedTensorVersioned, manager_ctx);
    SAME_FIELD(tb_DLManagedTensorVersioned, DLManagedTensorVersioned, deleter);
    SAME_FIELD(tb_DLManagedTensorVersioned, DLManagedTensorVersioned, flags);
    SAME_FIELD(tb_DLManagedTensorVersioned, DLManagedTensorVersioned, dl_tensor);
    SAME(tb_kDLOneAPI, kDLOneAPI);
    SAME(tb_kDLWebGPU, kDLWebGPU);
    SAME(tb_kDLHexagon, kDLHexagon);
    SAME(tb_kDLBool, kDLBool);
    SAME(TB_DLPACK_FLAG_READ_ONLY, DLPACK_FLAG_BITMASK_READ_ONLY);
    SAME(TB_DLPACK_FLAG_IS_COPIED, DLPACK_FLAG_BITMASK_IS_COPIED);
#if DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION >= 1
    SAME(tb_kDLMAIA, kDLMAIA);
    SAME(tb_kDLFloat8_e4m3fn, kDLFloat8_e4m3fn);
    SAME(tb_kDLFloat8_e5m2, kDLFloat8_e5m2);
    SAME(tb_kDLFloat4_e2m1fn, kDLFloat4_e2m1fn);
    SAME(TB_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
#endif
#if DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION >= 3
    /* The C exchange API (DLPack 1.3). */
    SAME(sizeof(tb_DLPackExchangeAPIHeader), sizeof(DLPackExchangeAPIHeader));
    SAME_FIELD(tb_DLPackExchangeAPIHeader, DLPackExchangeAPIHeader, version);
    SAME_FIELD(tb_DLPackExchangeAPIHeader, DLPackExchangeAPIHeader, prev_api);
    SAME(sizeof(tb_DLPackExchangeAPI), sizeof(DLPackExchangeAPI));
    SAME_FIELD(tb_DLPackExchangeAPI, DLPackExchangeAPI, header);
    SAME_FIELD(tb_DLPackExchangeAPI, DLPackExchangeAPI, managed_tensor_allocator);
    SAME_FIELD(tb_DLPackExchangeAPI, DLPackExchangeAPI, managed_tensor_from_py_object_no_sync);
    SAME_FIELD(tb_DLPackExchangeAPI, DLPackExchangeAPI, managed_tensor_to_py_object_no_sync);
    SAME_FIELD(tb_DLPackExchangeAPI, DLPackExchangeAPI, dltensor_from_py_object_no_sync);
    SAME_FIELD(tb_DLPackExchangeAPI, DLPackExchangeAPI, current_work_stream);
#endif
    const char *which = "DLPack 1.x";
#else
    const char *which = "legacy DLPack (0.x)";
#endif

    printf("c_test_dlpack_abi: %d checks against libtorch's %s header, %d failures\n", checks, which, failures);
    return failures == 0 ? 0 : 1;
}
