/* The addresses of DLPack managed tensors handed out as integers (the C
 * bridge, consumed capsules), each taken back at most once: by the import
 * that claims it, or by its deleter. Kept in a set of addresses without a
 * lock, so that an export and its deleter cost two compare-and-swaps on a
 * cache line of their own, and threads exporting at once never wait on
 * each other; past the set's room, in the registry (tb_registry.h, kind
 * TB_REG_HANDED), which has none to run out of. Pure C: no BEAM, no
 * libtorch (c_test/test_handed.c races it from threads under
 * ThreadSanitizer).
 *
 * An address lives in one of two buckets of eight slots (one cache line
 * each), picked by two hashes of it; a slot holds an address or 0. The set
 * holds each address at most once (an address is handed out again only
 * after it was taken), so a take that finds it and swaps it for 0 is the
 * only one. Nothing an address points to is ever read here: an integer
 * from Erlang is only compared. */
#ifndef TB_HANDED_H
#define TB_HANDED_H

#include <stdatomic.h>
#include <stdint.h>

#include "tb_registry.h"

#define TB_HANDED_BUCKET_BITS 12
#define TB_HANDED_BUCKETS (1u << TB_HANDED_BUCKET_BITS)
#define TB_HANDED_WAYS 8

typedef struct {
    _Alignas(64) _Atomic uintptr_t slots[TB_HANDED_WAYS];
} tb_handed_bucket;

/* All zeros is the empty set. */
typedef struct {
    tb_handed_bucket buckets[TB_HANDED_BUCKETS];
} tb_handed;

/* Hands out r->lo (not 0), which must not be out already: in the set, or
 * in reg when both its buckets are full (then r must stay put, unchanged,
 * until taken). What the caller sets before is seen by the take that gets
 * it. */
void tb_handed_add(tb_handed *h, tb_registry *reg, tb_range *r);

/* 1 when address a was out and this call took it back (of threads taking
 * one address, one gets it); 0 otherwise, and for 0. */
int tb_handed_take(tb_handed *h, tb_registry *reg, uintptr_t a);

/* Addresses in the set (not those in the registry), counted slot by slot:
 * for tests and a quiet moment, not for decisions. */
long tb_handed_count(tb_handed *h);

#endif
