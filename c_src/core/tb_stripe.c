#include "tb_stripe.h"

#include <stdint.h>

static tb_stripe_numbers own_numbers;
static tb_stripe_numbers *numbers = &own_numbers;
/* This thread's number plus one, in this build; 0 until it first asks. */
static _Thread_local unsigned mine;

void tb_stripe_load(tb_stripe_numbers *shared)
{
    numbers = shared;
}

/* Numbers are drawn up to this one, and never again after it, so the
 * counter never wraps round to a number a thread holds (an owned stripe
 * of tb_count is written by one thread alone). The threads after it take
 * a number above it, spread by the address of their own variable. */
#define LAST_DRAWN (1u << 30)

static unsigned draw(void)
{
    if (atomic_load_explicit(&numbers->next, memory_order_relaxed) < LAST_DRAWN) {
        unsigned t = atomic_fetch_add_explicit(&numbers->next, 1, memory_order_relaxed);
        if (t < LAST_DRAWN)
            return t;
    }
    uint64_t x = (uint64_t)(uintptr_t)&mine * 0x9E3779B97F4A7C15ull;
    return LAST_DRAWN + (unsigned)(x >> 54);
}

unsigned tb_stripe_thread(void)
{
    unsigned t = mine;
    if (!t)
        mine = t = draw() + 1;
    return t - 1;
}
