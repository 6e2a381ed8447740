/* The CUDA runtime, when there is one. Built with TB_CUDA=1 (the default
 * where CUDA's headers are found), libcudart is opened at load with dlopen,
 * so the library loads, and answers, on machines with no CUDA, no driver or
 * no GPU. Built with TB_CUDA=0 there is no CUDA code at all. */
#ifndef TB_CUDA_H
#define TB_CUDA_H

#include <erl_nif.h>
#include <stdint.h>

#include "tb_term.h"

/* Uses the CUDA runtime already loaded in the process where there is one
 * (libtorch_cuda's), else opens one. */
void tb_cuda_load(void);
/* The file of the runtime in use, or NULL. */
const char *tb_cuda_runtime_path(void);

/* GPUs the runtime sees; 0 without a runtime, driver or device. */
int tb_cuda_device_count(void);

typedef enum { TB_MEM_UNKNOWN, TB_MEM_HOST, TB_MEM_PINNED_HOST, TB_MEM_DEVICE, TB_MEM_MANAGED } tb_mem_kind;

/* What the runtime knows of ptr (TB_MEM_UNKNOWN when it cannot tell; then
 * *error is the runtime's message when it answered with an error). */
tb_mem_kind tb_cuda_pointer_kind(uint64_t ptr, int *device, const char **error);

/* 0 and a message when ptr is not memory of the declared device. */
int tb_cuda_check_pointer(uint64_t ptr, const tb_device *declared, char *why, size_t why_size);

ERL_NIF_TERM tb_nif_cuda_info(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_cuda_synchronize(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
