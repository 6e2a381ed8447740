#include "tb_count.h"

#include "tb_stripe.h"

void tb_count_add(tb_count *count, long delta)
{
    atomic_fetch_add_explicit(&count->stripes[tb_stripe(TB_COUNT_STRIPES)].n, delta, memory_order_relaxed);
}

long tb_count_read(tb_count *count)
{
    long sum = 0;
    for (int i = 0; i < TB_COUNT_STRIPES; i++)
        sum += atomic_load_explicit(&count->stripes[i].n, memory_order_relaxed);
    return sum;
}
