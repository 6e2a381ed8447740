#include "tb_binary.h"

#include "tb_nifs.h"
#include "tb_pin.h"
#include "tb_rtype.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"

/* ---- Binary views of tensors ------------------------------------------
 *
 * A binary is immutable: while a binary made by to_binary(copy: false)
 * (or for node_pack or to_nx) lives, its memory is frozen (tb_storage.h),
 * with who made it, and write! refuses it, naming that. The
 * resource behind the binary holds a libtorch reference, so the memory
 * lives as long as the binary. */
typedef struct {
    tb_range range;      /* frozen while the binary lives */
    tb_shim_tensor *ref; /* taken once range is frozen: set means both */
} tb_binary_view;

static tb_rtype view_type;

static void view_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    tb_binary_view *v = obj;
    if (v->ref) {
        tb_storage_unfreeze(&v->range);
        tb_shim_release(v->ref);
    }
}

int tb_binary_open_type(ErlNifEnv *env, ErlNifResourceFlags flags)
{
    ErlNifResourceTypeInit init = {.dtor = view_dtor, .members = 1};
    return tb_rtype_open(env, "tensor_blob_binary_view", &init, flags, &view_type);
}

/* false: to_binary(copy: false). Else the maker (to_binary, node_pack,
 * to_nx: who makes the binary, which a refused write names) asks for a
 * view if one can be made (if_needed): where none can, the reason
 * (device, not_contiguous, shared_memory), and the caller copies. */
static int get_maker(ErlNifEnv *env, ERL_NIF_TERM term, int *if_needed, tb_binary_maker *maker, ERL_NIF_TERM *exc)
{
    *if_needed = term != tb_atoms.false_;
    if (!*if_needed || term == tb_atoms.to_binary)
        *maker = TB_MAKER_TO_BINARY;
    else if (term == tb_atoms.node_pack)
        *maker = TB_MAKER_NODE_PACK;
    else if (term == tb_atoms.to_nx)
        *maker = TB_MAKER_TO_NX;
    else {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_OPTION, "maker",
                               "maker: expected false, to_binary, node_pack or to_nx, got %T", term);
        return 0;
    }
    return 1;
}

/* A binary shows CPU memory, row-major: 0 with *answer (the reason when
 * if_needed, else the refusal) when d's is not. */
static int viewable(ErlNifEnv *env, const tb_tensor_desc *d, int if_needed, ERL_NIF_TERM *answer)
{
    if (if_needed && d->info.device_type != TB_DEVICE_CPU)
        *answer = tb_atoms.device;
    else if (if_needed && !d->info.is_contiguous)
        *answer = tb_atoms.not_contiguous;
    else if (d->info.device_type != TB_DEVICE_CPU)
        *answer =
            tb_raise_badarg(env, TB_WHY_WRONG_DEVICE, "tensor", "tensor: on %T; a binary can only show CPU memory",
                            tb_make_device(env, d->info.device_type, d->info.device_index));
    else if (!d->info.is_contiguous)
        *answer = tb_raise_badarg(env, TB_WHY_NOT_CONTIGUOUS, "tensor",
                                  "tensor: not contiguous (shape %T, strides %T); a binary shows row-major "
                                  "memory only, so copy it (%C)",
                                  tb_make_shape(env, d->info.ndim, d->info.sizes),
                                  tb_make_strides(env, d->info.ndim, d->info.strides), "#{copy => true}", "copy: true");
    else
        return 1;
    return 0;
}

/* Memory in a shared-memory region, however this tensor came to it (a
 * slice, an import, a view of a term that holds it; the span names the
 * region's file): another program can shrink the file, and a read of its
 * pages then raises SIGBUS. The library's own copies of it are guarded
 * (tb_fault.h); a binary's readers cannot be. */
static ERL_NIF_TERM refuse_mapped_file(ErlNifEnv *env, int if_needed)
{
    if (if_needed)
        return tb_atoms.shared_memory;
    return tb_raise_badarg(env, TB_WHY_UNSAFE, "tensor",
                           "tensor: its memory is a mapped file (a shared-memory region, a safetensors "
                           "file), which another program can shrink, and a read of a binary of it would then kill "
                           "the VM (SIGBUS); copy "
                           "it (%C), or accept that risk with %C",
                           "#{copy => true}", "copy: true", "#{copy => false, unsafe_shared_memory => true}",
                           "copy: false, unsafe_shared_memory: true");
}

/* A resource binary over span, its memory frozen while the binary lives. */
static ERL_NIF_TERM frozen_view(ErlNifEnv *env, const tb_tensor_desc *d, const tb_range *span, tb_binary_maker maker)
{
    tb_binary_view *v = tb_rtype_alloc(&view_type, sizeof *v);
    if (!v)
        return tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "to_binary: out of memory allocating a binary view");
    v->range = *span;
    v->ref = NULL;
    if (tb_storage_freeze(&v->range, maker) != TB_GUARD_OK) {
        enif_release_resource(v);
        return tb_raise_badarg(env, TB_WHY_UNSAFE, "tensor",
                               "tensor: %C is writing its memory right now; a binary view of it "
                               "would change under the reader",
                               "write/2", "write!");
    }
    v->ref = tb_shim_retain(d->tensor->handle);
    ERL_NIF_TERM bin = enif_make_resource_binary(env, v, d->info.data, span->hi - span->lo);
    enif_release_resource(v);
    return bin;
}

ERL_NIF_TERM tb_nif_to_binary_view(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM answer;
    int if_needed;
    tb_binary_maker maker;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &answer) || !get_maker(env, argv[2], &if_needed, &maker, &answer))
        return answer;
    if (!viewable(env, &d, if_needed, &answer))
        return answer;
    tb_range span;
    if (!tb_storage_span(&d.info, tb_dtypes[d.dtype].element_size, &span)) {
        ERL_NIF_TERM empty;
        enif_make_new_binary(env, 0, &empty);
        return empty;
    }
    int unguarded = argv[1] == tb_atoms.true_; /* the caller accepts a mapped file's risk */
    if (span.file_ino && !unguarded)
        return refuse_mapped_file(env, if_needed);
    /* A view of a binary's bytes: that binary, or the part of it. */
    ERL_NIF_TERM part;
    if (tb_pin_binary_part(env, tb_storage_of(&d.info), &span, &part))
        return part;
    return frozen_view(env, &d, &span, maker);
}

/* ---- Tensor views of binaries ------------------------------------------ */

ERL_NIF_TERM tb_nif_from_binary_view(TB_NIF_PARAMS)
{
    ErlNifBinary bin;
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_binary_args(env, argv, &bin, &d, &exc))
        return exc;
    /* A copy happens only for misaligned bytes, and only when allowed. */
    uint64_t copied =
        argv[3] == tb_atoms.true_ && tb_pointer_alignment((uint64_t)(uintptr_t)bin.data) < 16 ? bin.size : 0;
    /* A bool view reads every byte first, as a copy would. */
    if (tb_reschedule_copy(env, "from_binary", d.dtype == TB_DT_BOOL ? bin.size : copied, 0, tb_nif_from_binary_view,
                           argc, argv, &exc))
        return exc;
    if (!tb_tensor_check_bool_bytes(env, "binary", d.dtype, bin.data, bin.size, &exc))
        return exc;
    const tb_layout *l = &d.layout;

    /* The view covers the pinned copy's bytes, never the argument's: a
     * binary of 64 bytes or less lives on the caller's heap, which moves,
     * and the pin copies it into its own env, where it stays put. */
    tb_pin *pin = tb_pin_term(argv[0]);
    if (!pin)
        return tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "from_binary: out of memory pinning the binary");
    ErlNifBinary pinned;
    tb_pin_binary(pin, &pinned);
    uint64_t alignment = tb_pointer_alignment((uint64_t)(uintptr_t)pinned.data);
    tb_shim_out out;
    if (d.check.numel > 0 && alignment < l->element_size) {
        tb_storage_release(&pin->header);
        if (argv[3] != tb_atoms.true_)
            return tb_raise_badarg(env, TB_WHY_MISALIGNED, "binary",
                                   "binary: its bytes start at an address aligned to %u bytes, and %s needs %u "
                                   "(a part of a larger binary, or a small one, may start anywhere); "
                                   "use %C",
                                   (unsigned)alignment, tb_dtypes[d.dtype].name, (unsigned)l->element_size,
                                   "#{copy => true} or #{copy => if_needed}", "copy: true or copy: :if_needed");
        /* copy: :if_needed: a copy is what the caller asked for here. */
        int ok = tb_shim_from_bytes(bin.data, l->ndim, l->shape, tb_dtypes[d.dtype].torch_scalar_type, &out.handle,
                                    &out.err);
        return tb_tensor_alloc_result(env, "from_binary", ok, &out, l->ndim, l->shape, d.dtype, d.check.byte_size);
    }
    int ok = tb_shim_from_blob(pinned.data, l->ndim, l->shape, l->strides, tb_dtypes[d.dtype].torch_scalar_type,
                               TB_DEVICE_CPU, 0, &pin->header, tb_storage_release, &out.handle, &out.err);
    return tb_tensor_result(env, "from_binary", ok, &out);
}
