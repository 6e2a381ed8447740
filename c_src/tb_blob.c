#include "tb_blob.h"

#include "tb_cuda.h"

#include "tb_args.h"
#include "tb_nif.h"
#include "tb_pin.h"
#include "tb_spec.h"
#include "tb_tensor.h"
#include "torch_shim.h"

ERL_NIF_TERM tb_nif_to_blob(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_tensor *t = tb_tensor_get(env, argv[0]);
    if (!t)
        return tb_raise_badarg(env, "tensor: expected a tensor, got %T", argv[0]);
    tb_shim_info info;
    tb_shim_info_of(t->handle, &info);
    tb_dtype_id id;
    if (!tb_dtype_of_scalar_type(info.scalar_type, &id))
        return tb_raise_error(env, "to_blob: libtorch scalar type %d has no dtype here", info.scalar_type);

    tb_layout l;
    l.ptr = (uint64_t)(uintptr_t)info.data;
    l.element_size = tb_dtypes[id].element_size;
    l.ndim = info.ndim;
    for (int i = 0; i < info.ndim && i < TB_MAX_DIMS; i++) {
        l.shape[i] = info.sizes[i];
        l.strides[i] = info.strides[i];
    }
    tb_spec_result r = tb_layout_check(&l);

    /* Keys in term order ('__struct__' first when present): the map is
     * built without sorting, which is most of the cost of to_blob. */
    ERL_NIF_TERM keys[10] = {tb_atoms.struct_, tb_atoms.alignment, tb_atoms.byte_size, tb_atoms.device, tb_atoms.dtype,
                            tb_atoms.element_size, tb_atoms.owner, tb_atoms.ptr, tb_atoms.shape, tb_atoms.strides};
    ERL_NIF_TERM values[10] = {
        argv[2],
        enif_make_uint64(env, tb_pointer_alignment(l.ptr)),
        enif_make_uint64(env, r.byte_size),
        tb_make_device(env, info.device_type, info.device_index),
        tb_atoms.dtypes[id],
        enif_make_uint(env, (unsigned)l.element_size),
        argv[1],
        enif_make_uint64(env, l.ptr),
        tb_make_shape(env, info.ndim, info.sizes),
        tb_make_strides(env, info.ndim, info.strides),
    };
    int tagged = argv[2] != tb_atoms.undefined;
    ERL_NIF_TERM map;
    if (!enif_make_map_from_arrays(env, keys + !tagged, values + !tagged, 9 + tagged, &map))
        return tb_raise_error(env, "to_blob: could not build the blob map");
    return map;
}

/* A required key of the spec map. */
static int get_key(ErlNifEnv *env, ERL_NIF_TERM spec, ERL_NIF_TERM key, ERL_NIF_TERM *value, ERL_NIF_TERM *exc)
{
    if (enif_get_map_value(env, spec, key, value))
        return 1;
    *exc = tb_raise_badarg(env, "%T: missing key in blob spec %T", key, spec);
    return 0;
}

/* An optional key: absent, nil and undefined all mean "use the default". */
static int get_optional_key(ErlNifEnv *env, ERL_NIF_TERM spec, ERL_NIF_TERM key, ERL_NIF_TERM *value)
{
    return enif_get_map_value(env, spec, key, value) && *value != tb_atoms.nil && *value != tb_atoms.undefined;
}

/* The memory a binary owner holds. */
static int binary_extent(ErlNifEnv *env, ERL_NIF_TERM owner, uint64_t *base, uint64_t *size)
{
    ErlNifBinary bin;
    if (!enif_inspect_binary(env, owner, &bin))
        return 0;
    *base = (uint64_t)(uintptr_t)bin.data;
    *size = bin.size;
    return 1;
}

static ERL_NIF_TERM outside_owner(ErlNifEnv *env, const tb_layout *l, uint64_t byte_size, uint64_t base,
                                  uint64_t size)
{
    return tb_raise_badarg(env, "ptr: [%lu, %lu + %lu) lies outside the owner's memory [%lu, %lu + %lu)",
                           (unsigned long)l->ptr, (unsigned long)l->ptr, (unsigned long)byte_size,
                           (unsigned long)base, (unsigned long)base, (unsigned long)size);
}

ERL_NIF_TERM tb_nif_from_blob(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ERL_NIF_TERM spec = argv[0], exc, value;
    if (!enif_is_map(env, spec))
        return tb_raise_badarg(env, "spec: expected a map with ptr, shape and dtype, got %T", spec);

    tb_layout l;
    tb_dtype_id dtype;
    tb_device device = {TB_DEVICE_CPU, 0};
    ErlNifUInt64 ptr;

    if (!get_key(env, spec, tb_atoms.ptr, &value, &exc))
        return exc;
    if (!enif_get_uint64(env, value, &ptr))
        return tb_raise_badarg(env, "ptr: expected a non-negative integer address, got %T", value);
    l.ptr = ptr;
    if (!get_key(env, spec, tb_atoms.shape, &value, &exc) ||
        !tb_get_shape(env, value, "shape", &l.ndim, l.shape, &exc))
        return exc;
    if (!get_key(env, spec, tb_atoms.dtype, &value, &exc) || !tb_get_dtype(env, value, "dtype", &dtype, &exc))
        return exc;
    l.element_size = tb_dtypes[dtype].element_size;
    if (get_optional_key(env, spec, tb_atoms.strides, &value)) {
        if (!tb_get_strides(env, value, "strides", l.ndim, l.strides, &exc))
            return exc;
    } else if (!tb_row_major_strides(l.ndim, l.shape, l.strides)) {
        return tb_raise_badarg(env, "shape: the number of elements overflows 64 bits in %T",
                               tb_make_shape(env, l.ndim, l.shape));
    }
    if (get_optional_key(env, spec, tb_atoms.device, &value) &&
        !tb_get_device(env, value, "device", &device, &exc))
        return exc;

    tb_spec_result r = tb_layout_check(&l);
    switch (r.status) {
    case TB_SPEC_OK:
        break;
    case TB_SPEC_NULL_POINTER:
    case TB_SPEC_MISALIGNED:
        return tb_raise_badarg(env, "ptr: %s (ptr %lu, dtype %s, element size %u)", tb_spec_status_text(r.status),
                               (unsigned long)l.ptr, tb_dtypes[dtype].name, (unsigned)l.element_size);
    case TB_SPEC_NEGATIVE_STRIDE:
    case TB_SPEC_EXTENT_OVERFLOW:
        return tb_raise_badarg(env, "strides: %s for shape %T and strides %T", tb_spec_status_text(r.status),
                               tb_make_shape(env, l.ndim, l.shape), tb_make_strides(env, l.ndim, l.strides));
    default:
        return tb_raise_badarg(env, "shape: %s in %T", tb_spec_status_text(r.status),
                               tb_make_shape(env, l.ndim, l.shape));
    }
    if (device.type == TB_DEVICE_CUDA && !tb_shim_cuda_built())
        return tb_raise_error(env, "device %T: this libtorch was built without CUDA, so CUDA memory cannot be "
                                   "viewed (never as CPU memory); TensorBlob.CUDA.info/1 reads its metadata",
                              tb_make_device(env, device.type, device.index));
    char why[160];
    if (r.byte_size > 0 && !tb_cuda_check_pointer(l.ptr, &device, why, sizeof why))
        return tb_raise_badarg(env, "ptr: %s (the CUDA runtime says so)", why);

    /* The storage deleter's context: a pin, or nothing for an unpinned view.
     * An empty view reads no byte, so its pointer need not lie in the owner. */
    void *ctx = NULL;
    void (*deleter)(void *) = tb_pin_none;
    if (argv[2] == tb_atoms.true_) {
        uint64_t base, size;
        tb_tensor *owner = tb_tensor_get_any(env, argv[1]);
        if (owner) {
            tb_shim_info info;
            tb_shim_info_of(owner->handle, &info);
            base = (uint64_t)(uintptr_t)info.storage_data;
            size = info.storage_bytes;
            if (info.device_type != device.type ||
                (r.byte_size > 0 && !tb_extent_inside(l.ptr, r.byte_size, base, size)))
                return outside_owner(env, &l, r.byte_size, base, size);
            tb_pin_keep_resource(owner);
            ctx = owner;
            /* A view of read-only memory is read-only too. */
            deleter = tb_tensor_info_read_only(&info) ? tb_pin_release_resource_read_only : tb_pin_release_resource;
        } else {
            tb_pin *pin = tb_pin_new(argv[1]);
            if (!pin)
                return tb_raise_error(env, "from_blob: out of memory pinning the owner");
            /* Check the pinned copy: a small binary is copied, not shared,
             * and then no pointer into the caller's copy is covered. */
            int binary = binary_extent(pin->env, pin->owner, &base, &size);
            if (binary && (device.type != TB_DEVICE_CPU ||
                           (r.byte_size > 0 && !tb_extent_inside(l.ptr, r.byte_size, base, size)))) {
                tb_pin_release(pin);
                return outside_owner(env, &l, r.byte_size, base, size);
            }
            ctx = pin;
            /* A binary is immutable: a view of its bytes is read-only. */
            deleter = binary ? tb_pin_release_read_only : tb_pin_release;
        }
    }

    tb_shim_tensor *h;
    tb_shim_error err;
    /* The shim owns the pin from here: its deleter runs when the storage dies. */
    if (!tb_shim_from_blob((void *)(uintptr_t)l.ptr, l.ndim, l.shape, l.strides, tb_dtypes[dtype].torch_scalar_type,
                           device.type, device.index, ctx, deleter, &h, &err))
        return tb_raise_error(env, "from_blob: %s", err.message);
    return tb_tensor_make(env, h);
}
