#include "tb_handed.h"

/* Two buckets per address, from two multiplicative hashes of it. Exports
 * are malloc'd, 16 bytes apart at least: the low bits say nothing. */
static _Atomic uintptr_t *bucket_of(tb_handed *h, uintptr_t a, unsigned which)
{
    static const uint64_t mix[2] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full};
    uint64_t x = ((uint64_t)a >> 4) * mix[which];
    return h->buckets[x >> (64 - TB_HANDED_BUCKET_BITS)].slots;
}

void tb_handed_add(tb_handed *h, tb_registry *reg, tb_range *r)
{
    uintptr_t a = r->lo;
    for (unsigned which = 0; which < 2; which++) {
        _Atomic uintptr_t *slots = bucket_of(h, a, which);
        for (unsigned i = 0; i < TB_HANDED_WAYS; i++) {
            uintptr_t empty = 0;
            /* Release: what the caller set before is seen by the take. */
            if (atomic_load_explicit(&slots[i], memory_order_relaxed) == 0 &&
                atomic_compare_exchange_strong_explicit(&slots[i], &empty, a, memory_order_release,
                                                        memory_order_relaxed))
                return;
        }
    }
    tb_registry_add(reg, TB_REG_HANDED, r);
}

int tb_handed_take(tb_handed *h, tb_registry *reg, uintptr_t a)
{
    if (a == 0)
        return 0; /* the mark of a free slot, never an address */
    for (unsigned which = 0; which < 2; which++) {
        _Atomic uintptr_t *slots = bucket_of(h, a, which);
        for (unsigned i = 0; i < TB_HANDED_WAYS; i++) {
            uintptr_t held = a;
            if (atomic_load_explicit(&slots[i], memory_order_relaxed) == a &&
                atomic_compare_exchange_strong_explicit(&slots[i], &held, 0, memory_order_acquire,
                                                        memory_order_relaxed))
                return 1;
        }
    }
    /* Not in the set: in the registry, if anywhere (an empty shard is
     * skipped without its lock). */
    return tb_registry_take(reg, TB_REG_HANDED, a) != NULL;
}

long tb_handed_count(tb_handed *h)
{
    long n = 0;
    for (unsigned b = 0; b < TB_HANDED_BUCKETS; b++)
        for (unsigned i = 0; i < TB_HANDED_WAYS; i++)
            n += atomic_load_explicit(&h->buckets[b].slots[i], memory_order_relaxed) != 0;
    return n;
}
