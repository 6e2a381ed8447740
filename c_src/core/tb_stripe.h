/* Stripes: state that busy threads update, split into copies on their own
 * cache lines so that no two schedulers contend for one. Pure C. */
#ifndef TB_STRIPE_H
#define TB_STRIPE_H

/* This thread's stripe out of `stripes`. Threads take numbers in turn as
 * they first ask, so the first `stripes` busy threads (the schedulers)
 * each have a stripe of their own. */
unsigned tb_stripe(unsigned stripes);

#endif
