#include "tb_count.h"

#include <stdint.h>

static tb_count_threads *numbers;
/* This thread's stripe in this build, plus one; 0 until it first adds. */
static _Thread_local unsigned mine;

void tb_count_load(tb_count_threads *threads)
{
    numbers = threads;
}

/* An owned stripe while any is left, else a shared one, by thread. */
static unsigned take_stripe(void)
{
    /* Once the owned stripes are all taken, no more numbers are drawn: the
     * counter never wraps round to an owned one. */
    if (atomic_load_explicit(&numbers->next, memory_order_relaxed) < TB_COUNT_OWNED) {
        unsigned t = atomic_fetch_add_explicit(&numbers->next, 1, memory_order_relaxed);
        if (t < TB_COUNT_OWNED)
            return t;
    }
    /* Threads' own variables lie apart: their addresses spread them. */
    uint64_t x = (uint64_t)(uintptr_t)&mine * 0x9E3779B97F4A7C15ull;
    return TB_COUNT_OWNED + (unsigned)(x >> 60) % TB_COUNT_SHARED;
}

void tb_count_add(tb_count *count, long delta)
{
    unsigned s = mine;
    if (!s)
        mine = s = take_stripe() + 1;
    atomic_long *n = &count->stripes[s - 1].n;
    if (s - 1 < TB_COUNT_OWNED) {
        /* Written by this thread alone: readers see the old sum or the new. */
        atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + delta, memory_order_relaxed);
        return;
    }
    atomic_fetch_add_explicit(n, delta, memory_order_relaxed);
}

long tb_count_read(tb_count *count)
{
    long sum = 0;
    for (int i = 0; i < TB_COUNT_STRIPES; i++)
        sum += atomic_load_explicit(&count->stripes[i].n, memory_order_relaxed);
    return sum;
}
