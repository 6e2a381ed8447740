/* Binaries and tensors sharing memory, both ways, without a copy. The
 * guard that keeps write! off memory a binary shows is tb_storage's. */
#ifndef TB_BINARY_H
#define TB_BINARY_H

#include <erl_nif.h>

int tb_binary_open_type(ErlNifEnv *env, ErlNifResourceFlags flags);

#endif
