/* The tensor resource's dynamic call: the tensor_blob side of
 * priv/include/tensor_blob.h. */
#ifndef TB_BRIDGE_H
#define TB_BRIDGE_H

#include <erl_nif.h>

/* obj is a tb_tensor; call_data a tensor_blob_bridge_call. */
void tb_bridge_dyncall(ErlNifEnv *env, void *obj, void *call_data);

#endif
