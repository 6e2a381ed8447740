#include "tb_stripe.h"

#include <stdatomic.h>

static atomic_uint next_thread;
static _Thread_local unsigned thread_plus_one;

unsigned tb_stripe(unsigned stripes)
{
    unsigned t = thread_plus_one;
    if (!t) {
        t = atomic_fetch_add_explicit(&next_thread, 1, memory_order_relaxed) + 1;
        thread_plus_one = t;
    }
    return (t - 1) % stripes;
}
