/* The CUDA runtime, when there is one. Built with TB_CUDA=1 (the default
 * where CUDA's headers are found), the runtime already loaded in the
 * process (libtorch_cuda's) is used, or libcudart is opened at load with
 * dlopen, so the library loads, and answers, on machines with no CUDA, no
 * driver or no GPU. Built with TB_CUDA=0 there is no CUDA runtime code at
 * all (libtorch's own stream calls stay reachable through the shim).
 *
 * The decisions are elsewhere and pure (tb_devmem: pointer checks and
 * DLPack devices; tb_stream: the stream contract; tb_cuda_handle: IPC
 * handles); this file asks the runtime and turns answers into terms. */
#ifndef TB_CUDA_H
#define TB_CUDA_H

#include <erl_nif.h>
#include <stdint.h>

#include "tb_cuda_ops.h"
#include "tb_devmem.h"
#include "tb_term.h"
#include "torch_shim.h"

/* Uses the CUDA runtime already loaded in the process where there is one
 * (libtorch_cuda's), else opens one. */
void tb_cuda_load(void);
/* The file of the runtime in use, or NULL. */
const char *tb_cuda_runtime_path(void);

/* GPUs the runtime sees; 0 without a runtime, driver or device. */
int tb_cuda_device_count(void);

/* The runtime's calls and libtorch's stream calls (tb_cuda_ops.h); entries
 * are NULL where the runtime lacks the call, or there is none. */
const tb_cuda_ops *tb_cuda_ops_get(void);

/* What the runtime knows of ptr (TB_MEM_UNKNOWN when it cannot tell; then
 * *error is the runtime's message when it answered with an error). */
tb_mem_type tb_cuda_pointer_type(uint64_t ptr, int *device, const char **error);

/* 0 and a message when ptr is not memory of the declared device. */
int tb_cuda_check_pointer(uint64_t ptr, const tb_device *declared, char *why, size_t why_size);

/* Why CUDA IPC cannot work in this build, process or machine; NULL when
 * it can. */
const char *tb_cuda_ipc_unavailable(void);
/* Live CUDA IPC mappings opened by this build (cuda_info's ipc_mappings). */
void tb_cuda_mappings_add(long delta);

/* ---- DLPack ------------------------------------------------------------ */

/* The stream contract of an export of the tensor `info` describes (see
 * tb_stream.h): `stream` is undefined or an integer as __dlpack__ takes it.
 * A CPU tensor takes no stream. 0 with *exc set when refused or failed. */
int tb_cuda_dlpack_export_stream(ErlNifEnv *env, const tb_shim_info *info, ERL_NIF_TERM stream, ERL_NIF_TERM *exc);

/* An import of a DLPack tensor on device (dl_type, dl_id) whose `bytes`
 * bytes start at ptr: the device libtorch sees it on (*device), the check
 * of the pointer by the runtime, and the wait for the producer's `stream`
 * (undefined, or an integer). 0 with *exc set when refused, its message
 * ending with `suffix`. */
int tb_cuda_dlpack_import(ErlNifEnv *env, int32_t dl_type, int32_t dl_id, uint64_t ptr, uint64_t bytes,
                          ERL_NIF_TERM stream, const char *suffix, tb_device *device, ERL_NIF_TERM *exc);

/* The device libtorch sees a DLPack device as (cpu or {cuda, I}); sets
 * *device_type to the DLPack type's name (cpu, cuda, cuda_host,
 * cuda_managed). */
ERL_NIF_TERM tb_cuda_dlpack_device(ErlNifEnv *env, int32_t dl_type, int32_t dl_id, ERL_NIF_TERM *device_type);

ERL_NIF_TERM tb_nif_cuda_info(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_cuda_synchronize(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* cuda_memory(Ptr) -> cpu | cuda_host | cuda | cuda_managed | unknown */
ERL_NIF_TERM tb_nif_cuda_memory(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
