/* Byte ranges registered while in use, and a set of them that answers "does
 * anything overlap this range?" in O(log n): a treap keyed by start address
 * whose nodes carry the largest end below them (an interval tree). Pure C,
 * no locking: the caller holds its shard's lock (tb_registry.h). */
#ifndef TB_INTERVALS_H
#define TB_INTERVALS_H

#include <stdint.h>

/* A byte range. The memory is named twice: its virtual addresses, and, for
 * a shared-memory region, the region's file and the offsets in it, so a
 * second mapping of the same region is recognised as the same memory.
 * prev/next link it into a list; left/right/max_hi into an interval set. */
typedef struct tb_range {
    struct tb_range *prev, *next;
    uintptr_t lo, hi;  /* [lo, hi) in this process's address space */
    uint64_t file_dev; /* 0, or the region's st_dev and st_ino */
    uint64_t file_ino;
    uint64_t file_lo, file_hi; /* [file_lo, file_hi) in the region */
    struct tb_range *left, *right;
    uintptr_t max_hi; /* the largest hi in this subtree */
    unsigned home;    /* where a registry keeps it (tb_registry.c) */
    unsigned tag;     /* what its holder says of it (a frozen range: who made the binary, tb_storage.h) */
} tb_range;

/* root is NULL for an empty set. r must not be in a set; it must stay put
 * until removed. Only addresses count here, not files. */
void tb_intervals_insert(tb_range **root, tb_range *r);
/* r must be in the set. */
void tb_intervals_remove(tb_range **root, tb_range *r);
/* A range of the set that overlaps [lo, hi), or NULL. */
const tb_range *tb_intervals_find(const tb_range *root, uintptr_t lo, uintptr_t hi);
/* A range of the set that starts at lo, or NULL. */
tb_range *tb_intervals_at(tb_range *root, uintptr_t lo);

#endif
