#include "tb_storage.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "tb_proc_maps.h"

ERL_NIF_TERM tb_storage_atoms[TB_MEMORY_COUNT];

void tb_storage_load(ErlNifEnv *env)
{
    for (int k = 0; k < TB_MEMORY_COUNT; k++)
        tb_storage_atoms[k] = enif_make_atom(env, tb_storage_kinds[k].atom);
}

void tb_storage_init(tb_storage *s, tb_memory_kind kind, int flags, void (*free_fn)(tb_storage *))
{
    *s = (tb_storage){.abi = TB_ABI, .kind = (uint8_t)kind, .flags = (uint8_t)flags, .free = free_fn};
}

/* ---- Guarded memory (tb_registry.h) ------------------------------------ */

void tb_storage_guard_read_only(tb_storage *s, const tb_range *span)
{
    s->guard = *span;
    s->flags |= TB_STORAGE_GUARDED;
    tb_registry_add(&tb_library_state->registry, TB_REG_READ_ONLY, &s->guard);
}

int tb_storage_overlaps_read_only(uintptr_t ptr, uint64_t bytes)
{
    tb_range r = {.lo = ptr, .hi = ptr + bytes};
    return bytes > 0 && tb_registry_overlap(&tb_library_state->registry, TB_REG_BIT(TB_REG_READ_ONLY), &r) >= 0;
}

/* A write and a binary view of the same memory each register first and
 * look for the other second: of two racing, at least one sees the other
 * (tb_registry.h), so a binary never shows a write in progress. */
tb_guard_status tb_storage_write_begin(tb_range *guard, tb_binary_maker *maker)
{
    tb_registry_add(&tb_library_state->registry, TB_REG_WRITING, guard);
    tb_range hit;
    int kind = tb_registry_find(&tb_library_state->registry, TB_REG_BIT(TB_REG_FROZEN) | TB_REG_BIT(TB_REG_READ_ONLY),
                                guard, &hit);
    if (kind < 0)
        return TB_GUARD_OK;
    tb_registry_remove(&tb_library_state->registry, TB_REG_WRITING, guard);
    /* A binary showing it is the reason to give, when there is one. */
    if (kind == TB_REG_FROZEN ||
        tb_registry_find(&tb_library_state->registry, TB_REG_BIT(TB_REG_FROZEN), guard, &hit) >= 0) {
        *maker = (tb_binary_maker)hit.tag;
        return TB_GUARD_FROZEN;
    }
    return TB_GUARD_READ_ONLY;
}

void tb_storage_write_end(tb_range *guard)
{
    tb_registry_remove(&tb_library_state->registry, TB_REG_WRITING, guard);
}

tb_guard_status tb_storage_write_check(const tb_range *guard)
{
    if (tb_registry_overlap(&tb_library_state->registry, TB_REG_BIT(TB_REG_FROZEN), guard) >= 0)
        return TB_GUARD_FROZEN;
    if (tb_registry_overlap(&tb_library_state->registry, TB_REG_BIT(TB_REG_READ_ONLY), guard) >= 0)
        return TB_GUARD_READ_ONLY;
    return TB_GUARD_OK;
}

tb_guard_status tb_storage_freeze(tb_range *guard, tb_binary_maker maker)
{
    guard->tag = maker;
    tb_registry_add(&tb_library_state->registry, TB_REG_FROZEN, guard);
    if (tb_registry_overlap(&tb_library_state->registry, TB_REG_BIT(TB_REG_WRITING), guard) >= 0) {
        tb_registry_remove(&tb_library_state->registry, TB_REG_FROZEN, guard);
        return TB_GUARD_WRITING;
    }
    tb_count_add(&tb_library_state->binary_views, 1);
    return TB_GUARD_OK;
}

void tb_storage_unfreeze(tb_range *guard)
{
    tb_registry_remove(&tb_library_state->registry, TB_REG_FROZEN, guard);
    tb_count_add(&tb_library_state->binary_views, -1);
}

long tb_storage_binary_views(void)
{
    return tb_count_read(&tb_library_state->binary_views);
}

/* A mapping of a file, whole, in the registry of mapped memory under the
 * identity its storage was given. */
static void *register_mapping(const tb_storage *s, void *addr, size_t length, tb_range *mapping)
{
    *mapping = (tb_range){.lo = (uintptr_t)addr,
                          .hi = (uintptr_t)addr + length,
                          .file_dev = s->file_dev,
                          .file_ino = s->file_ino,
                          .file_lo = 0,
                          .file_hi = length};
    tb_registry_add(&tb_library_state->registry, TB_REG_MAPPED, mapping);
    return addr;
}

void *tb_storage_map_file(tb_storage *s, int fd, size_t length, uint64_t data_offset, tb_range *mapping, int *error)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        *error = errno;
        return NULL;
    }
    void *addr = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
        *error = errno;
        return NULL;
    }
    s->file_dev = (uint64_t)st.st_dev;
    s->file_ino = (uint64_t)st.st_ino;
    s->file_offset = data_offset;
    return register_mapping(s, addr, length, mapping);
}

void *tb_storage_map_private(tb_storage *s, int fd, uint64_t at, size_t length, tb_range *mapping, int *error)
{
    void *addr = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)at);
    if (addr == MAP_FAILED) {
        *error = errno;
        return NULL;
    }
    s->file_dev = TB_PRIVATE_DEV;
    s->file_ino = (uint64_t)(uintptr_t)addr;
    s->file_offset = 0;
    return register_mapping(s, addr, length, mapping);
}

void tb_storage_unmap_file(tb_range *mapping)
{
    tb_registry_remove(&tb_library_state->registry, TB_REG_MAPPED, mapping);
    munmap((void *)mapping->lo, mapping->hi - mapping->lo);
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
    if (s->flags & TB_STORAGE_GUARDED)
        tb_registry_remove(&tb_library_state->registry, TB_REG_READ_ONLY, &s->guard);
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
    size_t builds = __atomic_load_n(&tb_library_state->build_count, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < builds; i++) {
        if (info->storage_deleter == tb_library_state->storage_deleters[i]) {
            const tb_storage *s = info->storage_context;
            return s->abi == TB_ABI ? s : NULL;
        }
    }
    return NULL;
}

tb_memory_kind tb_storage_kind(const tb_shim_info *info)
{
    const tb_storage *s = tb_storage_of(info);
    /* A kind past the table is one a newer build of the same ABI appended
     * (loaded before this one was loaded again): this build cannot name
     * it, and answers as for memory it does not know. */
    return s && s->kind < TB_MEMORY_COUNT ? (tb_memory_kind)s->kind : TB_MEMORY_OWNED;
}

int tb_storage_read_only(const tb_shim_info *info)
{
    const tb_storage *s = tb_storage_of(info);
    return s && (s->flags & TB_STORAGE_READ_ONLY);
}

const char *tb_storage_read_only_reason(const tb_shim_info *info)
{
    switch (tb_storage_kind(info)) {
    case TB_MEMORY_DLPACK: return "a DLPack import with the READ_ONLY flag, or a view of one";
    case TB_MEMORY_BINARY: return "a view of a binary's bytes; binaries are immutable";
    default: return "a view of a binary's bytes (binaries are immutable), or of a read-only tensor";
    }
}

/* Memory another library handed us (a view pinning its term, an import)
 * may be its own mapping of a shared-memory file, which the registry of
 * our mappings does not hold: the kernel names the file. Asked once per
 * storage (its owner keeps that memory mapped while the storage lives), on
 * first use; two threads asking at once write the same answer. Headers
 * shared by many storages (unpinned views, views pinning one of our
 * tensors) are marked asked from the start. */
static void ask_kernel_once(tb_storage *s, const tb_shim_info *info)
{
    if (s->kind != TB_MEMORY_PINNED && s->kind != TB_MEMORY_DLPACK)
        return;
    if (__atomic_load_n(&s->flags, __ATOMIC_ACQUIRE) & TB_STORAGE_ASKED)
        return;
    tb_proc_maps_file f;
    if (info->storage_data && tb_proc_maps_shared_file_at((uintptr_t)info->storage_data, &f)) {
        __atomic_store_n(&s->file_dev, f.dev, __ATOMIC_RELAXED);
        __atomic_store_n(&s->file_offset, f.offset, __ATOMIC_RELAXED);
        __atomic_store_n(&s->file_ino, f.ino, __ATOMIC_RELEASE);
    }
    __atomic_fetch_or(&s->flags, TB_STORAGE_ASKED, __ATOMIC_RELEASE);
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
    if (s && info->device_type == TB_DEVICE_CPU)
        ask_kernel_once((tb_storage *)s, info);
    tb_range mapping;
    if (s && __atomic_load_n(&s->file_ino, __ATOMIC_ACQUIRE)) {
        out->file_dev = s->file_dev;
        out->file_ino = s->file_ino;
        out->file_lo = s->file_offset + (uint64_t)((char *)info->data - (char *)info->storage_data);
    } else if (info->device_type == TB_DEVICE_CPU &&
               tb_registry_mapping_at(&tb_library_state->registry, out->lo, &mapping)) {
        /* Another tensor over a region's memory (an import, a view of a
         * term that holds it): named by the region's file all the same. */
        out->file_dev = mapping.file_dev;
        out->file_ino = mapping.file_ino;
        out->file_lo = mapping.file_lo + (out->lo - mapping.lo);
    } else {
        return 1;
    }
    out->file_hi = out->file_lo + span;
    return 1;
}
