/* The CUDA NIFs: cuda_info, cuda_synchronize, cuda_memory, over the
 * runtime (tb_cuda_runtime). */
#ifndef TB_CUDA_H
#define TB_CUDA_H

#include <erl_nif.h>

ERL_NIF_TERM tb_nif_cuda_info(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_cuda_synchronize(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* cuda_memory(Ptr) -> cpu | cuda_host | cuda | cuda_managed | unknown */
ERL_NIF_TERM tb_nif_cuda_memory(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
