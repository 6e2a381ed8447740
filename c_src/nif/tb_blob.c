/* to_blob and from_blob: describing a tensor's memory, and viewing described
 * memory as a tensor with its owner pinned. */

#include "tb_layout.h"
#include "tb_nifs.h"
#include "tb_pin.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "torch_shim.h"

ERL_NIF_TERM tb_nif_blob_fields(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc))
        return exc;

    uint64_t ptr = (uint64_t)(uintptr_t)d.info.data;
    unsigned element_size = tb_dtypes[d.dtype].element_size;
    /* A tuple, not the map: the Erlang facade builds the map with literal
     * keys, which costs a copy of the values, where a map made here is
     * sorted and checked key by key. */
    ERL_NIF_TERM fields[8] = {
        enif_make_uint64(env, ptr),
        tb_make_shape(env, d.info.ndim, d.info.sizes),
        tb_make_strides(env, d.info.ndim, d.info.strides),
        tb_atoms.dtypes[d.dtype],
        tb_make_device(env, d.info.device_type, d.info.device_index),
        enif_make_uint(env, element_size),
        enif_make_uint64(env, tb_layout_byte_size(d.info.ndim, d.info.sizes, d.info.strides, element_size)),
        enif_make_uint64(env, tb_pointer_alignment(ptr)),
    };
    return enif_make_tuple_from_array(env, fields, 8);
}

/* The owner proves where its memory is; a spec that declares another
 * device is refused by name, not as an extent outside it. */
static ERL_NIF_TERM owner_elsewhere(ErlNifEnv *env, const tb_device *declared, int type, int index)
{
    return tb_raise_badarg(env, TB_WHY_WRONG_DEVICE, "device",
                           "device: the blob declares %T, but the owner's memory is on %T",
                           tb_make_device(env, declared->type, declared->index), tb_make_device(env, type, index));
}

static ERL_NIF_TERM outside_owner(ErlNifEnv *env, const tb_layout *l, uint64_t bytes, uint64_t base, uint64_t size)
{
    return tb_raise_badarg(env, TB_WHY_OUT_OF_EXTENT, "ptr",
                           "ptr: [%lu, %lu + %lu) lies outside the owner's memory [%lu, %lu + %lu)",
                           (unsigned long)l->ptr, (unsigned long)l->ptr, (unsigned long)bytes, (unsigned long)base,
                           (unsigned long)base, (unsigned long)size);
}

/* The memory must lie inside an owner whose extent is known. An empty view
 * reads no byte, so its pointer need not: libtorch itself makes empty
 * slices whose strides reach past their storage. What a slice of it may
 * address cannot overflow (tb_layout_check refuses that). */
static int view_within_owner(const tb_layout *l, const tb_layout_result *r, uint64_t base, uint64_t size)
{
    return r->byte_size == 0 || tb_extent_inside(l->ptr, r->byte_size, base, size);
}

/* 1 when a spec's layout, dtype and device are exactly a tensor's. */
static int describes(const tb_layout *l, tb_dtype_id dtype, const tb_device *device, const tb_shim_info *t)
{
    if (l->ptr != (uint64_t)(uintptr_t)t->data || l->ndim != t->ndim || t->device_type != device->type ||
        t->device_index != device->index || tb_dtypes[dtype].torch_scalar_type != t->scalar_type)
        return 0;
    for (int i = 0; i < l->ndim; i++)
        if (l->shape[i] != t->sizes[i] || l->strides[i] != t->strides[i])
            return 0;
    return 1;
}

/* from_blob's arguments, decoded once before any work: the spec, the
 * owner term and whether to pin it; then whether the memory is
 * registered read-only. */
typedef struct {
    tb_spec s;
    ERL_NIF_TERM owner;
    tb_tensor *owner_tensor; /* when pinning one of our tensors */
    int pin;
    int read_only;
} view_args;

/* The storage of a view pinning our tensor `owner`: 1, or 0 with *answer
 * set (the owner itself, a tensor sharing its storage, or an error). Its
 * extent is known, so it proves which device the memory is on. */
static int tensor_owner_storage(ErlNifEnv *env, tb_tensor *owner, const view_args *v, tb_storage **storage,
                                ERL_NIF_TERM *answer)
{
    const tb_layout *l = &v->s.l;
    tb_shim_info o;
    tb_shim_info_of(owner->handle, &o);
    uint64_t base = (uint64_t)(uintptr_t)o.storage_data, size = o.storage_bytes;
    if (o.device_type != v->s.device.type || o.device_index != v->s.device.index) {
        *answer = owner_elsewhere(env, &v->s.device, o.device_type, o.device_index);
        return 0;
    }
    if (!view_within_owner(l, &v->s.r, base, size)) {
        *answer = outside_owner(env, l, v->s.r.byte_size, base, size);
        return 0;
    }
    /* Inside the owner's storage at a whole element: the view shares
     * that storage, whose reference count is the pin, and whose header
     * says what the memory is. Only memory that another storage
     * registered read-only needs a pin of its own to carry the flag. */
    int owner_read_only = tb_storage_read_only(&o);
    int shares = v->s.r.byte_size > 0 && (!v->read_only || owner_read_only);
    /* (The owner's own layout was answered before: make_blob_view.) */
    if (shares && tb_multiple_of_element(l->ptr - base, l->element_size)) {
        tb_shim_tensor *h;
        tb_shim_error err;
        if (!tb_shim_alias(owner->handle, l->ptr - base, l->ndim, l->shape, l->strides,
                           tb_dtypes[v->s.dtype].torch_scalar_type, &h, &err))
            *answer = tb_raise_error(env, TB_WHY_LIBTORCH, NULL, "from_blob: %s", err.message);
        else
            *answer = tb_tensor_return(env, h);
        return 0;
    }
    *storage = tb_pin_tensor(owner, v->read_only || owner_read_only);
    return 1;
}

/* The storage of a view pinning any other term: 1 (*proven when the
 * owner is a binary whose extent covers the view; read-only over a binary
 * nested in it), or 0 with *answer set to the error. */
static int term_owner_storage(ErlNifEnv *env, ERL_NIF_TERM owner_term, const view_args *v, tb_storage **storage,
                              int *proven, ERL_NIF_TERM *answer)
{
    int read_only = v->read_only;
    tb_pin *p = tb_pin_term(owner_term);
    if (!p) {
        *answer = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "from_blob: out of memory pinning the owner");
        return 0;
    }
    /* Check the pinned copy: a small binary is copied, not shared,
     * and then no pointer into the caller's copy is covered. */
    ErlNifBinary bin;
    if (tb_pin_binary(p, &bin)) {
        uint64_t base = (uint64_t)(uintptr_t)bin.data;
        /* A binary's bytes are the CPU's, whatever other device types the
         * table holds. */
        if (v->s.device.type != TB_DEVICE_CPU) {
            tb_storage_release(&p->header);
            *answer = owner_elsewhere(env, &v->s.device, TB_DEVICE_CPU, 0);
            return 0;
        }
        if (!view_within_owner(&v->s.l, &v->s.r, base, bin.size)) {
            tb_storage_release(&p->header);
            *answer = outside_owner(env, &v->s.l, v->s.r.byte_size, base, bin.size);
            return 0;
        }
        *proven = 1;
    } else if (v->s.r.byte_size > 0 && v->s.device.type == TB_DEVICE_CPU &&
               tb_pin_holds_binary_over(p, (uintptr_t)v->s.l.ptr, (uintptr_t)v->s.l.ptr + v->s.r.byte_size)) {
        /* A binary nested in the owner: its bytes are immutable, and
         * guarded against every other tensor while this view lives. */
        tb_range span = {.lo = (uintptr_t)v->s.l.ptr, .hi = (uintptr_t)v->s.l.ptr + v->s.r.byte_size};
        tb_storage_guard_read_only(&p->header, &span);
        read_only = 1;
    }
    if (read_only)
        p->header.flags |= TB_STORAGE_READ_ONLY;
    *storage = &p->header;
    return 1;
}

/* A view of the memory the decoded spec describes; the owner is pinned
 * when v->pin. */
static ERL_NIF_TERM make_blob_view(ErlNifEnv *env, view_args *v)
{
    ERL_NIF_TERM exc;
    /* The storage: a pin of the owner, or nothing for an unpinned view.
     * An owner whose extent is known (our tensor, a binary) also proves
     * which device the memory is on: the runtime need not be asked. */
    tb_tensor *owner = v->owner_tensor;
    if (owner && v->s.r.byte_size > 0) {
        /* A tensor's own blob, unchanged (a round trip through to_blob):
         * that tensor, as numpy.asarray answers an array with itself. Its
         * lifetime and read-only status stay its own; what the checks below
         * ask of memory (its extent, its device, whether it is registered
         * read-only) this tensor already answers, as it shows that memory. */
        tb_shim_info o;
        tb_shim_info_of(owner->handle, &o);
        if (describes(&v->s.l, v->s.dtype, &v->s.device, &o))
            return enif_make_resource(env, owner);
    }
    v->read_only = tb_storage_overlaps_read_only((uintptr_t)v->s.l.ptr, v->s.r.byte_size);
    tb_storage *storage;
    int proven = 0;
    if (owner) {
        if (!tensor_owner_storage(env, owner, v, &storage, &exc))
            return exc;
        proven = 1;
    } else if (v->pin) {
        if (!term_owner_storage(env, v->owner, v, &storage, &proven, &exc))
            return exc;
    } else {
        storage = tb_pin_none(v->read_only);
    }
    return tb_tensor_view(env, &v->s, storage, proven);
}

/* from_blob's arguments, decoded once into *a, in one pass: the pin flag,
 * then the spec (tb_term's decoder: from its map, or from the fields the
 * Erlang facade matched out of it). 0 with *out set when the call answers
 * now: a raised error, or the call rescheduled on a dirty scheduler, which
 * pins an owner term of many terms (the pin copies it, and may walk it,
 * in time that grows with its size) before the spec is read. */
static int get_args(ErlNifEnv *env, tb_nif_fun *self, int argc, const ERL_NIF_TERM argv[], const tb_spec_terms *fields,
                    view_args *a, ERL_NIF_TERM *out)
{
    ERL_NIF_TERM pin_term = argv[argc - 1];
    a->owner = argv[argc - 2];
    if (!tb_get_boolean(pin_term, &a->pin)) {
        *out = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "pin", "pin: expected a boolean, got %T", pin_term);
        return 0;
    }
    /* One of our tensors is pinned by its storage, never copied: at once. */
    a->owner_tensor = a->pin ? tb_tensor_get(env, a->owner) : NULL;
    if (a->pin && !a->owner_tensor && enif_thread_type() == ERL_NIF_THR_NORMAL_SCHEDULER &&
        !tb_pin_term_is_small(env, a->owner)) {
        *out = enif_schedule_nif(env, "from_blob", ERL_NIF_DIRTY_JOB_CPU_BOUND, self, argc, argv);
        return 0;
    }
    return fields ? tb_get_spec(env, fields, &a->s, out) : tb_get_spec_map(env, argv[0], &a->s, out);
}

/* from_blob(Spec, Owner, Pin) */
ERL_NIF_TERM tb_nif_from_blob(TB_NIF_PARAMS)
{
    ERL_NIF_TERM answer;
    view_args a;
    if (!get_args(env, tb_nif_from_blob, argc, argv, NULL, &a, &answer))
        return answer;
    return make_blob_view(env, &a);
}

/* from_blob_fields(Ptr, Shape, Dtype, Strides, Device, Owner, Pin) */
ERL_NIF_TERM tb_nif_from_blob_fields(TB_NIF_PARAMS)
{
    tb_spec_terms fields = {argv[0], argv[1], argv[2], argv[3], argv[4]};
    ERL_NIF_TERM answer;
    view_args a;
    if (!get_args(env, tb_nif_from_blob_fields, argc, argv, &fields, &a, &answer))
        return answer;
    return make_blob_view(env, &a);
}
