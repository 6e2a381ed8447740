#include "tb_bridge.h"

#include <stdatomic.h>

#include "tb_dlpack_exchange.h"
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

/* ---- DLPack 1.3's exchange API over terms (tensor_blob.h) ------------- */

static int exchange_from_term(ErlNifEnv *env, ERL_NIF_TERM term, tb_DLManagedTensorVersioned **out)
{
    return bridge_to_dlpack(env, term, 0, out);
}

static int exchange_dltensor(ErlNifEnv *env, ERL_NIF_TERM term, tb_DLTensor *out)
{
    if (atomic_load_explicit(&loaded, memory_order_acquire) <= 0)
        return TENSOR_BLOB_BRIDGE_RETIRED;
    tb_tensor *t = tb_tensor_get(env, term);
    if (!t)
        return TENSOR_BLOB_BRIDGE_NOT_A_TENSOR;
    tb_tensor_exported scratch;
    const tb_tensor_exported *x = tb_tensor_exported_of(t, &scratch);
    if (!x)
        return TENSOR_BLOB_BRIDGE_NO_MEMORY;
    if (x->read_only)
        return TENSOR_BLOB_BRIDGE_READ_ONLY_MEMORY;
    /* The TensorImpl's own sizes and strides: the term keeps it alive. */
    tb_dlpack_dltensor_of(x, (int64_t *)x->sizes, (int64_t *)x->strides, out);
    return TENSOR_BLOB_BRIDGE_OK;
}

static int exchange_to_term(ErlNifEnv *env, tb_DLManagedTensorVersioned *m, ERL_NIF_TERM *out)
{
    /* An export of ours coming back is claimed, as from_dlpack claims it.
     * No stream: the standard's no_sync. */
    tb_dlpack_stream none;
    tb_dlpack_stream_decode(env, tb_atoms.undefined, &none);
    tb_dlpack_import_how how = {.owned = 1, .claimed = tb_dlpack_claim((uintptr_t)m), .stream = &none};
    *out = tb_dlpack_import(env, m, 1, &how);
    return enif_has_pending_exception(env, NULL) ? -1 : 0;
}

static int exchange_stream(tb_DLDeviceType device_type, int32_t device_id, void **out)
{
    (void)device_type;
    (void)device_id;
    *out = NULL;
    return 0;
}

static int device_of_dlpack(tb_DLDevice device, int *type, int *index)
{
    for (*type = 0; tb_device_valid(*type); (*type)++)
        if (tb_device_dlpack_type(*type) == device.device_type) {
            *index = tb_device_indexed(*type) ? device.device_id : 0;
            return 1;
        }
    return 0;
}

/* Zeros of the prototype's dtype and shape on its device, exported. */
static int exchange_allocate(tb_DLTensor *p, tb_DLManagedTensorVersioned **out, void *ctx,
                             void (*set_error)(void *ctx, const char *kind, const char *message))
{
    tb_dtype_id dtype;
    int type, index;
    if (!tb_dtype_from_dlpack(p->dtype.code, p->dtype.bits, p->dtype.lanes, &dtype) ||
        !tb_shim_has_scalar_type(tb_dtypes[dtype].torch_scalar_type))
        return set_error(ctx, "bad_dtype", "the prototype's DLPack dtype names no dtype this build holds"), -1;
    if (!device_of_dlpack(p->device, &type, &index) || !tb_shim_device_built(tb_device_torch_type(type)))
        return set_error(ctx, "no_device", "the prototype's device is none this build serves"), -1;
    if (p->ndim < 0 || p->ndim > TB_MAX_DIMS || (p->ndim > 0 && !p->shape))
        return set_error(ctx, "bad_shape", "the prototype's ndim or shape is out of range"), -1;
    for (int i = 0; i < p->ndim; i++)
        if (p->shape[i] < 0)
            return set_error(ctx, "bad_shape", "the prototype's shape has a negative size"), -1;
    tb_shim_out host, moved = {0};
    int ok = tb_shim_zeros(p->ndim, p->shape, tb_dtypes[dtype].torch_scalar_type, &host.handle, &host.err);
    if (ok && type != TB_DEVICE_CPU) {
        ok = tb_shim_to_device(host.handle, tb_device_torch_type(type), index, &moved.handle, &moved.err);
        tb_shim_release(host.handle);
        host = moved;
    }
    if (!ok)
        return set_error(ctx, "no_memory", host.err.message), -1;
    *out = tb_dlpack_export(host.handle, 1, 0);
    tb_shim_release(host.handle);
    if (!*out)
        return set_error(ctx, "no_memory", "out of memory for the managed tensor"), -1;
    tb_dlpack_hand_out(*out, 1);
    return 0;
}

static const tensor_blob_exchange_api exchange = {
    .header = {.version = {.major = 1, .minor = 3}, .prev_api = NULL},
    .managed_tensor_allocator = exchange_allocate,
    .managed_tensor_from_term_no_sync = exchange_from_term,
    .managed_tensor_to_term_no_sync = exchange_to_term,
    .dltensor_from_term_no_sync = exchange_dltensor,
    .current_work_stream = exchange_stream,
};

static const tensor_blob_bridge bridge = {
    .version = TENSOR_BLOB_BRIDGE_VERSION,
    .size = sizeof(tensor_blob_bridge),
    .to_dlpack = bridge_to_dlpack,
    .exchange = &exchange,
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
