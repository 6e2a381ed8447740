/* A value made once and then read by any thread without a lock: the first
 * thread to claim it writes it and publishes it; until then every thread
 * uses a value of its own. For what is the same whoever makes it (a
 * tensor's description for exports), so losing the claim costs only the
 * making. No BEAM, no libtorch. */
#ifndef TB_ONCE_H
#define TB_ONCE_H

#include <stdatomic.h>

enum { TB_ONCE_NONE, TB_ONCE_WRITING, TB_ONCE_READY };

typedef _Atomic int tb_once;

static inline void tb_once_init(tb_once *o)
{
    atomic_init(o, TB_ONCE_NONE);
}

/* 1 when the value is there to read (published by tb_once_publish). */
static inline int tb_once_ready(tb_once *o)
{
    return atomic_load_explicit(o, memory_order_acquire) == TB_ONCE_READY;
}

/* 1 for the one thread that is to write the value; then tb_once_publish. */
static inline int tb_once_claim(tb_once *o)
{
    int none = TB_ONCE_NONE;
    return atomic_compare_exchange_strong_explicit(o, &none, TB_ONCE_WRITING, memory_order_relaxed,
                                                   memory_order_relaxed);
}

/* The claimed value is whole: readers that see it ready see all of it. */
static inline void tb_once_publish(tb_once *o)
{
    atomic_store_explicit(o, TB_ONCE_READY, memory_order_release);
}

#endif
