#include "tb_bridge.h"

#include "tb_dlpack_export.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tensor_blob.h"

/* Runs on the calling NIF's thread, inside its call. The export holds its
 * own libtorch reference, so the caller may keep it past the call and the
 * term's life. */
void tb_bridge_dyncall(ErlNifEnv *env, void *obj, void *call_data)
{
    (void)env;
    tb_tensor *t = obj;
    tensor_blob_bridge_call *call = call_data;
    if (call->version != TENSOR_BLOB_BRIDGE_VERSION) {
        call->status = TENSOR_BLOB_BRIDGE_BAD_VERSION;
        return;
    }
    tb_shim_info info;
    tb_shim_info_of(t->handle, &info);
    int read_only = (call->flags & TENSOR_BLOB_BRIDGE_READ_ONLY) || tb_storage_read_only(&info);
    call->tensor = tb_dlpack_export(t->handle, 1, read_only);
    if (call->tensor)
        tb_dlpack_hand_out(call->tensor, 1);
    call->status = call->tensor ? TENSOR_BLOB_BRIDGE_OK : TENSOR_BLOB_BRIDGE_NO_MEMORY;
}
