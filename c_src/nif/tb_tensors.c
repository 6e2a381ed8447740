/* The NIFs on tensors themselves: making them, copying their bytes both
 * ways, views (narrow, transpose) and what a tensor is (shape, strides,
 * dtype, device, memory). Each reads its arguments with tb_tensor.h's
 * readers and ends with tb_tensor_result or a term of its own; the tensor
 * resource they work on is tensor/tb_tensor. */
#include "tb_file_map.h"
#include "tb_nifs.h"
#include "tb_overlap.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "torch_shim.h"

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
    return tb_tensor_alloc_result(env, "zeros", ok, &out, d.layout.ndim, d.layout.shape, d.dtype, d.check.byte_size);
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
    return tb_tensor_alloc_result(env, "from_binary", ok, &out, d.layout.ndim, d.layout.shape, d.dtype,
                                  d.check.byte_size);
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
        return tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "to_binary: out of memory allocating %lu bytes",
                              (unsigned long)d.dense_bytes);
    tb_shim_error err;
    if (!tb_shim_to_bytes(d.tensor->handle, bin.data, &err)) {
        enif_release_binary(&bin);
        if (err.vanished && !tb_file_map_check(env, &d, 1, "tensor", 0, &exc))
            return exc;
        return tb_raise_error(env, TB_WHY_LIBTORCH, NULL, "to_binary: %s", err.message);
    }
    return enif_make_binary(env, &bin);
}

/* A binary that shows the memory refuses a write: who made it, and how to
 * let go of it or not make it. */
static ERL_NIF_TERM raise_frozen(ErlNifEnv *env, tb_binary_maker maker)
{
    switch (maker) {
    case TB_MAKER_NODE_PACK:
        return tb_raise_badarg(env, TB_WHY_READ_ONLY, "tensor",
                               "tensor: its memory is shared with the binary of a term %C made (through a "
                               "binary, a view of a tensor that large), and binaries are immutable; %C "
                               "refuses it while that term lives, here or in a message. Drop the packed term "
                               "and let it be collected, or pack a copy (%C)",
                               "tensor_blob:node_pack/3", "TensorBlob.Nodes.pack/3", "write/2", "write!",
                               "tensor_blob:copy(T)", "Tensor.copy(t)");
    case TB_MAKER_TO_NX:
        return tb_raise_badarg(env, TB_WHY_READ_ONLY, "tensor",
                               "tensor: its memory is shared with the binary of an Nx tensor %C made "
                               "(Nx.BinaryBackend, zero-copy), and binaries are immutable; %C refuses it "
                               "while that Nx tensor, or a result sharing its binary, lives. Drop them and "
                               "let them be collected, or convert a copy (%C)",
                               "'Elixir.TensorBlob.Nx':to_nx/2", "TensorBlob.Nx.to_nx/2", "write/2", "write!",
                               "tensor_blob:copy(T)", "Tensor.copy(t)");
    default:
        return tb_raise_badarg(env, TB_WHY_READ_ONLY, "tensor",
                               "tensor: its memory is shared with a binary made by %C (or %C), and binaries "
                               "are immutable; %C refuses it while that binary lives. Drop the binary and let "
                               "it be collected, or make a copy (%C)",
                               "to_binary(T, #{copy => false})", "to_binary(copy: false)", "#{copy => if_needed}",
                               "copy: :if_needed", "write/2", "write!", "#{copy => true}", "copy: true");
    }
}

/* Why the write guard refused; the message says which call refuses. */
static ERL_NIF_TERM raise_guard_refusal(ErlNifEnv *env, tb_guard_status status, tb_binary_maker maker)
{
    switch (status) {
    case TB_GUARD_FROZEN: return raise_frozen(env, maker);
    case TB_GUARD_READ_ONLY:
        return tb_raise_badarg(env, TB_WHY_READ_ONLY, "tensor",
                               "tensor: its memory is also a binary's bytes or a read-only DLPack import; "
                               "%C refuses it. To change the values, copy it first (%C) and write the copy",
                               "write/2", "write!", "tensor_blob:copy(T)", "Tensor.copy(t)");
    default: return tb_raise_badarg(env, TB_WHY_READ_ONLY, "tensor", "tensor: %C refuses it", "write/2", "write!");
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

/* write's Source (argv[1]): a binary, or a tensor (*from_tensor, src),
 * whose dense bytes are read in place (their count in bin->size). */
static int get_write_source(ErlNifEnv *env, ERL_NIF_TERM term, int *from_tensor, tb_tensor_desc *src, ErlNifBinary *bin,
                            ERL_NIF_TERM *exc)
{
    *from_tensor = tb_tensor_get(env, term) != NULL;
    if (*from_tensor) {
        if (!tb_tensor_arg(env, term, "source", src, exc))
            return 0;
        bin->size = src->dense_bytes;
        bin->data = NULL;
        return 1;
    }
    if (!enif_inspect_binary(env, term, bin)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "binary", "binary: expected a binary, got %T", term);
        return 0;
    }
    return 1;
}

/* A target that may be written through: not read-only, and no two of its
 * indices one element (which write would win is undefined): accepted only
 * when no two share memory, refused when that is not known within the
 * bound. */
static int writable(ErlNifEnv *env, const tb_tensor_desc *d, ERL_NIF_TERM *exc)
{
    if (tb_storage_read_only(&d->info)) {
        *exc = tb_raise_badarg(env, TB_WHY_READ_ONLY, "tensor",
                               "tensor: read-only (%s); %C refuses it. To change the values, copy it first "
                               "(%C) and write the copy",
                               tb_storage_read_only_reason(&d->info), "write/2", "write!", "tensor_blob:copy(T)",
                               "Tensor.copy(t)");
        return 0;
    }
    tb_overlap overlap = tb_layout_overlap(d->info.ndim, d->info.sizes, d->info.strides, TB_OVERLAP_WORK);
    if (overlap == TB_OVERLAP_YES)
        *exc = tb_raise_badarg(env, TB_WHY_BAD_STRIDES, "tensor",
                               "tensor: some of its elements are the same memory (a stride of 0, or strides "
                               "that overlap: shape %T, strides %T); %C refuses to write through such a view, "
                               "as libtorch refuses in-place writes to it. Write to the tensor it views",
                               tb_make_shape(env, d->info.ndim, d->info.sizes),
                               tb_make_strides(env, d->info.ndim, d->info.strides), "write/2", "write!");
    else if (overlap != TB_OVERLAP_NONE)
        *exc = tb_raise_badarg(env, TB_WHY_BAD_STRIDES, "tensor",
                               "tensor: whether two of its elements are the same memory is not known within "
                               "%ld steps (shape %T, strides %T: not a layout of a dense tensor's slices, "
                               "permutations or windows); %C refuses a write it cannot prove safe. Write a "
                               "contiguous copy (%C), or write through a contiguous view of the memory",
                               TB_OVERLAP_WORK, tb_make_shape(env, d->info.ndim, d->info.sizes),
                               tb_make_strides(env, d->info.ndim, d->info.strides), "write/2", "write!",
                               "tensor_blob:copy(T)", "Tensor.copy(t)");
    return overlap == TB_OVERLAP_NONE;
}

/* The source fits the target d: bytes bytes, d's dense bytes; a tensor
 * source (src) of d's dtype, into a contiguous CPU target. */
static int source_fits(ErlNifEnv *env, const tb_tensor_desc *d, int from_tensor, const tb_tensor_desc *src,
                       size_t bytes, ERL_NIF_TERM *exc)
{
    if (from_tensor && (src->dtype != d->dtype || !dense_on_host(&d->info))) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_DTYPE, "source",
                               "source: a tensor source needs the same dtype (%s, got %s) and a contiguous "
                               "CPU target",
                               tb_dtypes[d->dtype].name, tb_dtypes[src->dtype].name);
        return 0;
    }
    if (bytes != d->dense_bytes) {
        *exc =
            tb_raise_badarg(env, TB_WHY_OUT_OF_EXTENT, from_tensor ? "source" : "binary",
                            "%s: the tensor holds %lu bytes, got %s of %lu bytes", from_tensor ? "source" : "binary",
                            (unsigned long)d->dense_bytes, from_tensor ? "a tensor" : "a binary", (unsigned long)bytes);
        return 0;
    }
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
    ErlNifBinary bin;
    int from_tensor;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc) ||
        !get_write_source(env, argv[1], &from_tensor, &src, &bin, &exc))
        return exc;
    int on_device = d.info.device_type != TB_DEVICE_CPU || (from_tensor && src.info.device_type != TB_DEVICE_CPU);
    if (tb_reschedule_copy(env, "write", bin.size, on_device, tb_nif_write, argc, argv, &exc))
        return exc;
    if (!from_tensor && !tb_tensor_check_bool_bytes(env, "binary", d.dtype, bin.data, bin.size, &exc))
        return exc;
    if (!writable(env, &d, &exc) || !source_fits(env, &d, from_tensor, &src, bin.size, &exc))
        return exc;
    tb_range guard;
    if (!tb_storage_span(&d.info, tb_dtypes[d.dtype].element_size, &guard))
        return argv[0]; /* no elements: nothing to write */
    tb_binary_maker maker = TB_MAKER_TO_BINARY;
    tb_guard_status status = tb_storage_write_begin(&guard, &maker);
    if (status != TB_GUARD_OK)
        return raise_guard_refusal(env, status, maker);
    tb_shim_error err;
    int ok = from_tensor ? tb_shim_to_bytes(src.tensor->handle, d.info.data, &err)
                         : tb_shim_write_bytes(d.tensor->handle, bin.data, &err);
    tb_storage_write_end(&guard);
    /* A tensor source is the library's own (a region's export, a node's
     * pack: copy_into), where the caller's tensor is that source. */
    if (!ok && err.vanished &&
        (!tb_file_map_check(env, &d, 1, "tensor", 0, &exc) ||
         (from_tensor && !tb_file_map_check(env, &src, 1, "tensor", 0, &exc))))
        return exc;
    if (!ok)
        return tb_raise_error(env, TB_WHY_LIBTORCH, NULL, "%C: %s", "write", "write!", err.message);
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
        return tb_raise_error(env, TB_WHY_UNSUPPORTED, "device",
                              "device %T: this libtorch was built without %s, so to_device cannot copy to or "
                              "from a GPU; link a libtorch with %s (LIBTORCH_DIR)",
                              argv[1], name, name);
    }
    if (tb_reschedule_copy(env, "to_device", d.dense_bytes, on_device, tb_nif_to_device, argc, argv, &exc))
        return exc;
    tb_shim_out out;
    int ok = tb_shim_to_device(d.tensor->handle, device.type, device.index, &out.handle, &out.err);
    if (!ok && out.err.vanished && !tb_file_map_check(env, &d, 1, "tensor", 0, &exc))
        return exc;
    return tb_tensor_alloc_result(env, "to_device", ok, &out, d.info.ndim, d.info.sizes, d.dtype, d.dense_bytes);
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
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "start",
                               "start: expected an integer in 0..%ld for dimension %d, got %T", (long)size, dim,
                               argv[2]);
    if (!enif_get_int64(env, argv[3], &length) || length < 0 || length > size - start)
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "length",
                               "length: expected an integer in 0..%ld (start %ld, size %ld), got %T",
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
    return tb_storage_atoms[tb_storage_kind(&d.info)];
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

/* writable(Tensor): whether write/2 would write it now: true, read_only
 * (its storage is read-only, or the memory is a binary's bytes or a
 * read-only import), or frozen (a binary of to_binary(copy: false) shows
 * it). For doors that hand the memory to a library that writes it with no
 * guard of ours (ExTorch's from_blob): such memory goes as a copy. */
ERL_NIF_TERM tb_nif_writable(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc))
        return exc;
    if (tb_storage_read_only(&d.info))
        return tb_atoms.read_only;
    tb_range span;
    if (!tb_storage_span(&d.info, tb_dtypes[d.dtype].element_size, &span))
        return tb_atoms.true_;
    switch (tb_storage_write_check(&span)) {
    case TB_GUARD_FROZEN: return tb_atoms.frozen;
    case TB_GUARD_READ_ONLY: return tb_atoms.read_only;
    default: return tb_atoms.true_;
    }
}

/* overlaps(A, B): whether the bytes A's elements span (from its first
 * element to its last) and the bytes B's span overlap: whether a write
 * through one may change what the other reads. Memory in a shared-memory
 * region is compared by the region's file, so two mappings of one region
 * overlap where they map the same bytes. A tensor with no elements
 * overlaps nothing. Spans, not elements: two views that interleave (every
 * other element each) overlap. */
ERL_NIF_TERM tb_nif_overlaps(TB_NIF_PARAMS)
{
    tb_tensor_desc a, b;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "a", &a, &exc) || !tb_tensor_arg(env, argv[1], "b", &b, &exc))
        return exc;
    tb_range x, y;
    if (!tb_storage_span(&a.info, tb_dtypes[a.dtype].element_size, &x) ||
        !tb_storage_span(&b.info, tb_dtypes[b.dtype].element_size, &y))
        return tb_atoms.false_;
    int overlap = x.file_ino && y.file_ino ? x.file_dev == y.file_dev && x.file_ino == y.file_ino &&
                                                 x.file_lo < y.file_hi && y.file_lo < x.file_hi
                                           : x.lo < y.hi && y.lo < x.hi;
    return overlap ? tb_atoms.true_ : tb_atoms.false_;
}
