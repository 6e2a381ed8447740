#include "tb_binary.h"

#include "tb_args.h"
#include "tb_dtype.h"
#include "tb_nif.h"
#include "tb_pin.h"
#include "tb_spec.h"
#include "tb_tensor.h"

/* ---- The registry of memory that binaries show -------------------------
 *
 * A binary is immutable, so while a binary made by to_binary(copy: false)
 * lives, write! must not change the bytes under it. Tensors that share
 * memory need not share a libtorch storage (a from_blob view of another
 * tensor has its own), so the registry holds address ranges. write! checks
 * it before writing and stays registered while it writes, so a binary view
 * is never made over memory in the middle of a write. Both lists are short
 * in practice; a check is linear in the binaries alive. */
typedef struct {
    ErlNifMutex *lock;
    tb_range frozen;  /* binary views: list head */
    tb_range writing; /* write! calls in progress: list head */
    long live;
} tb_registry;

static tb_registry *registry;

static void list_init(tb_range *head)
{
    head->prev = head->next = head;
}

static void list_push(tb_range *head, tb_range *r)
{
    r->next = head->next;
    r->prev = head;
    head->next->prev = r;
    head->next = r;
}

static void list_remove(tb_range *r)
{
    r->prev->next = r->next;
    r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

static int list_overlaps(const tb_range *head, uintptr_t lo, uintptr_t hi)
{
    for (const tb_range *r = head->next; r != head; r = r->next)
        if (r->lo < hi && lo < r->hi)
            return 1;
    return 0;
}

/* The bytes a tensor's elements span; 0 when it has none. */
static int tensor_range(const tb_shim_info *info, uintptr_t *lo, uintptr_t *hi)
{
    tb_dtype_id id = TB_DT_UINT8;
    tb_dtype_of_scalar_type(info->scalar_type, &id);
    uint64_t element_size = tb_dtypes[id].element_size, span = element_size;
    for (int i = 0; i < info->ndim; i++) {
        if (info->sizes[i] == 0)
            return 0;
        span += (uint64_t)(info->sizes[i] - 1) * (uint64_t)info->strides[i] * element_size;
    }
    *lo = (uintptr_t)info->data;
    *hi = *lo + span;
    return 1;
}

int tb_binary_write_begin(tb_write_guard *guard, const tb_shim_info *info)
{
    guard->prev = guard->next = NULL;
    if (!tensor_range(info, &guard->lo, &guard->hi))
        return 1;
    enif_mutex_lock(registry->lock);
    int frozen = list_overlaps(&registry->frozen, guard->lo, guard->hi);
    if (!frozen)
        list_push(&registry->writing, guard);
    enif_mutex_unlock(registry->lock);
    return !frozen;
}

void tb_binary_write_end(tb_write_guard *guard)
{
    if (!guard->next)
        return;
    enif_mutex_lock(registry->lock);
    list_remove(guard);
    enif_mutex_unlock(registry->lock);
}

long tb_binary_live(void)
{
    enif_mutex_lock(registry->lock);
    long n = registry->live;
    enif_mutex_unlock(registry->lock);
    return n;
}

/* ---- Binary views of tensors ----------------------------------------- */

/* What a resource binary from to_binary_view holds: a libtorch reference,
 * so the memory lives as long as the binary, and its registered range. */
typedef struct {
    tb_range range;
    tb_shim_tensor *ref;
} tb_binary_view;

static ErlNifResourceType *view_type;

static void view_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    tb_binary_view *v = obj;
    if (v->range.next) {
        enif_mutex_lock(registry->lock);
        list_remove(&v->range);
        registry->live--;
        enif_mutex_unlock(registry->lock);
    }
    if (v->ref)
        tb_shim_release(v->ref);
}

int tb_binary_load(ErlNifEnv *env, ErlNifResourceFlags flags, void **priv, void *old_priv)
{
    if (old_priv) {
        registry = old_priv;
    } else {
        /* Never freed: a later version of the code takes it over. */
        registry = enif_alloc(sizeof *registry);
        if (!registry)
            return 0;
        registry->lock = enif_mutex_create("tensor_blob_binary_views");
        if (!registry->lock)
            return 0;
        list_init(&registry->frozen);
        list_init(&registry->writing);
        registry->live = 0;
    }
    *priv = registry;
    view_type = enif_open_resource_type(env, NULL, "tensor_blob_binary_view", view_dtor, flags, NULL);
    return view_type != NULL;
}

ERL_NIF_TERM tb_nif_to_binary_view(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_tensor *t = tb_tensor_get(env, argv[0]);
    if (!t)
        return tb_raise_badarg(env, "tensor: expected a tensor, got %T", argv[0]);
    tb_shim_info info;
    tb_shim_info_of(t->handle, &info);
    if (info.device_type != TB_DEVICE_CPU)
        return tb_raise_badarg(env, "tensor: on %T; a binary can only show CPU memory",
                               tb_make_device(env, info.device_type, info.device_index));
    if (!info.is_contiguous)
        return tb_raise_badarg(env, "tensor: not contiguous (shape %T, strides %T); a binary shows row-major "
                                    "memory only, so copy it (copy: true)",
                               tb_make_shape(env, info.ndim, info.sizes),
                               tb_make_strides(env, info.ndim, info.strides));
    uintptr_t lo, hi;
    if (!tensor_range(&info, &lo, &hi)) {
        ERL_NIF_TERM empty;
        enif_make_new_binary(env, 0, &empty);
        return empty;
    }

    tb_binary_view *v = enif_alloc_resource(view_type, sizeof *v);
    if (!v)
        return tb_raise_error(env, "to_binary: out of memory allocating a binary view");
    v->range.prev = v->range.next = NULL;
    v->range.lo = lo;
    v->range.hi = hi;
    v->ref = NULL;
    enif_mutex_lock(registry->lock);
    int busy = list_overlaps(&registry->writing, lo, hi);
    if (!busy) {
        list_push(&registry->frozen, &v->range);
        registry->live++;
    }
    enif_mutex_unlock(registry->lock);
    if (busy) {
        enif_release_resource(v);
        return tb_raise_badarg(env, "tensor: write! is writing its memory right now; a binary view of it "
                                    "would change under the reader");
    }
    v->ref = tb_shim_retain(t->handle);
    ERL_NIF_TERM bin = enif_make_resource_binary(env, v, info.data, hi - lo);
    enif_release_resource(v);
    return bin;
}

/* ---- Tensor views of binaries ---------------------------------------- */

ERL_NIF_TERM tb_nif_from_binary_view(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifBinary bin;
    tb_layout l;
    tb_dtype_id dtype;
    tb_spec_result r;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_binary_args(env, argv, &bin, &l, &dtype, &r, &exc))
        return exc;

    /* The view covers the pinned copy's bytes, never the argument's: a
     * binary of 64 bytes or less lives on the caller's heap, which moves,
     * and the pin copies it into its own env, where it stays put. */
    tb_pin *pin = tb_pin_new(argv[0]);
    if (!pin)
        return tb_raise_error(env, "from_binary: out of memory pinning the binary");
    ErlNifBinary pinned;
    enif_inspect_binary(pin->env, pin->owner, &pinned);
    uint64_t alignment = tb_pointer_alignment((uint64_t)(uintptr_t)pinned.data);
    tb_shim_tensor *h;
    tb_shim_error err;
    if (r.numel > 0 && alignment < l.element_size) {
        tb_pin_release(pin);
        if (argv[3] != tb_atoms.true_)
            return tb_raise_badarg(env, "binary: its bytes start at an address aligned to %u bytes, and %s needs %u "
                                        "(a part of a larger binary, or a small one, may start anywhere); "
                                        "use copy: true or copy: :if_needed",
                                   (unsigned)alignment, tb_dtypes[dtype].name, (unsigned)l.element_size);
        /* copy: :if_needed: a copy is what the caller asked for here. */
        if (!tb_shim_from_bytes(bin.data, l.ndim, l.shape, tb_dtypes[dtype].torch_scalar_type, &h, &err))
            return tb_raise_error(env, "from_binary: %s", err.message);
        return tb_tensor_make(env, h);
    }
    if (!tb_shim_from_blob(pinned.data, l.ndim, l.shape, l.strides, tb_dtypes[dtype].torch_scalar_type,
                           TB_DEVICE_CPU, 0, pin, tb_pin_release_read_only, &h, &err))
        return tb_raise_error(env, "from_binary: %s", err.message);
    return tb_tensor_make(env, h);
}
