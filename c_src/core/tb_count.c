#include "tb_count.h"

#include "tb_stripe.h"

void tb_count_add(tb_count *count, long delta)
{
    unsigned t = tb_stripe_thread();
    if (t < TB_COUNT_OWNED) {
        /* Written by this thread alone: readers see the old sum or the new. */
        atomic_long *n = &count->stripes[t].n;
        atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + delta, memory_order_relaxed);
        return;
    }
    atomic_fetch_add_explicit(&count->stripes[TB_COUNT_OWNED + t % TB_COUNT_SHARED].n, delta, memory_order_relaxed);
}

long tb_count_read(tb_count *count)
{
    long sum = 0;
    for (int i = 0; i < TB_COUNT_STRIPES; i++)
        sum += atomic_load_explicit(&count->stripes[i].n, memory_order_relaxed);
    return sum;
}
