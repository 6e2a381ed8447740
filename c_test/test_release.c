/* The release thread (tb_release.c): jobs queued from many threads at once
 * each run exactly once, off the queuing thread, in the order each thread
 * queued them; a job that blocks holds up no thread that queues. make
 * tsan-test runs it under ThreadSanitizer. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "tb_release.h"

#define PRODUCERS 8
#define JOBS 5000

typedef struct {
    tb_release_job job; /* first */
    int producer;
    int seq;
    pthread_t queued_by;
} test_job;

static atomic_long ran;
static atomic_long out_of_order;
static atomic_long on_queuing_thread;
/* Read and written by the release thread only: one runs the jobs. */
static int last_seq[PRODUCERS];

static void run_job(tb_release_job *job)
{
    test_job *t = (test_job *)job;
    if (pthread_equal(t->queued_by, pthread_self()))
        atomic_fetch_add(&on_queuing_thread, 1);
    if (t->seq != last_seq[t->producer] + 1)
        atomic_fetch_add(&out_of_order, 1);
    last_seq[t->producer] = t->seq;
    free(t);
    atomic_fetch_add(&ran, 1);
}

static void *producer(void *arg)
{
    int id = (int)(intptr_t)arg;
    for (int i = 1; i <= JOBS; i++) {
        test_job *t = malloc(sizeof *t);
        if (!t)
            abort();
        t->job.run = run_job;
        t->producer = id;
        t->seq = i;
        t->queued_by = pthread_self();
        tb_release_later(&t->job);
    }
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits up to 30 s for every queued job to finish. */
static void drain(void)
{
    double deadline = now() + 30;
    while (tb_release_pending() > 0 && now() < deadline) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
}

static void test_many_threads(void)
{
    pthread_t threads[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++)
        CHECK_EQ(pthread_create(&threads[i], NULL, producer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < PRODUCERS; i++)
        CHECK_EQ(pthread_join(threads[i], NULL), 0);
    drain();
    CHECK_EQ(tb_release_pending(), 0);
    CHECK_EQ(atomic_load(&ran), PRODUCERS * JOBS);
    CHECK_EQ(atomic_load(&out_of_order), 0);
    CHECK_EQ(atomic_load(&on_queuing_thread), 0);
    for (int i = 0; i < PRODUCERS; i++)
        CHECK_EQ(last_seq[i], JOBS);
}

/* A job that blocks (as a deleter waiting for Python's GIL). */
static atomic_int release_blocker;

static void blocking_job(tb_release_job *job)
{
    while (!atomic_load(&release_blocker)) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    free(job);
}

static void counted_job(tb_release_job *job)
{
    free(job);
    atomic_fetch_add(&ran, 1);
}

static void test_blocking_job_holds_no_caller(void)
{
    atomic_store(&ran, 0);
    tb_release_job *blocker = malloc(sizeof *blocker);
    blocker->run = blocking_job;
    tb_release_later(blocker);
    for (int i = 0; i < 100; i++) {
        tb_release_job *j = malloc(sizeof *j);
        j->run = counted_job;
        tb_release_later(j);
    }
    /* The caller came back while the blocker still runs: nothing ran yet. */
    CHECK_EQ(tb_release_pending(), 101);
    CHECK_EQ(atomic_load(&ran), 0);
    atomic_store(&release_blocker, 1);
    drain();
    CHECK_EQ(tb_release_pending(), 0);
    CHECK_EQ(atomic_load(&ran), 100);
}

int main(void)
{
    test_many_threads();
    test_blocking_job_holds_no_caller();
    printf("test_release: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
