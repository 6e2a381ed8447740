/* Stripes: state that busy threads update, split into copies on their own
 * cache lines so that no two schedulers contend for one. Every striped
 * thing (the counts of stats/0, the resource types, the registry's homes)
 * picks its stripe by the thread's number: threads take numbers in turn as
 * they first ask, from one counter that every build loaded shares
 * (tb_state.h), so the first busy threads (the schedulers) each have a
 * number no other thread has, in any build. Pure C. */
#ifndef TB_STRIPE_H
#define TB_STRIPE_H

#include <stdatomic.h>

/* Where threads take their numbers. */
typedef struct {
    _Alignas(64) atomic_uint next;
} tb_stripe_numbers;

/* Before this build's first stripe: the counter shared by every build
 * (until then, and in programs without one, a counter of this build's). */
void tb_stripe_load(tb_stripe_numbers *numbers);

/* This thread's number: 0, 1, 2, ... in the order threads first ask. */
unsigned tb_stripe_thread(void);

/* This thread's stripe out of `stripes`. */
static inline unsigned tb_stripe(unsigned stripes)
{
    return tb_stripe_thread() % stripes;
}

#endif
