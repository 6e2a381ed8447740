#include "tb_slots.h"

int tb_slot_open(tb_slots *s, uintptr_t value)
{
    for (unsigned w = 0; w < TB_SLOT_WORDS; w++) {
        uint64_t bits = atomic_load_explicit(&s->open[w], memory_order_relaxed);
        while (~bits) {
            unsigned b = (unsigned)__builtin_ctzll(~bits);
            /* Acquire: the slot's last closer emptied it before the close. */
            if (atomic_compare_exchange_weak_explicit(&s->open[w], &bits, bits | (1ull << b), memory_order_acquire,
                                                      memory_order_relaxed)) {
                unsigned k = w * 64 + b;
                atomic_store_explicit(&s->value[k], value, memory_order_release);
                return (int)k;
            }
        }
    }
    return -1;
}

uintptr_t tb_slot_take(tb_slots *s, unsigned k)
{
    if (k >= TB_SLOTS)
        return 0;
    return atomic_exchange_explicit(&s->value[k], 0, memory_order_acq_rel);
}

int tb_slot_put(tb_slots *s, unsigned k, uintptr_t value)
{
    if (k >= TB_SLOTS || value == 0)
        return 0;
    if (!(atomic_load_explicit(&s->open[k / 64], memory_order_relaxed) & (1ull << (k % 64))))
        return 0;
    uintptr_t empty = 0;
    return atomic_compare_exchange_strong_explicit(&s->value[k], &empty, value, memory_order_acq_rel,
                                                   memory_order_relaxed);
}

void tb_slot_close(tb_slots *s, unsigned k)
{
    if (k >= TB_SLOTS)
        return;
    atomic_fetch_and_explicit(&s->open[k / 64], ~(1ull << (k % 64)), memory_order_release);
}
