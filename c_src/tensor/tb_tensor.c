#include "tb_tensor.h"

#include <string.h>

#include "tb_count.h"
#include "tb_rtype.h"
#include "tb_runtime.h"

static tb_rtype tensor_type;

static void tensor_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    tb_tensor *t = obj;
    if (t->handle) {
        /* May free a storage, whose release is queued if one runs already. */
        tb_shim_release(t->handle);
        t->handle = NULL;
        tb_count_add(&tb_library_state->tensors, -1);
    }
}

/* A view pinning this tensor is gone: drop its reference. */
static void release_as_owner(tb_storage *s)
{
    tb_tensor *t = s->flags & TB_STORAGE_READ_ONLY ? (tb_tensor *)((char *)s - offsetof(tb_tensor, as_owner.read_only))
                                                   : (tb_tensor *)((char *)s - offsetof(tb_tensor, as_owner.writable));
    enif_release_resource(t);
    tb_count_add(&tb_library_state->pins, -1);
}

int tb_tensor_open_type(ErlNifEnv *env, ErlNifResourceFlags flags, ErlNifResourceDynCall *dyncall)
{
    /* dyncall is the entry of priv/include/tensor_blob.h (the C bridge): other NIF
     * libraries reach it with enif_dynamic_resource_call. */
    ErlNifResourceTypeInit init = {.dtor = tensor_dtor, .members = 4, .dyncall = dyncall};
    return tb_rtype_open(env, "tensor_blob_tensor", &init, flags, &tensor_type);
}

int tb_tensor_make(ErlNifEnv *env, tb_shim_tensor *handle, ERL_NIF_TERM *out, ERL_NIF_TERM *exc)
{
    tb_tensor *t = tb_rtype_alloc(&tensor_type, sizeof *t);
    if (!t) {
        tb_shim_release(handle);
        *exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "out of memory allocating a tensor resource");
        return 0;
    }
    t->handle = handle;
    tb_once_init(&t->exported_once);
    /* One header for every view that pins this tensor: asked of nothing. */
    tb_storage_init(&t->as_owner.writable, TB_MEMORY_PINNED, TB_STORAGE_ASKED, release_as_owner);
    tb_storage_init(&t->as_owner.read_only, TB_MEMORY_PINNED, TB_STORAGE_READ_ONLY | TB_STORAGE_ASKED,
                    release_as_owner);
    tb_count_add(&tb_library_state->tensors, 1);
    *out = enif_make_resource(env, t);
    enif_release_resource(t);
    return 1;
}

ERL_NIF_TERM tb_tensor_return(ErlNifEnv *env, tb_shim_tensor *handle)
{
    ERL_NIF_TERM term, exc;
    if (!tb_tensor_make(env, handle, &term, &exc))
        return exc;
    return term;
}

ERL_NIF_TERM tb_tensor_result(ErlNifEnv *env, const char *what, int ok, const tb_shim_out *out)
{
    if (!ok)
        return tb_raise_error(env, TB_WHY_LIBTORCH, NULL, "%s: %s", what, out->err.message);
    return tb_tensor_return(env, out->handle);
}

ERL_NIF_TERM tb_tensor_alloc_result(ErlNifEnv *env, const char *what, int ok, const tb_shim_out *out, int ndim,
                                    const int64_t *shape, tb_dtype_id dtype, uint64_t bytes)
{
    if (!ok && out->err.no_memory)
        return tb_raise_error(env, TB_WHY_NO_MEMORY, "shape",
                              "shape: %T of %s needs %llu bytes, and %s could not allocate them (out of memory)",
                              tb_make_shape(env, ndim, shape), tb_dtypes[dtype].name, (unsigned long long)bytes, what);
    return tb_tensor_result(env, what, ok, out);
}

ERL_NIF_TERM tb_tensor_view(ErlNifEnv *env, const tb_spec *s, tb_storage *storage, int proven)
{
    const tb_layout *l = &s->l;
    char why[200];
    if (!proven && s->r.byte_size > 0 && !tb_runtime_check_pointer(l->ptr, &s->device, why, sizeof why)) {
        tb_storage_release(storage);
        return tb_raise_badarg(env, TB_WHY_WRONG_DEVICE, "ptr", "ptr: %s", why);
    }
    tb_shim_out out;
    /* The shim owns the storage from here: released when libtorch frees it. */
    int ok = tb_shim_from_blob((void *)(uintptr_t)l->ptr, l->ndim, l->shape, l->strides,
                               tb_dtypes[s->dtype].torch_scalar_type, s->device.type, s->device.index, storage,
                               tb_storage_release, &out.handle, &out.err);
    return tb_tensor_result(env, "from_blob", ok, &out);
}

tb_tensor *tb_tensor_get(ErlNifEnv *env, ERL_NIF_TERM term)
{
    tb_tensor *t;
    /* A map is never a resource: spared the lookups over every stripe. */
    if (!enif_is_map(env, term))
        return tb_rtype_get(env, term, &tensor_type, (void **)&t) ? t : NULL;
    ERL_NIF_TERM name, ref;
    if (!enif_get_map_value(env, term, tb_atoms.struct_, &name))
        return NULL;
    /* What the Elixir facade's from_blob returns: its tensor. */
    if (name == tb_atoms.blob_view_struct && enif_get_map_value(env, term, tb_atoms.tensor, &term) &&
        (!enif_is_map(env, term) || !enif_get_map_value(env, term, tb_atoms.struct_, &name)))
        return NULL;
    if (name == tb_atoms.tensor_struct && enif_get_map_value(env, term, tb_atoms.ref, &ref) &&
        tb_rtype_get(env, ref, &tensor_type, (void **)&t))
        return t;
    return NULL;
}

long tb_tensor_live(void)
{
    return tb_count_read(&tb_library_state->tensors);
}

const tb_tensor_exported *tb_tensor_exported_from(const tb_tensor_desc *d, tb_tensor_exported *scratch)
{
    *scratch = (tb_tensor_exported){.data = d->info.data,
                                    .sizes = d->info.sizes,
                                    .strides = d->info.strides,
                                    .ndim = d->info.ndim,
                                    .dtype = d->dtype,
                                    .device_type = d->info.device_type,
                                    .device_index = d->info.device_index,
                                    .read_only = tb_storage_read_only(&d->info)};
    return scratch;
}

const tb_tensor_exported *tb_tensor_exported_of(tb_tensor *t, tb_tensor_exported *scratch)
{
    if (tb_once_ready(&t->exported_once))
        return &t->exported;
    tb_tensor_desc d;
    if (!tb_tensor_describe(t->handle, &d))
        return NULL;
    tb_tensor_exported_from(&d, scratch);
    if (tb_once_claim(&t->exported_once)) {
        t->exported = *scratch;
        tb_once_publish(&t->exported_once);
    }
    return scratch;
}

int tb_tensor_describe(tb_shim_tensor *handle, tb_tensor_desc *d)
{
    tb_shim_info_of(handle, &d->info);
    if (d->info.device_type < 0 || !tb_dtype_of_scalar_type(d->info.scalar_type, &d->dtype))
        return 0;
    /* A dimension of 0 makes 0 bytes, whatever the others hold. The count
     * cannot overflow (tb_layout_check refuses such a layout, and libtorch
     * makes none); were it to, it saturates, so that a copy of it fails as
     * too large: it is not a dtype fault, and is never reported as one. */
    uint64_t n = tb_dtypes[d->dtype].element_size;
    for (int i = 0; i < d->info.ndim; i++)
        if (d->info.sizes[i] == 0) {
            n = 0;
            break;
        }
    for (int i = 0; i < d->info.ndim && n > 0; i++)
        if (__builtin_mul_overflow(n, (uint64_t)d->info.sizes[i], &n))
            n = UINT64_MAX;
    d->dense_bytes = n;
    return 1;
}

int tb_tensor_arg(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, tb_tensor_desc *d, ERL_NIF_TERM *exc)
{
    d->tensor = tb_tensor_get(env, term);
    if (!d->tensor) {
        *exc = tb_raise_badarg(env, TB_WHY_NOT_A_TENSOR, field, "%s: expected a tensor, got %T", field, term);
        return 0;
    }
    if (!tb_tensor_describe(d->tensor->handle, d)) {
        if (d->info.device_type < 0)
            *exc = tb_raise_error(env, TB_WHY_UNSUPPORTED, field,
                                  "%s: on libtorch device type %d, which tensor_blob does not know", field,
                                  d->info.torch_device_type);
        else
            *exc = tb_raise_error(env, TB_WHY_UNSUPPORTED, field, "%s: libtorch scalar type %d has no dtype here",
                                  field, d->info.scalar_type);
        return 0;
    }
    return 1;
}

int tb_reschedule_copy(ErlNifEnv *env, const char *name, uint64_t bytes, int device, tb_nif_fun *self, int argc,
                       const ERL_NIF_TERM argv[], ERL_NIF_TERM *out)
{
    int flags = device ? ERL_NIF_DIRTY_JOB_IO_BOUND : bytes > TB_DIRTY_BYTES ? ERL_NIF_DIRTY_JOB_CPU_BOUND : 0;
    if (!flags || enif_thread_type() != ERL_NIF_THR_NORMAL_SCHEDULER)
        return 0;
    *out = enif_schedule_nif(env, name, flags, self, argc, argv);
    return 1;
}

int tb_tensor_get_dense(ErlNifEnv *env, ERL_NIF_TERM shape_term, ERL_NIF_TERM dtype_term, tb_dense *out,
                        ERL_NIF_TERM *exc)
{
    tb_layout *l = &out->layout;
    if (!tb_get_shape(env, shape_term, "shape", &l->ndim, l->shape, exc) ||
        !tb_get_dtype(env, dtype_term, "dtype", &out->dtype, exc))
        return 0;
    l->element_size = tb_dtypes[out->dtype].element_size;
    l->ptr = l->element_size; /* a stand-in: only the extent matters here */
    if (!tb_row_major_strides(l->ndim, l->shape, l->strides)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_SHAPE, "shape", "shape: the number of elements overflows 64 bits in %T",
                               shape_term);
        return 0;
    }
    out->check = tb_layout_check(l);
    if (out->check.status != TB_LAYOUT_OK) {
        /* The strides are derived from the shape: the shape is at fault. */
        *exc = tb_raise_badarg(env, TB_WHY_BAD_SHAPE, "shape", "shape: %s in %T",
                               tb_layout_status_text(out->check.status), shape_term);
        return 0;
    }
    return 1;
}

int tb_tensor_get_binary_args(ErlNifEnv *env, const ERL_NIF_TERM argv[], ErlNifBinary *bin, tb_dense *out,
                              ERL_NIF_TERM *exc)
{
    if (!enif_inspect_binary(env, argv[0], bin)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "binary", "binary: expected a binary, got %T", argv[0]);
        return 0;
    }
    if (!tb_tensor_get_dense(env, argv[2], argv[1], out, exc))
        return 0;
    if (out->check.byte_size != bin->size) {
        *exc = tb_raise_badarg(
            env, TB_WHY_OUT_OF_EXTENT, "binary", "binary: %T of %s needs %lu bytes, got a binary of %lu bytes", argv[2],
            tb_dtypes[out->dtype].name, (unsigned long)out->check.byte_size, (unsigned long)bin->size);
        return 0;
    }
    return 1;
}

int tb_tensor_check_bool_bytes(ErlNifEnv *env, const char *field, tb_dtype_id dtype, const unsigned char *data,
                               size_t size, ERL_NIF_TERM *exc)
{
    if (dtype != TB_DT_BOOL)
        return 1;
    unsigned char any = 0;
    for (size_t i = 0; i < size; i++)
        any |= data[i];
    if (!(any & 0xFE))
        return 1;
    size_t at = 0;
    while (data[at] <= 1)
        at++;
    *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, field,
                           "%s: byte %lu is %u, and each byte of a bool tensor must be 0 (false) or 1 (true), as "
                           "libtorch stores bools; map the values to 0 and 1 first",
                           field, (unsigned long)at, (unsigned)data[at]);
    return 0;
}
