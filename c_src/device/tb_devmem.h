/* Which memory a pointer must be, and whether a runtime's answer says it
 * is: the decisions of the pointer checks of from_blob and of DLPack
 * imports, apart from the runtime that answers (tb_runtime.c asks it).
 * Each decides by the device table's columns (tb_device.h: the runtime of
 * a device type, the check and runtime of a DLPack device code), never by
 * naming a device type or a runtime; messages name the runtime that was
 * asked ("CUDA device 0"). Pure C; unit-tested in c_test/test_cuda.c.
 *
 * DLPack devices (TB_DLPACK_DEVICES) and the device libtorch sees:
 *   kDLCPU          :cpu; refused when a runtime says device memory
 *   kDLCUDA         {:cuda, device_id}; the runtime must say device memory
 *                   of that device
 *   kDLCUDAHost     :cpu (page-locked host memory is host memory); refused only
 *                   when the runtime says device memory
 *   kDLCUDAManaged  {:cuda, device_id}: the device the producer named, where
 *                   libtorch runs its kernels; the runtime must say managed
 *                   memory. (The host may read managed memory too: view its
 *                   pointer with from_blob and device :cpu.) */
#ifndef TB_DEVMEM_H
#define TB_DEVMEM_H

#include <stddef.h>
#include <stdint.h>

#include "tb_device.h"

/* The runtime's answer about a pointer: type TB_MEM_UNKNOWN when it could
 * not tell, with its message in error when it answered with one. */
typedef struct {
    tb_mem_type type;
    int device;
    const char *error;
} tb_mem_answer;

/* "host", "page-locked host", "device", "managed" or "unknown". */
const char *tb_devmem_type_name(tb_mem_type type);

/* 1 when a runtime that sees device_count devices must be asked about
 * memory declared as a device (type, index): not for host memory where it
 * sees no device, nor for a device of its own that does not exist. */
int tb_devmem_needs_answer(int declared_type, int declared_index, int device_count);
/* from_blob: 1 when the memory may be viewed as the declared device, by
 * the answer of the runtime `asked` (TB_RUNTIME_*: the declared device's
 * own, or for host memory each runtime with devices); otherwise 0 and why.
 * `a` is ignored when no answer was needed. */
int tb_devmem_verdict(int declared_type, int declared_index, int asked, int device_count, const tb_mem_answer *a,
                      char *why, size_t why_size);

/* Where libtorch sees the memory of a DLPack device type (one that
 * tb_dlpack_check accepts). */
typedef struct {
    int type, index; /* our device type, and its index */
    int runtime;     /* its runtime (TB_RUNTIME_*): what libtorch must have */
    int checker;     /* the runtime that checks the pointer and orders the
                      * producer's stream (the DLPack row's) */
} tb_dl_placement;

void tb_devmem_dlpack_placement(int32_t dl_type, int32_t dl_id, tb_dl_placement *out);
int tb_devmem_dlpack_needs_answer(int32_t dl_type, int32_t dl_id, int device_count);
/* 1 when the memory may be imported as its DLPack device says, by the
 * answer of the runtime `asked` (the row's checker, or for host memory each
 * runtime with devices); otherwise 0 and why. */
int tb_devmem_dlpack_verdict(int32_t dl_type, int32_t dl_id, int asked, int device_count, const tb_mem_answer *a,
                             char *why, size_t why_size);

#endif
