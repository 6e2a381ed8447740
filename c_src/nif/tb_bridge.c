#include "tb_bridge.h"

#include <stdatomic.h>

#include "tb_dlpack_export.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tensor_blob.h"

/* Loads of this build less its unloads. A build loaded twice from one file
 * (an upgrade to the same library) shares it, so it counts both. */
static atomic_int loaded;

/* Runs on the calling NIF's thread, inside its call. The export holds its
 * own libtorch reference, so the caller may keep it past the call and the
 * term's life. */
static int export_tensor(tb_tensor *t, uint32_t flags, tb_DLManagedTensorVersioned **out)
{
    tb_tensor_exported scratch;
    const tb_tensor_exported *x = tb_tensor_exported_of(t, &scratch);
    if (!x)
        return TENSOR_BLOB_BRIDGE_NO_MEMORY;
    int read_only = (flags & TENSOR_BLOB_BRIDGE_READ_ONLY) || x->read_only;
    tb_DLManagedTensorVersioned *m = tb_dlpack_export_of(t->handle, x, 1, read_only);
    if (!m)
        return TENSOR_BLOB_BRIDGE_NO_MEMORY;
    /* Its address may come back to from_dlpack, which takes only ours. */
    tb_dlpack_hand_out(m, 1);
    *out = m;
    return TENSOR_BLOB_BRIDGE_OK;
}

/* The table's function: the tensor found by this build's resource types,
 * opened once at load, and the atoms made then. */
static int bridge_to_dlpack(ErlNifEnv *env, ERL_NIF_TERM term, uint32_t flags, tb_DLManagedTensorVersioned **out)
{
    /* After the last unload this build's types may be gone: never compare
     * a term's type with them then. */
    if (atomic_load_explicit(&loaded, memory_order_acquire) <= 0)
        return TENSOR_BLOB_BRIDGE_RETIRED;
    tb_tensor *t = tb_tensor_get(env, term);
    if (!t)
        return TENSOR_BLOB_BRIDGE_NOT_A_TENSOR;
    return export_tensor(t, flags, out);
}

static const tensor_blob_bridge bridge = {
    .version = TENSOR_BLOB_BRIDGE_VERSION,
    .size = sizeof(tensor_blob_bridge),
    .to_dlpack = bridge_to_dlpack,
};

void tb_bridge_dyncall(ErlNifEnv *env, void *obj, void *call_data)
{
    (void)env;
    tensor_blob_bridge_call *call = call_data;
    /* The first layout ends before `bridge`: never written then. */
    if (call->version != TENSOR_BLOB_BRIDGE_VERSION && call->version != TENSOR_BLOB_BRIDGE_VERSION_FIRST) {
        call->status = TENSOR_BLOB_BRIDGE_BAD_VERSION;
        return;
    }
    call->tensor = NULL;
    call->status = export_tensor(obj, call->flags, &call->tensor);
    if (call->version == TENSOR_BLOB_BRIDGE_VERSION)
        call->bridge = &bridge;
}

void tb_bridge_load(void)
{
    atomic_fetch_add_explicit(&loaded, 1, memory_order_release);
}

void tb_bridge_unload(void)
{
    atomic_fetch_sub_explicit(&loaded, 1, memory_order_release);
}
