#include "tb_count.h"

static tb_count_threads *numbers;
/* This thread's number in this build, from 1; 0 until it first adds. */
static _Thread_local unsigned mine;

void tb_count_load(tb_count_threads *threads)
{
    numbers = threads;
}

void tb_count_add(tb_count *count, long delta)
{
    unsigned t = mine;
    if (!t) {
        /* Once the stripes are all owned, no more numbers are drawn: the
         * counter never wraps round to an owned one. */
        if (atomic_load_explicit(&numbers->next, memory_order_relaxed) < TB_COUNT_STRIPES)
            t = atomic_fetch_add_explicit(&numbers->next, 1, memory_order_relaxed) + 1;
        mine = t = t && t < TB_COUNT_STRIPES ? t : TB_COUNT_STRIPES;
    }
    if (t < TB_COUNT_STRIPES) {
        /* Written by this thread alone: readers see the old sum or the new. */
        atomic_long *n = &count->stripes[t].n;
        atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + delta, memory_order_relaxed);
        return;
    }
    atomic_fetch_add_explicit(&count->stripes[0].n, delta, memory_order_relaxed);
}

long tb_count_read(tb_count *count)
{
    long sum = 0;
    for (int i = 0; i < TB_COUNT_STRIPES; i++)
        sum += atomic_load_explicit(&count->stripes[i].n, memory_order_relaxed);
    return sum;
}
