/* The slot table (tb_slots.c): the lowest free slot is opened, each value
 * is taken once, a closed or full slot takes nothing, and threads opening,
 * filling, emptying and closing at once never share a slot or lose a
 * value. make tsan-test runs it under ThreadSanitizer. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "check.h"
#include "tb_slots.h"

static tb_slots slots;

static void test_sequential(void)
{
    CHECK_EQ(tb_slot_open(&slots, 0x10), 0);
    CHECK_EQ(tb_slot_open(&slots, 0), 1);
    CHECK_EQ(tb_slot_open(&slots, 0x30), 2);
    /* Taken once. */
    CHECK_EQ(tb_slot_take(&slots, 0), 0x10);
    CHECK_EQ(tb_slot_take(&slots, 0), 0);
    /* Filled once, while open and empty. */
    CHECK_EQ(tb_slot_put(&slots, 1, 0x20), 1);
    CHECK_EQ(tb_slot_put(&slots, 1, 0x21), 0);
    CHECK_EQ(tb_slot_take(&slots, 1), 0x20);
    CHECK_EQ(tb_slot_put(&slots, 1, 0), 0);
    /* Out of range: nothing, and no crash. */
    CHECK_EQ(tb_slot_take(&slots, TB_SLOTS), 0);
    CHECK_EQ(tb_slot_put(&slots, TB_SLOTS, 1), 0);
    tb_slot_close(&slots, TB_SLOTS);
    /* Closed: not filled; the lowest free is given again. */
    tb_slot_close(&slots, 0);
    CHECK_EQ(tb_slot_put(&slots, 0, 0x11), 0);
    CHECK_EQ(tb_slot_open(&slots, 0), 0);
    CHECK_EQ(tb_slot_take(&slots, 2), 0x30);
    for (unsigned k = 0; k < 3; k++)
        tb_slot_close(&slots, k);
    /* Every slot once, then none. */
    int all = 1;
    for (int k = 0; k < TB_SLOTS; k++)
        all &= tb_slot_open(&slots, (uintptr_t)k + 1) == k;
    CHECK(all);
    CHECK_EQ(tb_slot_open(&slots, 1), -1);
    tb_slot_close(&slots, 77);
    CHECK_EQ(tb_slot_take(&slots, 77), 78); /* closing does not empty */
    CHECK_EQ(tb_slot_open(&slots, 0), 77);
    for (unsigned k = 0; k < TB_SLOTS; k++) {
        tb_slot_take(&slots, k);
        tb_slot_close(&slots, k);
    }
}

#define THREADS 8
#define ROUNDS 20000

static atomic_int holder[TB_SLOTS]; /* thread + 1 while a thread holds the slot */
static atomic_long shared, lost, refused;

/* The exchange as the library makes it: open with a value or empty, the
 * other side takes or fills, the opener empties and closes. */
static void *exchange(void *arg)
{
    int me = (int)(intptr_t)arg;
    for (int i = 0; i < ROUNDS; i++) {
        uintptr_t value = ((uintptr_t)me << 32) | ((uintptr_t)i << 1) | 2;
        int outgoing = i % 2;
        int k = tb_slot_open(&slots, outgoing ? value : 0);
        if (k < 0) {
            atomic_fetch_add(&refused, 1);
            continue;
        }
        int none = 0;
        if (!atomic_compare_exchange_strong(&holder[k], &none, me + 1))
            atomic_fetch_add(&shared, 1);
        if (!outgoing && !tb_slot_put(&slots, (unsigned)k, value))
            atomic_fetch_add(&lost, 1);
        if (tb_slot_take(&slots, (unsigned)k) != value)
            atomic_fetch_add(&lost, 1);
        atomic_store(&holder[k], 0);
        tb_slot_close(&slots, (unsigned)k);
    }
    return NULL;
}

/* Two takers race for one value (Python's take and the slot's destructor):
 * exactly one gets it. */
static _Atomic uintptr_t got[2];
static pthread_barrier_t start;
static int race_slot;

static void *taker(void *arg)
{
    int i = (int)(intptr_t)arg;
    pthread_barrier_wait(&start);
    atomic_store(&got[i], tb_slot_take(&slots, (unsigned)race_slot));
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, exchange, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(atomic_load(&shared), 0);
    CHECK_EQ(atomic_load(&lost), 0);
    CHECK_EQ(atomic_load(&refused), 0);
    /* All closed again: the first open is slot 0. */
    CHECK_EQ(tb_slot_open(&slots, 0), 0);
    tb_slot_close(&slots, 0);

    int once = 1;
    for (int round = 0; round < 2000; round++) {
        race_slot = tb_slot_open(&slots, 0x1230);
        pthread_barrier_init(&start, NULL, 2);
        pthread_t a, b;
        pthread_create(&a, NULL, taker, (void *)0);
        pthread_create(&b, NULL, taker, (void *)1);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        pthread_barrier_destroy(&start);
        once &= (atomic_load(&got[0]) == 0x1230) + (atomic_load(&got[1]) == 0x1230) == 1;
        once &= (atomic_load(&got[0]) | atomic_load(&got[1])) == 0x1230;
        tb_slot_close(&slots, (unsigned)race_slot);
    }
    CHECK(once);
}

int main(void)
{
    test_sequential();
    test_threads();
    printf("test_slots: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
