/* Binaries and tensors sharing memory, both ways, without a copy. The
 * guard that keeps write! off memory a binary shows is tb_storage's. */
#ifndef TB_BINARY_H
#define TB_BINARY_H

#include <erl_nif.h>

int tb_binary_open_type(ErlNifEnv *env, ErlNifResourceFlags flags);

/* from_binary_view(Binary, Dtype, Shape, CopyIfMisaligned) -> a read-only
 * tensor pinning the binary; bytes not aligned to the element size raise,
 * or with CopyIfMisaligned are copied into a new (owned) tensor. */
ERL_NIF_TERM tb_nif_from_binary_view(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* to_binary_view(Tensor, Unguarded, IfNeeded) -> a binary over a contiguous
 * CPU tensor's memory; not of a shared-memory region unless Unguarded; with
 * IfNeeded, false where no view can be made (the caller copies instead) */
ERL_NIF_TERM tb_nif_to_binary_view(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
