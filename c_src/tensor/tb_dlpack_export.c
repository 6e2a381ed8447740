#include "tb_dlpack_export.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

#include "tb_count.h"
#include "tb_handed.h"
#include "tb_intervals.h"
#include "tb_registry.h"
#include "tb_release.h"
#include "tb_rtype.h"
#include "tb_state.h"
#include "tb_storage.h"
#include "tensor_blob_dlpack.h"

/* ---- Exports ---------------------------------------------------------- */

/* One allocation per export: the managed tensor (first, so that self and
 * manager_ctx are the same address), the libtorch reference that keeps the
 * memory alive, then shape and strides. malloc, not enif_alloc: a consumer
 * may call the deleter from any thread, including ones the BEAM never saw. */
typedef struct {
    union {
        tb_DLManagedTensorVersioned versioned;
        tb_DLManagedTensor legacy;
    } m;
    tb_shim_tensor *ref;
    /* Its address, while handed out (tb_dlpack_hand_out) and not yet
     * imported or deleted: in the set of addresses handed out, or, past
     * its room, in the registry as this range (tb_handed.h). An import by
     * any build takes it, so the layout up to the flag below is part of
     * the ABI (tb_state.h). */
    tb_range out;
    _Atomic int handed; /* a TB_HANDED_ value */
    int64_t dims[];     /* shape[ndim], then strides[ndim] */
} tb_export;

/* ---- Addresses handed out ------------------------------------------------ */

/* The addresses of our managed tensors given out as integers (consumed
 * capsules, the C bridge), until one import takes each or its deleter
 * runs: a set without a lock, the registry past its room (tb_handed.h),
 * so an import of an address finds out whether it is ours and still
 * unclaimed without reading it, and takes it in the same step.
 * The handed flag: a TB_HANDED_ value (tb_dlpack_export.h). */

static void hand_out_as(tb_export *e, int handed)
{
    uintptr_t a = (uintptr_t)e;
    e->out = (tb_range){.lo = a, .hi = a + 1};
    /* Set before the address can be found: see export_free. */
    atomic_store_explicit(&e->handed, handed, memory_order_relaxed);
    tb_handed_add(&tb_library_state->handed, &tb_library_state->registry, &e->out);
}

void tb_dlpack_hand_out(void *managed, int versioned)
{
    /* The managed tensor is the export's first member. */
    hand_out_as(managed, versioned ? TB_HANDED_VERSIONED : TB_HANDED_LEGACY);
}

void tb_dlpack_hand_back(void *managed, int handed)
{
    hand_out_as(managed, handed);
}

int tb_dlpack_claim(uintptr_t address)
{
    if (!tb_handed_take(&tb_library_state->handed, &tb_library_state->registry, address))
        return TB_HANDED_NO;
    /* Ours: the address is the export's (its managed tensor is first). */
    tb_export *e = (tb_export *)address;
    int handed = atomic_exchange_explicit(&e->handed, TB_HANDED_NO, memory_order_relaxed);
    /* Never 0 once taken (set before the add); read as unknown if it were. */
    return handed == TB_HANDED_NO ? TB_HANDED_UNKNOWN : handed;
}

static void export_free(tb_export *e)
{
    /* Handed out and unclaimed, the address leaves the set. The flag spares
     * the search to exports not in it: it is not 0 whenever the address is there
     * (set before the add, cleared by a claim after its take), as a deleter
     * sees it, which runs after the hand-out that gave its caller the
     * address. A claim racing the deleter (two consumers of one address) may
     * leave it set here: the take decides, whichever comes first removes the
     * address, the other finds nothing. */
    if (atomic_load_explicit(&e->handed, memory_order_relaxed))
        tb_handed_take(&tb_library_state->handed, &tb_library_state->registry, e->out.lo);
    tb_shim_release(e->ref);
    free(e);
    tb_count_add(&tb_library_state->capsules, -1);
}

/* The deleters consumers call, once each. They free manager_ctx rather than
 * self, so a consumer that copied the struct elsewhere still frees ours. */
static void export_deleter_versioned(tb_DLManagedTensorVersioned *self)
{
    if (self && self->manager_ctx)
        export_free(self->manager_ctx);
}

static void export_deleter_legacy(tb_DLManagedTensor *self)
{
    if (self && self->manager_ctx)
        export_free(self->manager_ctx);
}

long tb_dlpack_live(void)
{
    return tb_count_read(&tb_library_state->capsules);
}

void *tb_dlpack_export(tb_shim_tensor *handle, int versioned, int read_only)
{
    tb_tensor_desc d;
    tb_tensor_exported x;
    if (!tb_tensor_describe(handle, &d))
        return NULL;
    return tb_dlpack_export_of(handle, tb_tensor_exported_from(&d, &x), versioned, read_only);
}

void tb_dlpack_dltensor_of(const tb_tensor_exported *x, int64_t *shape, int64_t *strides, tb_DLTensor *out)
{
    int no_elements = 0;
    for (int i = 0; i < x->ndim; i++)
        no_elements |= x->sizes[i] == 0;
    /* The spec asks for NULL data when there are no elements. */
    out->data = no_elements ? NULL : x->data;
    out->device.device_type = tb_device_dlpack_type(x->device_type);
    out->device.device_id = tb_device_indexed(x->device_type) ? x->device_index : 0;
    out->ndim = x->ndim;
    out->dtype.code = tb_dtypes[x->dtype].dl_code;
    out->dtype.bits = tb_dtypes[x->dtype].dl_bits;
    out->dtype.lanes = tb_dtypes[x->dtype].dl_lanes;
    out->shape = shape;
    out->strides = strides;
    out->byte_offset = 0;
}

void *tb_dlpack_export_of(tb_shim_tensor *handle, const tb_tensor_exported *x, int versioned, int read_only)
{
    size_t ndim = (size_t)x->ndim;
    tb_export *e = malloc(sizeof *e + 2 * ndim * sizeof(int64_t));
    if (!e)
        return NULL;

    for (size_t i = 0; i < ndim; i++) {
        e->dims[i] = x->sizes[i];
        e->dims[ndim + i] = x->strides[i];
    }
    tb_DLTensor dl;
    tb_dlpack_dltensor_of(x, e->dims, e->dims + ndim, &dl);

    e->ref = tb_shim_retain(handle);
    atomic_init(&e->handed, 0);
    if (versioned) {
        tb_DLManagedTensorVersioned *v = &e->m.versioned;
        v->version.major = TB_DLPACK_MAJOR_VERSION;
        v->version.minor = TB_DLPACK_MINOR_VERSION;
        v->manager_ctx = e;
        v->deleter = export_deleter_versioned;
        v->flags = read_only ? TB_DLPACK_FLAG_READ_ONLY : 0;
        v->dl_tensor = dl;
    } else {
        tb_DLManagedTensor *l = &e->m.legacy;
        l->dl_tensor = dl;
        l->manager_ctx = e;
        l->deleter = export_deleter_legacy;
    }
    tb_count_add(&tb_library_state->capsules, 1);
    return &e->m;
}

int tb_dlpack_own_export(void *m, int versioned, int read_only)
{
    if (read_only)
        return 0;
    if (versioned) {
        tb_DLManagedTensorVersioned *v = m;
        return v->deleter == export_deleter_versioned && !(v->flags & TB_DLPACK_FLAG_READ_ONLY);
    }
    tb_DLManagedTensor *l = m;
    return l->deleter == export_deleter_legacy;
}

/* ---- Capsules -------------------------------------------------------- */

static tb_rtype capsule_type;

/* Held for a few instructions: an exchange, or reading metadata. */
static void capsule_hold(tb_capsule *c)
{
    while (atomic_flag_test_and_set_explicit(&c->busy, memory_order_acquire))
        ;
}

static void capsule_let_go(tb_capsule *c)
{
    atomic_flag_clear_explicit(&c->busy, memory_order_release);
}

void tb_dlpack_release(void *managed, int versioned)
{
    if (versioned) {
        tb_DLManagedTensorVersioned *v = managed;
        if (v->deleter)
            v->deleter(v);
    } else {
        tb_DLManagedTensor *l = managed;
        if (l->deleter)
            l->deleter(l);
    }
}

/* A deleter off the schedulers: the release thread runs it (at once only
 * where no job can be allocated). */
typedef struct {
    tb_release_job job; /* first */
    void *managed;
    int versioned;
} deferred_managed;

static void release_deferred_job(tb_release_job *job)
{
    deferred_managed *d = (deferred_managed *)job;
    tb_dlpack_release(d->managed, d->versioned);
    free(d);
    tb_count_add(&tb_library_state->deferred, -1);
}

void tb_dlpack_release_later(void *managed, int versioned, int held)
{
    deferred_managed *d = malloc(sizeof *d);
    if (!d) {
        tb_dlpack_release(managed, versioned);
        return;
    }
    d->job.run = release_deferred_job;
    d->managed = managed;
    d->versioned = versioned;
    tb_count_add(&tb_library_state->deferred, 1);
    tb_release_later(&d->job, held);
}

static void capsule_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    tb_capsule *c = obj;
    void *m = atomic_exchange(&c->managed, NULL);
    if (m)
        tb_dlpack_release(m, c->versioned);
    if (c->source)
        enif_release_resource(c->source);
}

int tb_dlpack_open_type(ErlNifEnv *env, ErlNifResourceFlags flags)
{
    ErlNifResourceTypeInit init = {.dtor = capsule_dtor, .members = 1};
    return tb_rtype_open(env, "tensor_blob_dlpack_capsule", &init, flags, &capsule_type);
}

tb_capsule *tb_capsule_get(ErlNifEnv *env, ERL_NIF_TERM term)
{
    tb_capsule *c;
    return tb_rtype_get(env, term, &capsule_type, (void **)&c) ? c : NULL;
}

tb_capsule *tb_capsule_arg(ErlNifEnv *env, ERL_NIF_TERM term, ERL_NIF_TERM *exc)
{
    tb_capsule *c = tb_capsule_get(env, term);
    if (!c)
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "capsule", "capsule: expected a DLPack capsule, got %T", term);
    return c;
}

void tb_dlpack_check_managed(void *m, int versioned, tb_dlpack_checked *chk)
{
    if (versioned)
        tb_dlpack_check_versioned(m, chk);
    else
        tb_dlpack_check_legacy(m, chk);
}

void *tb_capsule_managed(ErlNifEnv *env, tb_capsule *c, int take, tb_dlpack_checked *chk, ERL_NIF_TERM *exc)
{
    capsule_hold(c);
    void *m = take ? atomic_exchange(&c->managed, NULL) : atomic_load(&c->managed);
    if (m && chk)
        tb_dlpack_check_managed(m, c->versioned, chk);
    capsule_let_go(c);
    if (!m)
        *exc = tb_raise_badarg(env, TB_WHY_GONE, "capsule", "capsule: already consumed");
    return m;
}

ERL_NIF_TERM tb_capsule_make(ErlNifEnv *env, tb_tensor *t, int versioned, int read_only)
{
    tb_capsule *c = tb_rtype_alloc(&capsule_type, sizeof *c);
    if (!c)
        return tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "to_dlpack: out of memory allocating a capsule");
    tb_tensor_exported scratch;
    const tb_tensor_exported *x = tb_tensor_exported_of(t, &scratch);
    void *m = x ? tb_dlpack_export_of(t->handle, x, versioned, read_only) : NULL;
    c->source = NULL;
    if (!m) {
        atomic_init(&c->managed, NULL);
        enif_release_resource(c);
        return tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "to_dlpack: out of memory");
    }
    atomic_init(&c->managed, m);
    atomic_flag_clear(&c->busy);
    c->versioned = versioned;
    enif_keep_resource(t);
    c->source = t;

    ERL_NIF_TERM term = enif_make_resource(env, c);
    enif_release_resource(c);
    return term;
}
