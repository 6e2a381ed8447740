#include "tb_stripe.h"

static tb_stripe_numbers own_numbers;
static tb_stripe_numbers *numbers = &own_numbers;
/* This thread's number plus one, in this build; 0 until it first asks. */
static _Thread_local unsigned mine;

void tb_stripe_load(tb_stripe_numbers *shared)
{
    numbers = shared;
}

unsigned tb_stripe_thread(void)
{
    unsigned t = mine;
    if (!t)
        mine = t = atomic_fetch_add_explicit(&numbers->next, 1, memory_order_relaxed) + 1;
    return t - 1;
}
