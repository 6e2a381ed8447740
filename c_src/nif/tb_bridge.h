/* The door of priv/include/tensor_blob.h for other NIF libraries: the
 * tensor resource's dynamic call, which finds this build, and this
 * build's table of functions, which the callers keep. */
#ifndef TB_BRIDGE_H
#define TB_BRIDGE_H

#include <erl_nif.h>

/* obj is a tb_tensor; call_data a tensor_blob_bridge_call. */
void tb_bridge_dyncall(ErlNifEnv *env, void *obj, void *call_data);

/* This build loaded (or upgraded to), and its code purged: its table
 * serves between the two, and answers RETIRED after the last unload, so
 * that callers look the current build up again. */
void tb_bridge_load(void);
void tb_bridge_unload(void);

#endif
