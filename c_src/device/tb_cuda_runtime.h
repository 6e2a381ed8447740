/* The CUDA runtime, when there is one. Built with TB_CUDA=1 (the default
 * where CUDA's headers are found), the runtime already loaded in the
 * process (libtorch_cuda's) is used, or libcudart is opened at load with
 * dlopen, so the library loads, and answers, on machines with no CUDA, no
 * driver or no GPU. Built with TB_CUDA=0 there is no CUDA runtime code at
 * all (libtorch's own stream calls stay reachable through the shim).
 *
 * The decisions are elsewhere and pure (tb_devmem: pointer checks and
 * DLPack devices; tb_stream: the stream contract; tb_cuda_handle: IPC
 * handles); this file asks the runtime, for the NIFs of CUDA and, as
 * tb_runtime_cuda, for every check the device table sends to CUDA. Its calls are listed once, in
 * tb_cuda_runtime.c. No BEAM here: terms are made by tb_cuda (the NIFs)
 * and tb_dlpack_device (DLPack devices and streams). */
#ifndef TB_CUDA_RUNTIME_H
#define TB_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "tb_cuda_ops.h"
#include "tb_devmem.h"
#include "torch_shim.h"

/* Uses the CUDA runtime already loaded in the process where there is one
 * (libtorch_cuda's), else opens one. */
void tb_cuda_load(void);
/* The file of the runtime in use, or NULL. */
const char *tb_cuda_runtime_path(void);

/* 1 when a runtime was loaded. */
int tb_cuda_runtime_loaded(void);

/* GPUs the runtime sees; 0 without a runtime, driver or device. */
int tb_cuda_device_count(void);

/* The runtime's calls and libtorch's stream calls (tb_cuda_ops.h); entries
 * are NULL where the runtime lacks the call, or there is none. */
const tb_cuda_ops *tb_cuda_ops_get(void);

/* What the runtime knows of ptr (TB_MEM_UNKNOWN when it cannot tell; then
 * *error is the runtime's message when it answered with an error). */
tb_mem_type tb_cuda_pointer_type(uint64_t ptr, int *device, const char **error);
/* The same, as an answer for tb_devmem's decisions. */
tb_mem_answer tb_cuda_ask(uint64_t ptr);

/* CUDA as a runtime of the device table, tb_runtime_cuda (tb_runtime_api.h),
 * is defined in tb_cuda_runtime.c: its devices, its answers, and the
 * stream contract over these calls. */

/* Why CUDA IPC cannot work in this build, process or machine; NULL when
 * it can. */
const char *tb_cuda_ipc_unavailable(void);
/* Live CUDA IPC mappings opened by this build (cuda_info's ipc_mappings). */
void tb_cuda_mappings_add(long delta);
long tb_cuda_mappings(void);

/* Waits for the work of a device; NULL, or the runtime's message. */
const char *tb_cuda_synchronize(int index);

#endif
