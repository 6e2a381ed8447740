/* The set of DLPack addresses handed out (tb_handed.c), without the BEAM:
 *
 * - on one thread: an address is taken once, only the address handed out
 *   (not a neighbour, not 0), and the set's room is no limit: past it,
 *   addresses go to the registry and are taken from there, each once;
 * - from many threads at once (run under ThreadSanitizer by make
 *   tsan-test, and under AddressSanitizer), as DLPack imports and
 *   deleters do: a thread that owns an address hands it out; any thread
 *   may claim any address (an import) or run an address's deleter (take it
 *   where its flag says it is out); a take that succeeds makes its thread
 *   the owner, which may hand it out again (an address freed and reused).
 *   The set is kept nearly full by addresses of its own, so that some
 *   hand-outs land in the registry, and each hand-out must be taken
 *   exactly once, wherever it went. */
#define _GNU_SOURCE /* pthread barriers */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

#include "check.h"
#include "handed_slots.h"
#include "tb_handed.h"

static tb_handed set;
static tb_registry reg;

static long registry_handed(void)
{
    long n = 0;
    for (int i = 0; i < TB_REG_SHARDS; i++)
        n += __atomic_load_n(&reg.shards[0][i].count[TB_REG_HANDED], __ATOMIC_SEQ_CST);
    return n;
}

/* ---- One thread ---------------------------------------------------------- */

static void test_once(void)
{
    uintptr_t a = (uintptr_t)0x5A << 32;
    tb_range r = {.lo = a, .hi = a + 1};
    CHECK_EQ(tb_handed_take(&set, &reg, a), 0); /* never handed out */
    CHECK_EQ(tb_handed_take(&set, &reg, 0), 0); /* 0 marks a free slot */
    tb_handed_add(&set, &reg, &r);
    CHECK_EQ(tb_handed_count(&set), 1);
    CHECK_EQ(tb_handed_take(&set, &reg, 0), 0);
    CHECK_EQ(tb_handed_take(&set, &reg, a + 16), 0);
    CHECK_EQ(tb_handed_take(&set, &reg, a - 16), 0);
    CHECK_EQ(tb_handed_take(&set, &reg, a + 1), 0);
    CHECK_EQ(tb_handed_take(&set, &reg, a), 1);
    CHECK_EQ(tb_handed_take(&set, &reg, a), 0); /* once */
    CHECK_EQ(tb_handed_count(&set), 0);
    /* Handed out again after it was taken (an address reused). */
    tb_handed_add(&set, &reg, &r);
    CHECK_EQ(tb_handed_take(&set, &reg, a), 1);
    CHECK_EQ(tb_handed_count(&set), 0);
}

/* More addresses than the set has slots, 16 bytes apart as malloc places
 * them: every one handed out, the rest in the registry, each taken once. */
enum { MANY = TB_HANDED_BUCKETS * TB_HANDED_WAYS + TB_HANDED_BUCKETS };

static tb_range many[MANY];

static uintptr_t many_address(int i)
{
    return ((uintptr_t)0x3C << 32) + 16 * (uintptr_t)i;
}

static void test_past_room(void)
{
    for (int i = 0; i < MANY; i++) {
        many[i] = (tb_range){.lo = many_address(i), .hi = many_address(i) + 1};
        tb_handed_add(&set, &reg, &many[i]);
    }
    long in_set = tb_handed_count(&set), in_registry = registry_handed();
    CHECK_EQ(in_set + in_registry, MANY);
    CHECK(in_set <= (long)TB_HANDED_BUCKETS * TB_HANDED_WAYS);
    CHECK(in_registry >= MANY - (long)TB_HANDED_BUCKETS * TB_HANDED_WAYS);
    /* Taken in another order than handed out: odd ones first. */
    int taken = 0, again = 0;
    for (int pass = 1; pass >= 0; pass--)
        for (int i = pass; i < MANY; i += 2) {
            taken += tb_handed_take(&set, &reg, many_address(i));
            again += tb_handed_take(&set, &reg, many_address(i));
        }
    CHECK_EQ(taken, MANY);
    CHECK_EQ(again, 0);
    CHECK_EQ(tb_handed_count(&set), 0);
    CHECK_EQ(registry_handed(), 0);
}

/* ---- From many threads --------------------------------------------------- */

enum { THREADS = 8, ROUNDS = 40000 };

typedef struct {
    int id;
    atomic_int *errors;
} worker_arg;

static pthread_barrier_t start;

static void *hander(void *p)
{
    worker_arg *a = p;
    uint64_t rng = 0x5151ull * (uint64_t)(a->id + 1);
    int own[SLOTS], n = 0;
    for (int i = a->id; i < SLOTS; i += THREADS)
        own[n++] = i;
    pthread_barrier_wait(&start);
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t x = next_random(&rng);
        int j = (int)(next_random(&rng) % SLOTS);
        int taken = 0;
        switch (x % 3) {
        case 0: /* hand one out */
            if (n > 0) {
                int k = (int)(next_random(&rng) % (uint64_t)n);
                int i = own[k];
                own[k] = own[--n];
                tb_handed_add(&set, &reg, slot_hand_out(i));
            }
            break;
        case 1: /* an import claims an address */ taken = tb_handed_take(&set, &reg, slot_address(j)); break;
        default: /* a deleter, where the flag says the address is out */
            if (atomic_load_explicit(&slots[j].handed, memory_order_relaxed))
                taken = tb_handed_take(&set, &reg, slot_address(j));
        }
        if (taken && slot_took(j, a->errors))
            own[n++] = j;
    }
    return NULL;
}

static void test_race(void)
{
    /* Nearly full: every bucket but a few slots of the set taken by
     * addresses no thread touches, so that some hand-outs go to the
     * registry. */
    uint64_t rng = 42;
    int filled = 0;
    for (int i = 0; i < MANY; i++) {
        many[i] = (tb_range){.lo = many_address(i), .hi = many_address(i) + 1};
        tb_handed_add(&set, &reg, &many[i]);
    }
    for (int i = 0; i < MANY; i++)
        if (next_random(&rng) % 64 == 0)
            filled -= tb_handed_take(&set, &reg, many_address(i));
    filled += MANY;

    atomic_int errors = 0;
    slots_own_all();
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t threads[THREADS];
    worker_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (worker_arg){.id = i, .errors = &errors};
        CHECK_EQ(pthread_create(&threads[i], NULL, hander, &args[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);
    CHECK_EQ(atomic_load(&errors), 0);

    /* What is still out is taken once now. */
    for (int i = 0; i < SLOTS; i++) {
        if (tb_handed_take(&set, &reg, slot_address(i)))
            CHECK(slot_took(i, &errors));
        CHECK_EQ(tb_handed_take(&set, &reg, slot_address(i)), 0);
    }
    CHECK_EQ(atomic_load(&errors), 0);
    long hand_outs = slots_taken_once(THREADS * ROUNDS / 8); /* each taken once, and the race ran */
    /* The fillers are all still there, each once. */
    int fillers = 0;
    for (int i = 0; i < MANY; i++)
        fillers += tb_handed_take(&set, &reg, many_address(i));
    CHECK_EQ(fillers, filled);
    CHECK_EQ(tb_handed_count(&set), 0);
    CHECK_EQ(registry_handed(), 0);
    printf("test_handed: %ld addresses handed out and taken back\n", hand_outs);
}

int main(void)
{
    CHECK(tb_registry_init(&reg));
    test_once();
    test_past_room();
    test_race();
    printf("test_handed: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
