/* Live counts for stats/0. Each thread adds to a stripe of its own, on its
 * own cache line, so busy schedulers never contend for one counter;
 * reading sums the stripes. A stripe that one thread alone writes is
 * moved by a plain load and store, without a locked instruction (the
 * exports of the C bridge count twice per call): the stripe is the
 * thread's number (tb_stripe.h), which no other thread of any build has.
 * Threads numbered past the owned stripes share the rest, with atomic
 * adds. */
#ifndef TB_COUNT_H
#define TB_COUNT_H

#include <stdatomic.h>

#define TB_COUNT_OWNED 48  /* stripes owned by one thread each */
#define TB_COUNT_SHARED 16 /* stripes shared by the threads after those */
#define TB_COUNT_STRIPES (TB_COUNT_OWNED + TB_COUNT_SHARED)

typedef struct {
    _Alignas(64) atomic_long n;
} tb_count_stripe;

typedef struct {
    tb_count_stripe stripes[TB_COUNT_STRIPES];
} tb_count;

void tb_count_add(tb_count *count, long delta);
long tb_count_read(tb_count *count);

#endif
