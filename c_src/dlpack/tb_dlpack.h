/* DLPack export and import, and the capsule resource that owns one exported
 * managed tensor until it is consumed or collected. */
#ifndef TB_DLPACK_H
#define TB_DLPACK_H

#include <erl_nif.h>

#include "torch_shim.h"

int tb_dlpack_open_type(ErlNifEnv *env, ErlNifResourceFlags flags);

/* Exported managed tensors whose deleter has not run yet: in a capsule, or
 * consumed and held by a consumer. */
long tb_dlpack_live(void);

/* Imports with defer_release (foreign memory this VM holds, as Python's)
 * whose producer's deleter has not run yet: live, or queued on the release
 * thread. */
long tb_dlpack_deferred(void);

/* A new DLManagedTensorVersioned (or legacy DLManagedTensor) over the
 * tensor's memory, holding its own libtorch reference until its deleter
 * runs. NULL when out of memory or the scalar type has no dtype. */
void *tb_dlpack_export(tb_shim_tensor *handle, int versioned, int read_only);
/* An export's address is given out as an integer: one import by address
 * may take it (from_dlpack refuses any other address unless the caller
 * vouches for it). What it holds (versioned or legacy) is recorded with it:
 * an import reads it as that, and refuses to read it as the other. */
void tb_dlpack_hand_out(void *managed, int versioned);

#endif
