#include "tb_tensor.h"

#include <string.h>

#include "tb_count.h"
#include "tb_nifs.h"
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
        tb_count_add(&tb_st->tensors, -1);
    }
}

/* A view pinning this tensor is gone: drop its reference. */
static void release_as_owner(tb_storage *s)
{
    tb_tensor *t = s->flags & TB_STORAGE_READ_ONLY ? (tb_tensor *)((char *)s - offsetof(tb_tensor, as_owner.read_only))
                                                   : (tb_tensor *)((char *)s - offsetof(tb_tensor, as_owner.writable));
    enif_release_resource(t);
    tb_count_add(&tb_st->pins, -1);
}

int tb_tensor_open_type(ErlNifEnv *env, ErlNifResourceFlags flags, ErlNifResourceDynCall *dyncall)
{
    /* dyncall is the door of priv/include/tensor_blob.h: other NIF
     * libraries reach it with enif_dynamic_resource_call. */
    ErlNifResourceTypeInit init = {.dtor = tensor_dtor, .members = 4, .dyncall = dyncall};
    return tb_rtype_open(env, "tensor_blob_tensor", &init, flags, &tensor_type);
}

int tb_tensor_make(ErlNifEnv *env, tb_shim_tensor *handle, ERL_NIF_TERM *out, ERL_NIF_TERM *exc)
{
    tb_tensor *t = tb_rtype_alloc(&tensor_type, sizeof *t);
    if (!t) {
        tb_shim_release(handle);
        *exc = tb_raise_error(env, "out of memory allocating a tensor resource");
        return 0;
    }
    t->handle = handle;
    tb_storage_init(&t->as_owner.writable, TB_MEMORY_PINNED, 0, release_as_owner);
    tb_storage_init(&t->as_owner.read_only, TB_MEMORY_PINNED, TB_STORAGE_READ_ONLY, release_as_owner);
    tb_count_add(&tb_st->tensors, 1);
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
        return tb_raise_error(env, "%s: %s", what, out->err.message);
    return tb_tensor_return(env, out->handle);
}

ERL_NIF_TERM tb_tensor_view(ErlNifEnv *env, const tb_spec *s, tb_storage *storage, int proven)
{
    const tb_layout *l = &s->l;
    char why[200];
    if (!proven && s->r.byte_size > 0 && !tb_runtime_check_pointer(l->ptr, &s->device, why, sizeof why)) {
        tb_storage_release(storage);
        return tb_raise_badarg(env, "ptr: %s", why);
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
    if (tb_rtype_get(env, term, &tensor_type, (void **)&t))
        return t;
    ERL_NIF_TERM name, ref;
    if (!enif_is_map(env, term) || !enif_get_map_value(env, term, tb_atoms.struct_, &name))
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
    return tb_count_read(&tb_st->tensors);
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
        *exc = tb_raise_badarg(env, "%s: expected a tensor, got %T", field, term);
        return 0;
    }
    if (!tb_tensor_describe(d->tensor->handle, d)) {
        if (d->info.device_type < 0)
            *exc = tb_raise_error(env, "%s: on libtorch device type %d, which tensor_blob does not know", field,
                                  d->info.torch_device_type);
        else
            *exc = tb_raise_error(env, "%s: libtorch scalar type %d has no dtype here", field, d->info.scalar_type);
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

ERL_NIF_TERM tb_run_copy(ErlNifEnv *env, const char *name, uint64_t bytes, int device, tb_nif_fun *fun, int argc,
                         const ERL_NIF_TERM argv[])
{
    ERL_NIF_TERM rescheduled;
    if (tb_reschedule_copy(env, name, bytes, device, fun, argc, argv, &rescheduled))
        return rescheduled;
    return fun(env, argc, argv);
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
        *exc = tb_raise_badarg(env, "shape: the number of elements overflows 64 bits in %T", shape_term);
        return 0;
    }
    out->check = tb_layout_check(l);
    if (out->check.status != TB_LAYOUT_OK) {
        /* The strides are derived from the shape: the shape is at fault. */
        *exc = tb_raise_badarg(env, "shape: %s in %T", tb_layout_status_text(out->check.status), shape_term);
        return 0;
    }
    return 1;
}

int tb_tensor_get_binary_args(ErlNifEnv *env, const ERL_NIF_TERM argv[], ErlNifBinary *bin, tb_dense *out,
                              ERL_NIF_TERM *exc)
{
    if (!enif_inspect_binary(env, argv[0], bin)) {
        *exc = tb_raise_badarg(env, "binary: expected a binary, got %T", argv[0]);
        return 0;
    }
    if (!tb_tensor_get_dense(env, argv[2], argv[1], out, exc))
        return 0;
    if (out->check.byte_size != bin->size) {
        *exc =
            tb_raise_badarg(env, "binary: %T of %s needs %lu bytes, got a binary of %lu bytes", argv[2],
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
    *exc = tb_raise_badarg(env,
                           "%s: byte %lu is %u, and each byte of a bool tensor must be 0 (false) or 1 (true), as "
                           "libtorch stores bools; map the values to 0 and 1 first",
                           field, (unsigned long)at, (unsigned)data[at]);
    return 0;
}

/* ---- Copies ------------------------------------------------------------ */

ERL_NIF_TERM tb_nif_zeros(TB_NIF_PARAMS)
{
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_dense(env, argv[0], argv[1], &d, &exc))
        return exc;
    if (tb_reschedule_copy(env, "zeros", d.check.byte_size, 0, tb_nif_zeros, argc, argv, &exc))
        return exc;
    tb_shim_out out;
    int ok = tb_shim_zeros(d.layout.ndim, d.layout.shape, tb_dtypes[d.dtype].torch_scalar_type, &out.handle, &out.err);
    return tb_tensor_result(env, "zeros", ok, &out);
}

ERL_NIF_TERM tb_nif_from_binary(TB_NIF_PARAMS)
{
    ErlNifBinary bin;
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_binary_args(env, argv, &bin, &d, &exc))
        return exc;
    if (tb_reschedule_copy(env, "from_binary", bin.size, 0, tb_nif_from_binary, argc, argv, &exc))
        return exc;
    if (!tb_tensor_check_bool_bytes(env, "binary", d.dtype, bin.data, bin.size, &exc))
        return exc;
    tb_shim_out out;
    int ok = tb_shim_from_bytes(bin.data, d.layout.ndim, d.layout.shape, tb_dtypes[d.dtype].torch_scalar_type,
                                &out.handle, &out.err);
    return tb_tensor_result(env, "from_binary", ok, &out);
}

ERL_NIF_TERM tb_nif_to_binary(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc))
        return exc;
    if (tb_reschedule_copy(env, "to_binary", d.dense_bytes, d.info.device_type != TB_DEVICE_CPU, tb_nif_to_binary, argc,
                           argv, &exc))
        return exc;
    ErlNifBinary bin;
    if (!enif_alloc_binary(d.dense_bytes, &bin))
        return tb_raise_error(env, "to_binary: out of memory allocating %lu bytes", (unsigned long)d.dense_bytes);
    tb_shim_error err;
    if (!tb_shim_to_bytes(d.tensor->handle, bin.data, &err)) {
        enif_release_binary(&bin);
        return tb_raise_error(env, "to_binary: %s", err.message);
    }
    return enif_make_binary(env, &bin);
}

/* Why the write guard refused; the message says which call refuses. */
static ERL_NIF_TERM raise_guard_refusal(ErlNifEnv *env, tb_guard_status status)
{
    switch (status) {
    case TB_GUARD_FROZEN:
        return tb_raise_badarg(env,
                               "tensor: its memory is shared with a binary made by %C, and binaries are "
                               "immutable; %C refuses it while that binary lives",
                               "to_binary(T, #{copy => false})", "to_binary(copy: false)", "write/2", "write!");
    case TB_GUARD_READ_ONLY:
        return tb_raise_badarg(env,
                               "tensor: its memory is also a binary's bytes or a read-only DLPack import; "
                               "%C refuses it. To change the values, copy it first (%C) and write the copy",
                               "write/2", "write!", "tensor_blob:to_device(T, tensor_blob:device(T))",
                               "Tensor.to_device(t, Tensor.device(t))");
    default: return tb_raise_badarg(env, "tensor: %C refuses it", "write/2", "write!");
    }
}

/* A contiguous CPU tensor: its elements are its dense bytes, in order. */
static int dense_on_host(const tb_shim_info *info)
{
    int64_t row_major[TB_MAX_DIMS];
    if (info->device_type != TB_DEVICE_CPU || !tb_row_major_strides(info->ndim, info->sizes, row_major))
        return 0;
    for (int i = 0; i < info->ndim; i++)
        if (info->sizes[i] > 1 && info->strides[i] != row_major[i])
            return 0;
    return 1;
}

/* write(Tensor, Source): Source's bytes into Tensor's elements. Source is a
 * binary of the dense bytes, or (for the library's own copies: a tensor
 * copied into a new region) a tensor of the same dtype and element count,
 * read in place, with no binary made of it, so the source is left as it
 * was; the target of a tensor source is then a contiguous CPU tensor. */
ERL_NIF_TERM tb_nif_write(TB_NIF_PARAMS)
{
    tb_tensor_desc d, src;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc))
        return exc;
    ErlNifBinary bin;
    int from_tensor = tb_tensor_get(env, argv[1]) != NULL;
    if (from_tensor) {
        if (!tb_tensor_arg(env, argv[1], "source", &src, &exc))
            return exc;
        bin.size = src.dense_bytes;
        bin.data = NULL;
    } else if (!enif_inspect_binary(env, argv[1], &bin)) {
        return tb_raise_badarg(env, "binary: expected a binary, got %T", argv[1]);
    }
    int on_device = d.info.device_type != TB_DEVICE_CPU || (from_tensor && src.info.device_type != TB_DEVICE_CPU);
    if (tb_reschedule_copy(env, "write", bin.size, on_device, tb_nif_write, argc, argv, &exc))
        return exc;
    if (!from_tensor && !tb_tensor_check_bool_bytes(env, "binary", d.dtype, bin.data, bin.size, &exc))
        return exc;
    if (tb_storage_read_only(&d.info))
        return tb_raise_badarg(env,
                               "tensor: read-only (%s); %C refuses it. To change the values, copy it first "
                               "(%C) and write the copy",
                               tb_storage_read_only_reason(&d.info), "write/2", "write!",
                               "tensor_blob:to_device(T, tensor_blob:device(T))",
                               "Tensor.to_device(t, Tensor.device(t))");
    /* Two indices of one element: which write would win is undefined. */
    if (tb_layout_self_overlaps(d.info.ndim, d.info.sizes, d.info.strides))
        return tb_raise_badarg(env,
                               "tensor: some of its elements are the same memory (a stride of 0, or strides "
                               "that overlap: shape %T, strides %T); %C refuses to write through such a view, "
                               "as libtorch refuses in-place writes to it. Write to the tensor it views",
                               tb_make_shape(env, d.info.ndim, d.info.sizes),
                               tb_make_strides(env, d.info.ndim, d.info.strides), "write/2", "write!");
    if (from_tensor && (src.dtype != d.dtype || !dense_on_host(&d.info)))
        return tb_raise_badarg(env,
                               "source: a tensor source needs the same dtype (%s, got %s) and a contiguous "
                               "CPU target",
                               tb_dtypes[d.dtype].name, tb_dtypes[src.dtype].name);
    if (bin.size != d.dense_bytes)
        return tb_raise_badarg(env, "%s: the tensor holds %lu bytes, got %s of %lu bytes",
                               from_tensor ? "source" : "binary", (unsigned long)d.dense_bytes,
                               from_tensor ? "a tensor" : "a binary", (unsigned long)bin.size);
    tb_range guard;
    if (!tb_storage_span(&d.info, tb_dtypes[d.dtype].element_size, &guard))
        return argv[0]; /* no elements: nothing to write */
    tb_guard_status status = tb_storage_write_begin(&guard);
    if (status != TB_GUARD_OK)
        return raise_guard_refusal(env, status);
    tb_shim_error err;
    int ok = from_tensor ? tb_shim_to_bytes(src.tensor->handle, d.info.data, &err)
                         : tb_shim_write_bytes(d.tensor->handle, bin.data, &err);
    tb_storage_write_end(&guard);
    if (!ok)
        return tb_raise_error(env, "%C: %s", "write", "write!", err.message);
    return argv[0];
}

/* to_device(Tensor, Device) -> a copy on Device: the explicit copy between
 * the host and a GPU (or within one). */
ERL_NIF_TERM tb_nif_to_device(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    tb_device device;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc) || !tb_get_device(env, argv[1], "device", &device, &exc))
        return exc;
    int on_device = d.info.device_type != TB_DEVICE_CPU || device.type != TB_DEVICE_CPU;
    /* Said here, as from_blob says it: libtorch's own text is long and cut.
     * The target's runtime, or else the source's, the linked libtorch lacks. */
    int lacking = !tb_shim_device_built(device.type) ? device.type : d.info.device_type;
    if (!tb_shim_device_built(lacking)) {
        const char *name = tb_devices[lacking].c10_name;
        return tb_raise_error(env,
                              "device %T: this libtorch was built without %s, so to_device cannot copy to or "
                              "from a GPU; link a libtorch with %s (LIBTORCH_DIR)",
                              argv[1], name, name);
    }
    if (tb_reschedule_copy(env, "to_device", d.dense_bytes, on_device, tb_nif_to_device, argc, argv, &exc))
        return exc;
    tb_shim_out out;
    int ok = tb_shim_to_device(d.tensor->handle, device.type, device.index, &out.handle, &out.err);
    return tb_tensor_result(env, "to_device", ok, &out);
}

/* ---- Views ------------------------------------------------------------- */

ERL_NIF_TERM tb_nif_narrow(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    int dim;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc) || !tb_get_dim(env, argv[1], "dim", d.info.ndim, &dim, &exc))
        return exc;
    ErlNifSInt64 start, length;
    int64_t size = d.info.sizes[dim];
    if (!enif_get_int64(env, argv[2], &start) || start < 0 || start > size)
        return tb_raise_badarg(env, "start: expected an integer in 0..%ld for dimension %d, got %T", (long)size, dim,
                               argv[2]);
    if (!enif_get_int64(env, argv[3], &length) || length < 0 || length > size - start)
        return tb_raise_badarg(env, "length: expected an integer in 0..%ld (start %ld, size %ld), got %T",
                               (long)(size - start), (long)start, (long)size, argv[3]);
    tb_shim_out out;
    int ok = tb_shim_narrow(d.tensor->handle, dim, start, length, &out.handle, &out.err);
    return tb_tensor_result(env, "narrow", ok, &out);
}

ERL_NIF_TERM tb_nif_transpose(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    int dim0, dim1;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc) ||
        !tb_get_dim(env, argv[1], "dim0", d.info.ndim, &dim0, &exc) ||
        !tb_get_dim(env, argv[2], "dim1", d.info.ndim, &dim1, &exc))
        return exc;
    tb_shim_out out;
    int ok = tb_shim_transpose(d.tensor->handle, dim0, dim1, &out.handle, &out.err);
    return tb_tensor_result(env, "transpose", ok, &out);
}

/* ---- Accessors --------------------------------------------------------- */

typedef enum { ACCESS_SHAPE, ACCESS_STRIDES, ACCESS_DTYPE, ACCESS_DEVICE, ACCESS_MEMORY } access_what;

static ERL_NIF_TERM memory_atom(const tb_shim_info *info)
{
    switch (tb_storage_kind(info)) {
    case TB_MEMORY_PINNED: return tb_atoms.pinned;
    case TB_MEMORY_UNPINNED: return tb_atoms.unpinned;
    case TB_MEMORY_DLPACK: return tb_atoms.dlpack;
    case TB_MEMORY_BINARY: return tb_atoms.binary;
    case TB_MEMORY_REGION:
    case TB_MEMORY_CUDA_IPC:
    case TB_MEMORY_TORCH_SHM: return tb_atoms.ipc;
    default: return tb_atoms.owned;
    }
}

static ERL_NIF_TERM accessor(ErlNifEnv *env, ERL_NIF_TERM term, access_what what)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, term, "tensor", &d, &exc))
        return exc;
    switch (what) {
    case ACCESS_SHAPE: return tb_make_shape(env, d.info.ndim, d.info.sizes);
    case ACCESS_STRIDES: return tb_make_strides(env, d.info.ndim, d.info.strides);
    case ACCESS_DTYPE: return tb_atoms.dtypes[d.dtype];
    case ACCESS_DEVICE: return tb_make_device(env, d.info.device_type, d.info.device_index);
    case ACCESS_MEMORY: break;
    }
    /* What the memory is, read from the storage (tb_storage.h), so slices
     * and transposes of a view report the same. */
    return memory_atom(&d.info);
}

ERL_NIF_TERM tb_nif_shape(TB_NIF_PARAMS)
{
    return accessor(env, argv[0], ACCESS_SHAPE);
}

ERL_NIF_TERM tb_nif_strides(TB_NIF_PARAMS)
{
    return accessor(env, argv[0], ACCESS_STRIDES);
}

ERL_NIF_TERM tb_nif_dtype(TB_NIF_PARAMS)
{
    return accessor(env, argv[0], ACCESS_DTYPE);
}

ERL_NIF_TERM tb_nif_device(TB_NIF_PARAMS)
{
    return accessor(env, argv[0], ACCESS_DEVICE);
}

ERL_NIF_TERM tb_nif_memory(TB_NIF_PARAMS)
{
    return accessor(env, argv[0], ACCESS_MEMORY);
}
