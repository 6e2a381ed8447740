/* Binaries and tensors sharing memory, both ways, without a copy; and the
 * guard that keeps write! off memory a binary shows. */
#ifndef TB_BINARY_H
#define TB_BINARY_H

#include <erl_nif.h>
#include <stdint.h>

#include "torch_shim.h"

/* A byte range linked into the registry while it is in use. */
typedef struct tb_range {
    struct tb_range *prev, *next;
    uintptr_t lo, hi; /* [lo, hi) */
} tb_range;

typedef tb_range tb_write_guard;

/* The registry lives across a hot reload: load makes it, upgrade passes
 * the old one on (priv_data), so binaries made by the old code stay known. */
int tb_binary_load(ErlNifEnv *env, ErlNifResourceFlags flags, void **priv, void *old_priv);

/* Brackets an in-place write of the tensor's memory. begin returns 0, and
 * registers nothing, when a binary made by to_binary(copy: false) overlaps. */
int tb_binary_write_begin(tb_write_guard *guard, const tb_shim_info *info);
void tb_binary_write_end(tb_write_guard *guard);

/* Binary views made by to_binary_view and not yet garbage-collected. */
long tb_binary_live(void);

/* from_binary_view(Binary, Dtype, Shape, CopyIfMisaligned) -> a read-only
 * tensor pinning the binary; bytes not aligned to the element size raise,
 * or with CopyIfMisaligned are copied into a new (owned) tensor. */
ERL_NIF_TERM tb_nif_from_binary_view(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* to_binary_view(Tensor) -> a binary over a contiguous CPU tensor's memory */
ERL_NIF_TERM tb_nif_to_binary_view(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
