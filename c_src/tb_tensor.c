#include "tb_count.h"
#include "tb_tensor.h"

#include <string.h>

#include "tb_args.h"
#include "tb_binary.h"
#include "tb_bridge.h"
#include "tb_dlpack.h"
#include "tb_nif.h"
#include "tb_pin.h"
#include "tb_spec.h"

/* Copies above this size move to a dirty CPU scheduler. */
#define TB_DIRTY_BYTES (256 * 1024)

static ErlNifResourceType *tensor_type;
static tb_count live_tensors;

static void tensor_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    tb_tensor *t = obj;
    if (t->handle) {
        /* May free a pin, which only frees its env: allowed here. */
        tb_shim_release(t->handle);
        t->handle = NULL;
        tb_count_add(&live_tensors, -1);
    }
}

int tb_tensor_open_type(ErlNifEnv *env, ErlNifResourceFlags flags)
{
    /* dyncall is the door of priv/include/tensor_blob.h: other NIF
     * libraries reach it with enif_dynamic_resource_call. */
    ErlNifResourceTypeInit init = {.dtor = tensor_dtor, .members = 4, .dyncall = tb_bridge_dyncall};
    ErlNifResourceType *type = enif_init_resource_type(env, "tensor_blob_tensor", &init, flags, NULL);
    if (!type)
        return 0;
    tensor_type = type;
    return 1;
}

ERL_NIF_TERM tb_tensor_make(ErlNifEnv *env, tb_shim_tensor *handle)
{
    tb_tensor *t = enif_alloc_resource(tensor_type, sizeof *t);
    if (!t) {
        tb_shim_release(handle);
        return tb_raise_error(env, "out of memory allocating a tensor resource");
    }
    t->handle = handle;
    tb_count_add(&live_tensors, 1);
    ERL_NIF_TERM term = enif_make_resource(env, t);
    enif_release_resource(t);
    return term;
}

tb_tensor *tb_tensor_get(ErlNifEnv *env, ERL_NIF_TERM term)
{
    tb_tensor *t;
    return enif_get_resource(env, term, tensor_type, (void **)&t) ? t : NULL;
}

tb_tensor *tb_tensor_get_any(ErlNifEnv *env, ERL_NIF_TERM term)
{
    tb_tensor *t = tb_tensor_get(env, term);
    ERL_NIF_TERM name, ref;
    if (!t && enif_is_map(env, term) && enif_get_map_value(env, term, tb_atoms.struct_, &name) &&
        name == tb_atoms.tensor_struct && enif_get_map_value(env, term, tb_atoms.ref, &ref))
        t = tb_tensor_get(env, ref);
    return t;
}

long tb_tensor_live(void)
{
    return tb_count_read(&live_tensors);
}

#define GET_TENSOR(var, term, field)                                                        \
    tb_tensor *var = tb_tensor_get(env, term);                                              \
    if (!var)                                                                                \
        return tb_raise_badarg(env, "%s: expected a tensor, got %T", field, term)

/* For the accessors: the description of the tensor in argv[0], or raise. */
#define DESCRIBE_ARG0(info)                                                                 \
    tb_shim_info info;                                                                      \
    do {                                                                                    \
        GET_TENSOR(described_, argv[0], "tensor");                                          \
        tb_shim_info_of(described_->handle, &info);                                         \
    } while (0)

/* Row-major byte count of a tensor's elements; 0 on overflow (never for a
 * tensor libtorch made). */
uint64_t tb_tensor_dense_bytes(const tb_shim_info *info)
{
    tb_dtype_id id = TB_DT_UINT8;
    tb_dtype_of_scalar_type(info->scalar_type, &id);
    uint64_t n = tb_dtypes[id].element_size;
    for (int i = 0; i < info->ndim; i++)
        if (__builtin_mul_overflow(n, (uint64_t)info->sizes[i], &n))
            return 0;
    return n;
}

static ERL_NIF_TERM refuse_device(ErlNifEnv *env, const tb_shim_info *info, const char *what)
{
    if (info->device_type != TB_DEVICE_CPU)
        return tb_raise_badarg(env, "%s: the tensor is on %T; only CPU tensors can be copied to or from bytes",
                               what, tb_make_device(env, info->device_type, info->device_index));
    return 0;
}

/* Parses a shape and dtype, and checks the element count fits. */
int tb_tensor_get_shape_dtype(ErlNifEnv *env, ERL_NIF_TERM shape_term, ERL_NIF_TERM dtype_term, tb_layout *l,
                           tb_dtype_id *dtype, tb_spec_result *r, ERL_NIF_TERM *exc)
{
    if (!tb_get_shape(env, shape_term, "shape", &l->ndim, l->shape, exc) ||
        !tb_get_dtype(env, dtype_term, "dtype", dtype, exc))
        return 0;
    l->element_size = tb_dtypes[*dtype].element_size;
    l->ptr = l->element_size; /* a stand-in: only the extent matters here */
    if (!tb_row_major_strides(l->ndim, l->shape, l->strides)) {
        *exc = tb_raise_badarg(env, "shape: the number of elements overflows 64 bits in %T", shape_term);
        return 0;
    }
    *r = tb_layout_check(l);
    if (r->status != TB_SPEC_OK) {
        *exc = tb_raise_badarg(env, "shape: %s in %T", tb_spec_status_text(r->status), shape_term);
        return 0;
    }
    return 1;
}

static ERL_NIF_TERM zeros(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_layout l;
    tb_dtype_id dtype;
    tb_spec_result r;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_shape_dtype(env, argv[0], argv[1], &l, &dtype, &r, &exc))
        return exc;
    tb_shim_tensor *h;
    tb_shim_error err;
    if (!tb_shim_zeros(l.ndim, l.shape, tb_dtypes[dtype].torch_scalar_type, &h, &err))
        return tb_raise_error(env, "zeros: %s", err.message);
    return tb_tensor_make(env, h);
}

ERL_NIF_TERM tb_nif_zeros(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    tb_layout l;
    tb_dtype_id dtype;
    tb_spec_result r;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_shape_dtype(env, argv[0], argv[1], &l, &dtype, &r, &exc))
        return exc;
    if (r.byte_size > TB_DIRTY_BYTES)
        return enif_schedule_nif(env, "zeros", ERL_NIF_DIRTY_JOB_CPU_BOUND, zeros, argc, argv);
    return zeros(env, argc, argv);
}

int tb_tensor_get_binary_args(ErlNifEnv *env, const ERL_NIF_TERM argv[], ErlNifBinary *bin, tb_layout *l,
                              tb_dtype_id *dtype, tb_spec_result *r, ERL_NIF_TERM *exc)
{
    if (!enif_inspect_binary(env, argv[0], bin)) {
        *exc = tb_raise_badarg(env, "binary: expected a binary, got %T", argv[0]);
        return 0;
    }
    if (!tb_tensor_get_shape_dtype(env, argv[2], argv[1], l, dtype, r, exc))
        return 0;
    if (r->byte_size != bin->size) {
        *exc = tb_raise_badarg(env, "binary: %T of %s needs %lu bytes, got a binary of %lu bytes", argv[2],
                               tb_dtypes[*dtype].name, (unsigned long)r->byte_size, (unsigned long)bin->size);
        return 0;
    }
    return 1;
}

static ERL_NIF_TERM from_binary(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifBinary bin;
    tb_layout l;
    tb_dtype_id dtype;
    tb_spec_result r;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_binary_args(env, argv, &bin, &l, &dtype, &r, &exc))
        return exc;
    tb_shim_tensor *h;
    tb_shim_error err;
    if (!tb_shim_from_bytes(bin.data, l.ndim, l.shape, tb_dtypes[dtype].torch_scalar_type, &h, &err))
        return tb_raise_error(env, "from_binary: %s", err.message);
    return tb_tensor_make(env, h);
}

ERL_NIF_TERM tb_nif_from_binary(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifBinary bin;
    if (enif_is_binary(env, argv[0]) && enif_inspect_binary(env, argv[0], &bin) && bin.size > TB_DIRTY_BYTES)
        return enif_schedule_nif(env, "from_binary", ERL_NIF_DIRTY_JOB_CPU_BOUND, from_binary, argc, argv);
    return from_binary(env, argc, argv);
}

static ERL_NIF_TERM to_binary(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    GET_TENSOR(t, argv[0], "tensor");
    tb_shim_info info;
    tb_shim_info_of(t->handle, &info);
    ERL_NIF_TERM exc = refuse_device(env, &info, "to_binary");
    if (exc)
        return exc;
    ErlNifBinary bin;
    if (!enif_alloc_binary(tb_tensor_dense_bytes(&info), &bin))
        return tb_raise_error(env, "to_binary: out of memory allocating %lu bytes", (unsigned long)tb_tensor_dense_bytes(&info));
    tb_shim_error err;
    if (!tb_shim_to_bytes(t->handle, bin.data, &err)) {
        enif_release_binary(&bin);
        return tb_raise_error(env, "to_binary: %s", err.message);
    }
    return enif_make_binary(env, &bin);
}

ERL_NIF_TERM tb_nif_to_binary(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    tb_tensor *t = tb_tensor_get(env, argv[0]);
    if (t) {
        tb_shim_info info;
        tb_shim_info_of(t->handle, &info);
        if (tb_tensor_dense_bytes(&info) > TB_DIRTY_BYTES)
            return enif_schedule_nif(env, "to_binary", ERL_NIF_DIRTY_JOB_CPU_BOUND, to_binary, argc, argv);
    }
    return to_binary(env, argc, argv);
}

int tb_tensor_info_read_only(const tb_shim_info *info)
{
    return tb_dlpack_is_read_only_deleter(info->storage_deleter) || tb_pin_is_read_only_deleter(info->storage_deleter);
}

const char *tb_tensor_read_only_reason(const tb_shim_info *info)
{
    if (tb_dlpack_is_read_only_deleter(info->storage_deleter))
        return "a DLPack import with the READ_ONLY flag, or a view of one";
    return "a view of a binary's bytes or of a read-only tensor; binaries are immutable";
}

static ERL_NIF_TERM write_bytes(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    GET_TENSOR(t, argv[0], "tensor");
    ErlNifBinary bin;
    if (!enif_inspect_binary(env, argv[1], &bin))
        return tb_raise_badarg(env, "binary: expected a binary, got %T", argv[1]);
    tb_shim_info info;
    tb_shim_info_of(t->handle, &info);
    ERL_NIF_TERM exc = refuse_device(env, &info, "write!");
    if (exc)
        return exc;
    if (tb_tensor_info_read_only(&info))
        return tb_raise_badarg(env, "tensor: read-only (%s); write! refuses it", tb_tensor_read_only_reason(&info));
    if (bin.size != tb_tensor_dense_bytes(&info))
        return tb_raise_badarg(env, "binary: the tensor holds %lu bytes, got a binary of %lu bytes",
                               (unsigned long)tb_tensor_dense_bytes(&info), (unsigned long)bin.size);
    tb_write_guard guard;
    if (!tb_binary_write_begin(&guard, &info))
        return tb_raise_badarg(env, "tensor: its memory is shared with a binary made by to_binary(copy: false), "
                                    "and binaries are immutable; write! refuses it while that binary lives");
    tb_shim_error err;
    int ok = tb_shim_write_bytes(t->handle, bin.data, &err);
    tb_binary_write_end(&guard);
    if (!ok)
        return tb_raise_error(env, "write!: %s", err.message);
    return argv[0];
}

ERL_NIF_TERM tb_nif_write(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifBinary bin;
    if (enif_inspect_binary(env, argv[1], &bin) && bin.size > TB_DIRTY_BYTES)
        return enif_schedule_nif(env, "write", ERL_NIF_DIRTY_JOB_CPU_BOUND, write_bytes, argc, argv);
    return write_bytes(env, argc, argv);
}

ERL_NIF_TERM tb_nif_narrow(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    GET_TENSOR(t, argv[0], "tensor");
    tb_shim_info info;
    tb_shim_info_of(t->handle, &info);
    int dim;
    ERL_NIF_TERM exc;
    if (!tb_get_dim(env, argv[1], "dim", info.ndim, &dim, &exc))
        return exc;
    ErlNifSInt64 start, length;
    int64_t size = info.sizes[dim];
    if (!enif_get_int64(env, argv[2], &start) || start < 0 || start > size)
        return tb_raise_badarg(env, "start: expected an integer in 0..%ld for dimension %d, got %T", (long)size, dim,
                               argv[2]);
    if (!enif_get_int64(env, argv[3], &length) || length < 0 || length > size - start)
        return tb_raise_badarg(env, "length: expected an integer in 0..%ld (start %ld, size %ld), got %T",
                               (long)(size - start), (long)start, (long)size, argv[3]);
    tb_shim_tensor *h;
    tb_shim_error err;
    if (!tb_shim_narrow(t->handle, dim, start, length, &h, &err))
        return tb_raise_error(env, "narrow: %s", err.message);
    return tb_tensor_make(env, h);
}

ERL_NIF_TERM tb_nif_transpose(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    GET_TENSOR(t, argv[0], "tensor");
    tb_shim_info info;
    tb_shim_info_of(t->handle, &info);
    int dim0, dim1;
    ERL_NIF_TERM exc;
    if (!tb_get_dim(env, argv[1], "dim0", info.ndim, &dim0, &exc) ||
        !tb_get_dim(env, argv[2], "dim1", info.ndim, &dim1, &exc))
        return exc;
    tb_shim_tensor *h;
    tb_shim_error err;
    if (!tb_shim_transpose(t->handle, dim0, dim1, &h, &err))
        return tb_raise_error(env, "transpose: %s", err.message);
    return tb_tensor_make(env, h);
}

ERL_NIF_TERM tb_nif_shape(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    DESCRIBE_ARG0(info);
    return tb_make_shape(env, info.ndim, info.sizes);
}

ERL_NIF_TERM tb_nif_strides(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    DESCRIBE_ARG0(info);
    return tb_make_strides(env, info.ndim, info.strides);
}

ERL_NIF_TERM tb_nif_dtype(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    DESCRIBE_ARG0(info);
    tb_dtype_id id;
    if (!tb_dtype_of_scalar_type(info.scalar_type, &id))
        return tb_raise_error(env, "dtype: libtorch scalar type %d has no dtype here", info.scalar_type);
    return tb_atoms.dtypes[id];
}

ERL_NIF_TERM tb_nif_device(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    DESCRIBE_ARG0(info);
    return tb_make_device(env, info.device_type, info.device_index);
}

/* owned: libtorch allocated it; pinned: a view that keeps its owner alive
 * (a pinned owner term, or a DLPack producer whose deleter the storage
 * calls); unpinned: a view whose memory the caller answers for. Derived from
 * the storage's deleter, so slices and transposes of a view report the same. */
ERL_NIF_TERM tb_nif_memory(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    DESCRIBE_ARG0(info);
    if (tb_pin_is_pin_deleter(info.storage_deleter) || tb_dlpack_is_import_deleter(info.storage_deleter))
        return tb_atoms.pinned;
    if (info.storage_deleter == tb_pin_none)
        return tb_atoms.unpinned;
    return tb_atoms.owned;
}
