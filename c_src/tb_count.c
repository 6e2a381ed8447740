#include "tb_count.h"

static atomic_uint next_stripe;
static _Thread_local int my_stripe = -1;

void tb_count_add(tb_count *count, long delta)
{
    if (my_stripe < 0)
        my_stripe = (int)(atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed) % TB_COUNT_STRIPES);
    atomic_fetch_add_explicit(&count->stripes[my_stripe].n, delta, memory_order_relaxed);
}

long tb_count_read(tb_count *count)
{
    long sum = 0;
    for (int i = 0; i < TB_COUNT_STRIPES; i++)
        sum += atomic_load_explicit(&count->stripes[i].n, memory_order_relaxed);
    return sum;
}
