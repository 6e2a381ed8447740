/* The one loop shape both sides of the exchange API's comparison run
 * (bench/exchange_loop.exs): a table's from-object entry and the managed
 * tensor's deleter, n times, best of rounds; ns per round. Included by the
 * bench NIF (tensor_blob's table over a term) and by the bench's Python
 * extension (a producer type's __dlpack_c_exchange_api__ over a Python
 * object), so that the two differ only in the entry called. Never
 * shipped. */
#ifndef TB_BENCH_EXCHANGE_LOOP_H
#define TB_BENCH_EXCHANGE_LOOP_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#endif
#include <stdint.h>
#include <time.h>

#include "tensor_blob_dlpack.h"

static inline int64_t exchange_loop_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sets best (a double) to the least ns per round over rounds loops of n
 * rounds of: FROM (an expression that sets the tb_DLManagedTensorVersioned
 * *m and answers 0), then m->deleter(m). best is negative when FROM
 * failed. */
#define EXCHANGE_LOOP(best, n, rounds, FROM)                                   \
    do {                                                                       \
        (best) = -1.0;                                                         \
        for (int round_ = 0; round_ < (rounds); round_++) {                    \
            int64_t t0_ = exchange_loop_now_ns();                              \
            for (long i_ = 0; i_ < (long)(n); i_++) {                          \
                tb_DLManagedTensorVersioned *m = NULL;                         \
                if ((FROM) != 0 || !m) {                                       \
                    (best) = -1.0;                                             \
                    round_ = (rounds);                                         \
                    break;                                                     \
                }                                                              \
                m->deleter(m);                                                 \
            }                                                                  \
            double ns_ = (double)(exchange_loop_now_ns() - t0_) / (double)(n); \
            if (round_ < (rounds) && ((best) < 0 || ns_ < (best)))             \
                (best) = ns_;                                                  \
        }                                                                      \
    } while (0)

#endif
