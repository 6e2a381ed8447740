/* Live counts for stats/0. Each thread adds to a stripe of its own, on its
 * own cache line, so busy schedulers never contend for one counter;
 * reading sums the stripes. A stripe that one thread alone writes is
 * moved by a plain load and store, without a locked instruction (the
 * exports of the C bridge count twice per call): threads take numbers
 * from one counter shared by every build loaded (tb_state.h), so no two
 * threads, in any builds, ever own the same stripe. Threads that come
 * after the owned stripes are all taken share the rest, spread by thread,
 * with atomic adds. */
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

/* Where threads take their numbers: one for every count of every build. */
typedef struct {
    _Alignas(64) atomic_uint next;
} tb_count_threads;

/* Before the first add of this build: the numbers its threads take. */
void tb_count_load(tb_count_threads *threads);

void tb_count_add(tb_count *count, long delta);
long tb_count_read(tb_count *count);

#endif
