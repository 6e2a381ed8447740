/* The registry of guarded memory, sharded by address so that threads
 * working on memory no other thread touches never share a lock or a cache
 * line. Pure C over pthreads: no BEAM, no libtorch (c_test/test_registry.c
 * races it from threads under ThreadSanitizer).
 *
 * Five kinds of ranges: memory a binary shows (frozen), memory never
 * written through us (read-only), write! calls in progress (writing),
 * mapped shared-memory regions (mapped, found by address to name a second
 * mapping's memory by file), and the addresses of DLPack managed tensors
 * handed out as integers that the set of tb_handed.h has no room for
 * (handed: one byte at each, taken back at most once by the import that
 * claims it, or removed by its deleter).
 *
 * A range lives in one shard: at the smallest level whose chunk (1 MiB,
 * 1 GiB, everything) holds its size, in the shard of the chunk where it
 * starts; so it reaches at most into the next chunk, and a query visits
 * the shards of the chunks it covers and of the one before, at each level.
 * A shard with no range of the kinds asked is skipped by atomic loads,
 * without its lock. A query that covers more than a few chunks of a level
 * (a large tensor) first reads that level's summary: a bit per shard that
 * may hold ranges of the kind, so that it visits only those, in one load
 * when there are none, whatever its size. A bit is set by the first range
 * of its shard and kind, and cleared only by such a query, which finds the
 * shard empty: ranges coming and going in one shard (a binary viewed again
 * and again) never write the summary, which every thread reads.
 *
 * Memory a binary shows (frozen) is kept by thread instead: each thread
 * adds to a stripe of its own, so processes taking binary views of memory
 * that lies close together (small tensors allocated one after another)
 * never share a lock, and a query for frozen memory (write!, which copies
 * anyway) visits every stripe.
 *
 * Handed-out addresses are points, found only at their exact start: each
 * is kept in the shard of the first level that its address hashes to, not
 * by chunk, so that exports made one after another (in one megabyte) on
 * different threads seldom share a lock; a query for them by overlap
 * visits every shard of that level.
 *
 * Ranges that name a region's file also sit in one list, by file: only
 * region memory is ever compared by file, and regions are few. */
#ifndef TB_REGISTRY_H
#define TB_REGISTRY_H

#include <pthread.h>

#include "tb_intervals.h"

typedef enum {
    TB_REG_FROZEN,
    TB_REG_READ_ONLY,
    TB_REG_WRITING,
    TB_REG_MAPPED,
    TB_REG_HANDED,
    TB_REG_KINDS
} tb_reg_kind;

#define TB_REG_BIT(kind) (1u << (kind))
#define TB_REG_LEVELS 3
#define TB_REG_SHARDS 64
#define TB_REG_STRIPES 16

typedef struct {
    _Alignas(64) pthread_mutex_t lock;
    tb_range *sets[TB_REG_KINDS];
    long count[TB_REG_KINDS]; /* ranges of each kind here: read without the lock */
} tb_reg_shard;

typedef struct {
    tb_reg_shard shards[TB_REG_LEVELS][TB_REG_SHARDS];
    /* Bit i: shard i of the level may hold ranges of the kind (set under
     * its lock whenever it holds some; read without). Not kept for
     * handed-out addresses, which are found by start. */
    _Alignas(64) uint64_t summary[TB_REG_LEVELS][TB_REG_KINDS];
    tb_reg_shard stripes[TB_REG_STRIPES]; /* frozen ranges, by thread */
    _Alignas(64) pthread_mutex_t files_lock;
    tb_range files[TB_REG_KINDS]; /* list heads */
    long file_count;
} tb_registry;

/* 0 when a mutex cannot be made. The registry is never destroyed. */
int tb_registry_init(tb_registry *reg);

/* r must stay put, unchanged, until removed; its range is not empty. */
void tb_registry_add(tb_registry *reg, tb_reg_kind kind, tb_range *r);
void tb_registry_remove(tb_registry *reg, tb_reg_kind kind, tb_range *r);

/* The first kind in `kinds` (a mask of TB_REG_BIT) with a range that
 * overlaps r by address, or by file when r names one; -1 when none. */
int tb_registry_overlap(tb_registry *reg, unsigned kinds, const tb_range *r);
/* The same, the range found copied to *hit (under the lock it was found
 * under: it may be gone once this returns). */
int tb_registry_find(tb_registry *reg, unsigned kinds, const tb_range *r, tb_range *hit);

/* The mapped region holding address p, copied to *out; 0 when none. */
int tb_registry_mapping_at(tb_registry *reg, uintptr_t p, tb_range *out);

/* A range of the kind that starts at lo, removed from the registry under
 * the lock it was found under: of threads taking the same range, one gets
 * it, the others NULL (as does a start where no range of the kind is). */
tb_range *tb_registry_take(tb_registry *reg, tb_reg_kind kind, uintptr_t lo);

#endif
