/* A value made once and read without a lock (tb_once.h), from many
 * threads at once (make tsan-test runs this under ThreadSanitizer, which
 * reports a read of the value that a publish does not order after its
 * write): threads race to describe the same objects for the first time,
 * as exports of one tensor do; each must read the whole value, written
 * once. */
#define _GNU_SOURCE /* pthread barriers */
#include <pthread.h>
#include <stdint.h>

#include "check.h"
#include "tb_once.h"

enum { THREADS = 8, OBJECTS = 2000, WORDS = 8 };

typedef struct {
    tb_once once;
    uint64_t value[WORDS]; /* as a tensor's description: several words */
    atomic_int writes;
} object;

static object objects[OBJECTS];
static pthread_barrier_t start;
static atomic_int wrong;

/* What any thread makes for object i: the same, whoever makes it. */
static void make(int i, uint64_t out[WORDS])
{
    for (int w = 0; w < WORDS; w++)
        out[w] = (uint64_t)i * 1000003u + (uint64_t)w;
}

static const uint64_t *value_of(int i, uint64_t scratch[WORDS])
{
    object *o = &objects[i];
    if (tb_once_ready(&o->once))
        return o->value;
    make(i, scratch);
    if (tb_once_claim(&o->once)) {
        for (int w = 0; w < WORDS; w++)
            o->value[w] = scratch[w];
        atomic_fetch_add(&o->writes, 1);
        tb_once_publish(&o->once);
    }
    return scratch;
}

static void *reader(void *arg)
{
    int id = (int)(intptr_t)arg;
    pthread_barrier_wait(&start);
    for (int k = 0; k < OBJECTS; k++) {
        /* Threads walk the objects from different ends, so that first
         * uses collide and later ones read what another published. */
        int i = id % 2 ? k : OBJECTS - 1 - k;
        uint64_t scratch[WORDS], want[WORDS];
        const uint64_t *v = value_of(i, scratch);
        make(i, want);
        for (int w = 0; w < WORDS; w++)
            if (v[w] != want[w])
                atomic_fetch_add(&wrong, 1);
    }
    return NULL;
}

int main(void)
{
    for (int i = 0; i < OBJECTS; i++)
        tb_once_init(&objects[i].once);
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++)
        CHECK_EQ(pthread_create(&threads[t], NULL, reader, (void *)(intptr_t)t), 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    pthread_barrier_destroy(&start);
    CHECK_EQ(atomic_load(&wrong), 0);
    int once = 0;
    for (int i = 0; i < OBJECTS; i++) {
        once += atomic_load(&objects[i].writes) == 1;
        CHECK(tb_once_ready(&objects[i].once));
    }
    CHECK_EQ(once, OBJECTS); /* each written exactly once */
    printf("test_once: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
