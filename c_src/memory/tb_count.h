/* Live counts for stats/0. Each thread adds to a stripe of its own, on its
 * own cache line, so busy schedulers never contend for one counter;
 * reading sums the stripes. */
#ifndef TB_COUNT_H
#define TB_COUNT_H

#include <stdatomic.h>

#define TB_COUNT_STRIPES 32

typedef struct {
    _Alignas(64) atomic_long n;
} tb_count_stripe;

typedef struct {
    tb_count_stripe stripes[TB_COUNT_STRIPES];
} tb_count;

void tb_count_add(tb_count *count, long delta);
long tb_count_read(tb_count *count);

#endif
