/* What a piece of memory is: the one home of provenance.
 *
 * Every tensor made here over memory that libtorch did not allocate (a
 * pinned view, a DLPack import, a view of a binary, a shared-memory region)
 * has a libtorch storage whose deleter is tb_storage_release and whose
 * deleter context starts with a tb_storage header. What the memory is (its
 * kind, whether it is read-only) is read from that header: it travels with
 * the storage, so slices and transposes report the same, and a hot upgrade
 * to a new build of the library changes nothing (the deleters of every
 * build loaded are known, see tb_state.h, and stay mapped).
 *
 * It also keeps the registry of guarded memory: what binaries show (frozen),
 * what must never be written (read-only: a binary's bytes, a read-only
 * DLPack import), the writes in progress, and the mapped regions
 * (tb_registry.h). Ranges are compared by address and, in shared-memory
 * regions, by region and offset. */
#ifndef TB_STORAGE_H
#define TB_STORAGE_H

#include <stdint.h>

#include "tb_state.h"
#include "torch_shim.h"

/* The storage kinds: one line each, the one table of what memory can be.
 *
 *   X(id, name, atom, keeps an owner, region)
 *
 * atom: what memory/1 answers for it (several kinds may answer the same);
 * keeps an owner: the tensor keeps the memory's owner alive (pinned/1 is
 * true); region: a mapping of a shared-memory file, which has a name
 * another process opens (tb_storage_map_file). The enum, the atoms, the
 * columns below and tables/0's `storage` list (from which the facades'
 * pinned/1 and memory() derive, checked by their tests) come from it.
 *
 * The kind is read from headers that older builds wrote (a hot upgrade
 * keeps their tensors): bump TB_ABI (tb_state.h) when an existing kind's
 * value or meaning changes (renumbered, removed, split, reused) or the
 * header's layout does. A kind appended at the end needs no bump: no
 * older header carries it (tb_storage_kind reads a kind past the table,
 * from a newer build of the same ABI, as owned). */
#define TB_STORAGE_KINDS(X)                                                                                            \
    X(TB_MEMORY_OWNED, owned, owned, 0, 0)          /* libtorch allocated it */                                        \
    X(TB_MEMORY_PINNED, pinned, pinned, 1, 0)       /* a view that keeps an owner term or tensor alive */              \
    X(TB_MEMORY_UNPINNED, unpinned, unpinned, 0, 0) /* a view whose memory the caller answers for */                   \
    X(TB_MEMORY_DLPACK, dlpack, dlpack, 1, 0)       /* a DLPack import: the producer's memory */                       \
    X(TB_MEMORY_BINARY, binary, binary, 1, 0)       /* a view of a BEAM binary's bytes */                              \
    X(TB_MEMORY_REGION, region, ipc, 0, 1)          /* a mapping of a POSIX shared-memory region */                    \
    X(TB_MEMORY_CUDA_IPC, cuda_ipc, ipc, 0, 0)      /* a mapping of a CUDA IPC handle */                               \
    X(TB_MEMORY_TORCH_SHM, torch_shm, ipc, 0, 1)    /* a region in PyTorch's format: its data, after a count header */ \
    X(TB_MEMORY_FILE, file, file, 0, 0)             /* a private mapping of a file (safetensors) */

typedef enum {
#define TB_STORAGE_KIND_ENUM(id, name, atom, keeps_owner, region) id,
    TB_STORAGE_KINDS(TB_STORAGE_KIND_ENUM)
#undef TB_STORAGE_KIND_ENUM
        TB_MEMORY_COUNT
} tb_memory_kind;

/* The table's columns, indexed by kind. */
typedef struct {
    const char *name; /* the kind, as tables/0 names it */
    const char *atom; /* what memory/1 answers */
    uint8_t keeps_owner, region;
} tb_storage_kind_info;

static const tb_storage_kind_info tb_storage_kinds[TB_MEMORY_COUNT] = {
#define TB_STORAGE_KIND_INFO(id, name, atom, keeps_owner, region) [id] = {#name, #atom, keeps_owner, region},
    TB_STORAGE_KINDS(TB_STORAGE_KIND_INFO)
#undef TB_STORAGE_KIND_INFO
};

/* What memory/1 answers for each kind, made from the table at load. */
extern ERL_NIF_TERM tb_storage_atoms[TB_MEMORY_COUNT];
void tb_storage_load(ErlNifEnv *env);

enum {
    TB_STORAGE_READ_ONLY = 1,
    TB_STORAGE_GUARDED = 2, /* guard is in the read-only set */
    /* the kernel was asked what file the memory is (file_*), once; or the
     * header is shared by many storages (no facts of one's memory) */
    TB_STORAGE_ASKED = 4
};

typedef struct tb_storage {
    uint32_t abi; /* TB_ABI */
    uint8_t kind; /* tb_memory_kind */
    uint8_t flags;
    /* Frees what the kind holds, and the header's container if allocated. */
    void (*free)(struct tb_storage *self);
    tb_range guard;                           /* in the read-only set when TB_STORAGE_GUARDED */
    uint64_t file_dev, file_ino, file_offset; /* a region's file, or 0 */
} tb_storage;

void tb_storage_init(tb_storage *s, tb_memory_kind kind, int flags, void (*free_fn)(tb_storage *));

/* The deleter of every storage made here; ctx is a tb_storage. Releases run
 * one after another, never nested: a release that frees the last tensor of
 * another storage queues that one, so a chain of a million views of views
 * is freed in a loop, not in a million stack frames. Any thread. */
void tb_storage_release(void *ctx);

/* The header of a tensor's storage, or NULL when libtorch owns the memory
 * (or a storage not made by this library). */
const tb_storage *tb_storage_of(const tb_shim_info *info);
tb_memory_kind tb_storage_kind(const tb_shim_info *info);
/* 1 when the memory must not be written through this tensor. */
int tb_storage_read_only(const tb_shim_info *info);
const char *tb_storage_read_only_reason(const tb_shim_info *info);

/* The bytes a tensor's elements span, as a range to compare: 0 when it
 * has no elements. element_size comes from the dtype table. */
int tb_storage_span(const tb_shim_info *info, unsigned element_size, tb_range *out);

/* Registers memory that must never be written (the storage's own guard);
 * tb_storage_release removes it. */
void tb_storage_guard_read_only(tb_storage *s, const tb_range *span);
/* 1 when [ptr, ptr + bytes) overlaps registered read-only memory. */
int tb_storage_overlaps_read_only(uintptr_t ptr, uint64_t bytes);

typedef enum { TB_GUARD_OK, TB_GUARD_FROZEN, TB_GUARD_READ_ONLY, TB_GUARD_WRITING } tb_guard_status;

/* Who made a binary that shows a tensor's memory, on the caller's behalf
 * or not: a refused write names it, and how to let go of it. */
typedef enum { TB_MAKER_TO_BINARY, TB_MAKER_NODE_PACK, TB_MAKER_TO_NX } tb_binary_maker;

/* Brackets an in-place write: refused while a binary shows the memory or
 * when it is read-only; otherwise registered until write_end. *maker: who
 * made the binary, when one refuses it (TB_GUARD_FROZEN). */
tb_guard_status tb_storage_write_begin(tb_range *guard, tb_binary_maker *maker);
void tb_storage_write_end(tb_range *guard);
/* What tb_storage_write_begin would answer now, registering nothing. */
tb_guard_status tb_storage_write_check(const tb_range *guard);
/* A binary view, made by maker: refused while a write is in progress. */
tb_guard_status tb_storage_freeze(tb_range *guard, tb_binary_maker maker);
void tb_storage_unfreeze(tb_range *guard);

long tb_storage_binary_views(void);

/* A shared-memory file mapped (read and write, shared) for length bytes,
 * and registered: the mapping's range names the file and offsets, so that
 * any tensor over its memory, however made, is compared by file with the
 * file's other mappings. The header s gets the file's identity, its data
 * starting data_offset bytes in. NULL with *error (an errno) when not. */
void *tb_storage_map_file(tb_storage *s, int fd, size_t length, uint64_t data_offset, tb_range *mapping, int *error);
/* A file mapped privately (its pages copied on write: the file is never
 * written) for length bytes from byte at (a multiple of the page size),
 * and registered as a mapping of its own: a
 * private mapping shares its pages with no other, so its range is named
 * by the mapping itself (TB_PRIVATE_DEV), not by the file. Any tensor over
 * it answers as memory that can vanish (another program can shrink the
 * file): the library's copies of it run under the SIGBUS guard, and
 * binaries of it are refused unless asked for (to_binary_view). NULL with
 * *error (an errno) when not. tb_storage_unmap_file undoes it. */
#define TB_PRIVATE_DEV UINT64_MAX
void *tb_storage_map_private(tb_storage *s, int fd, uint64_t at, size_t length, tb_range *mapping, int *error);
/* Unregisters and unmaps what tb_storage_map_file mapped. */
void tb_storage_unmap_file(tb_range *mapping);

#endif
