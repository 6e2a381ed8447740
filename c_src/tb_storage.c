#include "tb_storage.h"

#include <stdlib.h>

void tb_storage_init(tb_storage *s, tb_memory_kind kind, int flags, void (*free_fn)(tb_storage *))
{
    *s = (tb_storage){.abi = TB_ABI, .kind = (uint8_t)kind, .flags = (uint8_t)flags, .free = free_fn};
}

/* ---- The registry of guarded memory ------------------------------------ */

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

static int ranges_overlap(const tb_range *a, const tb_range *b)
{
    if (a->lo < b->hi && b->lo < a->hi)
        return 1;
    return a->file_ino && a->file_ino == b->file_ino && a->file_dev == b->file_dev && a->file_lo < b->file_hi &&
           b->file_lo < a->file_hi;
}

static int list_overlaps(const tb_range *head, const tb_range *r)
{
    for (const tb_range *e = head->next; e != head; e = e->next)
        if (ranges_overlap(e, r))
            return 1;
    return 0;
}

void tb_storage_guard_read_only(tb_storage *s, const tb_range *span)
{
    s->guard = *span;
    s->flags |= TB_STORAGE_GUARDED;
    enif_mutex_lock(tb_st->lock);
    tb_intervals_insert(&tb_st->read_only, &s->guard);
    __atomic_add_fetch(&tb_st->read_only_ranges, 1, __ATOMIC_RELEASE);
    enif_mutex_unlock(tb_st->lock);
}

int tb_storage_overlaps_read_only(uintptr_t ptr, uint64_t bytes)
{
    /* The common case, no binary pinned anywhere, takes no lock. */
    if (bytes == 0 || __atomic_load_n(&tb_st->read_only_ranges, __ATOMIC_ACQUIRE) == 0)
        return 0;
    enif_mutex_lock(tb_st->lock);
    int overlaps = tb_intervals_overlap(tb_st->read_only, ptr, ptr + bytes);
    enif_mutex_unlock(tb_st->lock);
    return overlaps;
}

/* Frozen memory is found by address in the set, and a second mapping of a
 * frozen shared-memory region by file in the (short) list of those. */
static int frozen_overlaps(const tb_range *r)
{
    return tb_intervals_overlap(tb_st->frozen, r->lo, r->hi) || (r->file_ino && list_overlaps(&tb_st->frozen_files, r));
}

tb_guard_status tb_storage_write_begin(tb_range *guard)
{
    tb_guard_status status = TB_GUARD_OK;
    enif_mutex_lock(tb_st->lock);
    if (frozen_overlaps(guard))
        status = TB_GUARD_FROZEN;
    else if (tb_intervals_overlap(tb_st->read_only, guard->lo, guard->hi))
        status = TB_GUARD_READ_ONLY;
    else
        list_push(&tb_st->writing, guard);
    enif_mutex_unlock(tb_st->lock);
    return status;
}

void tb_storage_write_end(tb_range *guard)
{
    enif_mutex_lock(tb_st->lock);
    list_remove(guard);
    enif_mutex_unlock(tb_st->lock);
}

tb_guard_status tb_storage_freeze(tb_range *guard)
{
    tb_guard_status status = TB_GUARD_OK;
    enif_mutex_lock(tb_st->lock);
    if (list_overlaps(&tb_st->writing, guard)) {
        status = TB_GUARD_WRITING;
    } else {
        tb_intervals_insert(&tb_st->frozen, guard);
        if (guard->file_ino)
            list_push(&tb_st->frozen_files, guard);
        tb_st->binary_views++;
    }
    enif_mutex_unlock(tb_st->lock);
    return status;
}

void tb_storage_unfreeze(tb_range *guard)
{
    enif_mutex_lock(tb_st->lock);
    tb_intervals_remove(&tb_st->frozen, guard);
    if (guard->file_ino)
        list_remove(guard);
    tb_st->binary_views--;
    enif_mutex_unlock(tb_st->lock);
}

long tb_storage_binary_views(void)
{
    enif_mutex_lock(tb_st->lock);
    long n = tb_st->binary_views;
    enif_mutex_unlock(tb_st->lock);
    return n;
}

/* ---- Release ---------------------------------------------------------- */

/* Releases met while one runs on this thread, run after it, in a loop. */
typedef struct deferred {
    struct deferred *next;
    tb_storage *storage;
} deferred;

/* One thread-local struct: each thread-local access from a shared library
 * is a call, so the release path makes one. */
typedef struct {
    int releasing;
    deferred *queue;
} release_state;

static _Thread_local release_state this_thread;

static void release_one(tb_storage *s)
{
    if (s->flags & TB_STORAGE_GUARDED) {
        enif_mutex_lock(tb_st->lock);
        tb_intervals_remove(&tb_st->read_only, &s->guard);
        __atomic_sub_fetch(&tb_st->read_only_ranges, 1, __ATOMIC_RELEASE);
        enif_mutex_unlock(tb_st->lock);
    }
    s->free(s);
}

void tb_storage_release(void *ctx)
{
    tb_storage *s = ctx;
    if (!s || s->kind == TB_MEMORY_UNPINNED)
        return; /* nothing held */
    release_state *me = &this_thread;
    if (me->releasing) {
        /* malloc: the thread may be one the BEAM never saw. Without
         * memory, release here, nested, rather than leak. */
        deferred *d = malloc(sizeof *d);
        if (d) {
            d->storage = s;
            d->next = me->queue;
            me->queue = d;
            return;
        }
        release_one(s);
        return;
    }
    me->releasing = 1;
    release_one(s);
    while (me->queue) {
        deferred *d = me->queue;
        me->queue = d->next;
        s = d->storage;
        free(d);
        release_one(s);
    }
    me->releasing = 0;
}

/* ---- Provenance -------------------------------------------------------- */

const tb_storage *tb_storage_of(const tb_shim_info *info)
{
    if (!info->storage_context)
        return NULL;
    size_t builds = __atomic_load_n(&tb_st->build_count, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < builds; i++) {
        if (info->storage_deleter == tb_st->storage_deleters[i]) {
            const tb_storage *s = info->storage_context;
            return s->abi == TB_ABI ? s : NULL;
        }
    }
    return NULL;
}

tb_memory_kind tb_storage_kind(const tb_shim_info *info)
{
    const tb_storage *s = tb_storage_of(info);
    return s ? (tb_memory_kind)s->kind : TB_MEMORY_OWNED;
}

int tb_storage_read_only(const tb_shim_info *info)
{
    const tb_storage *s = tb_storage_of(info);
    return s && (s->flags & TB_STORAGE_READ_ONLY);
}

const char *tb_storage_read_only_reason(const tb_shim_info *info)
{
    switch (tb_storage_kind(info)) {
    case TB_MEMORY_DLPACK:
        return "a DLPack import with the READ_ONLY flag, or a view of one";
    case TB_MEMORY_BINARY:
        return "a view of a binary's bytes; binaries are immutable";
    default:
        return "a view of a binary's bytes (binaries are immutable), or of a read-only tensor";
    }
}

int tb_storage_span(const tb_shim_info *info, unsigned element_size, tb_range *out)
{
    uint64_t span = element_size;
    for (int i = 0; i < info->ndim; i++) {
        if (info->sizes[i] == 0)
            return 0;
        /* Cannot overflow: every layout was checked when it was made. */
        span += (uint64_t)(info->sizes[i] - 1) * (uint64_t)info->strides[i] * element_size;
    }
    *out = (tb_range){.lo = (uintptr_t)info->data, .hi = (uintptr_t)info->data + span};
    const tb_storage *s = tb_storage_of(info);
    if (s && s->file_ino) {
        out->file_dev = s->file_dev;
        out->file_ino = s->file_ino;
        out->file_lo = s->file_offset + (uint64_t)((char *)info->data - (char *)info->storage_data);
        out->file_hi = out->file_lo + span;
    }
    return 1;
}
