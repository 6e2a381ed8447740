/* The release thread (tb_release.c): jobs queued from many threads at once
 * each run exactly once, off the queuing thread, in the order each thread
 * queued them; a job that blocks holds up no thread that queues; held jobs
 * run inside the hold, taken once per run of them, or on the holder's own
 * thread when it asks (tb_release_run_held), exactly once either way. make
 * tsan-test runs it under ThreadSanitizer. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sched.h>
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
        tb_release_later(&t->job, 0);
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

static atomic_int blocker_running;

static void blocking_job(tb_release_job *job)
{
    atomic_store(&blocker_running, 1);
    while (!atomic_load(&release_blocker)) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    free(job);
}

/* Returns once the release thread runs a blocking job (until
 * release_blocker is set): what is queued after waits behind it. */
static void block_release_thread(void)
{
    atomic_store(&release_blocker, 0);
    atomic_store(&blocker_running, 0);
    tb_release_job *blocker = malloc(sizeof *blocker);
    blocker->run = blocking_job;
    tb_release_later(blocker, 0);
    while (!atomic_load(&blocker_running)) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
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
    tb_release_later(blocker, 0);
    for (int i = 0; i < 100; i++) {
        tb_release_job *j = malloc(sizeof *j);
        j->run = counted_job;
        tb_release_later(j, 0);
    }
    /* The caller came back while the blocker still runs: nothing ran yet. */
    CHECK_EQ(tb_release_pending(), 101);
    CHECK_EQ(atomic_load(&ran), 0);
    atomic_store(&release_blocker, 1);
    drain();
    CHECK_EQ(tb_release_pending(), 0);
    CHECK_EQ(atomic_load(&ran), 100);
}

/* The hold (Python's GIL): taken once around a run of held jobs queued
 * together, given up for an unheld job and every TB_RELEASE_HOLD_RUN held
 * ones, and never held by an unheld job; the jobs in their order. */
static atomic_int holding, takes, gives, held_outside, unheld_inside, order_broken;
static atomic_int last_hold_seq;

static int take_hold(void)
{
    if (atomic_exchange(&holding, 1))
        atomic_fetch_add(&order_broken, 1000); /* taken twice */
    atomic_fetch_add(&takes, 1);
    return 42;
}

static void give_hold(int state)
{
    if (state != 42 || !atomic_exchange(&holding, 0))
        atomic_fetch_add(&order_broken, 1000);
    atomic_fetch_add(&gives, 1);
}

typedef struct {
    tb_release_job job; /* first */
    int seq;
    int held;
} hold_job;

static void run_hold_job(tb_release_job *job)
{
    hold_job *h = (hold_job *)job;
    if (h->held && !atomic_load(&holding))
        atomic_fetch_add(&held_outside, 1);
    if (!h->held && atomic_load(&holding))
        atomic_fetch_add(&unheld_inside, 1);
    if (h->seq != atomic_load(&last_hold_seq) + 1)
        atomic_fetch_add(&order_broken, 1);
    atomic_store(&last_hold_seq, h->seq);
    free(h);
}

static void queue_hold_job(int seq, int held)
{
    hold_job *h = malloc(sizeof *h);
    h->job.run = run_hold_job;
    h->seq = seq;
    h->held = held;
    tb_release_later(&h->job, held);
}

static void test_hold(void)
{
    /* No hold set yet: a held job just runs. */
    atomic_store(&last_hold_seq, 0);
    queue_hold_job(1, 1);
    drain();
    CHECK_EQ(atomic_load(&takes), 0);
    CHECK_EQ(atomic_load(&last_hold_seq), 1);
    atomic_store(&held_outside, 0);

    tb_release_set_hold(take_hold, give_hold);
    /* Jobs queued behind a blocker run as one burst. */
    block_release_thread();
    atomic_store(&last_hold_seq, 0);
    int seq = 0;
    for (int i = 0; i < 10; i++)
        queue_hold_job(++seq, 1);
    queue_hold_job(++seq, 0);
    for (int i = 0; i < TB_RELEASE_HOLD_RUN + 36; i++)
        queue_hold_job(++seq, 1);
    atomic_store(&release_blocker, 1);
    drain();
    CHECK_EQ(atomic_load(&last_hold_seq), seq);
    CHECK_EQ(atomic_load(&order_broken), 0);
    CHECK_EQ(atomic_load(&held_outside), 0);
    CHECK_EQ(atomic_load(&unheld_inside), 0);
    /* 10 held (one take), the unheld one (given up), 100 held (a take,
     * given up and taken again after TB_RELEASE_HOLD_RUN). */
    CHECK_EQ(atomic_load(&takes), 3);
    CHECK_EQ(atomic_load(&gives), 3);
    CHECK_EQ(atomic_load(&holding), 0);
}

/* tb_release_run_held: the holder's call runs the held jobs first in line
 * on its own thread, TB_RELEASE_HOLD_RUN at most, in order, and leaves the
 * rest to the release thread; with a hold set, that thread leaves a held
 * job first in line alone for TB_RELEASE_GRACE_MS. */
#define DRAINED (TB_RELEASE_HOLD_RUN + 12)
static pthread_t ran_on[DRAINED + 1];
static double ran_at[DRAINED + 1];
static atomic_int drained_seq_broken, last_drained_seq;

typedef struct {
    tb_release_job job; /* first */
    int seq;
} drained_job;

static void run_drained_job(tb_release_job *job)
{
    drained_job *d = (drained_job *)job;
    ran_on[d->seq] = pthread_self();
    ran_at[d->seq] = now();
    if (d->seq != atomic_load(&last_drained_seq) + 1)
        atomic_fetch_add(&drained_seq_broken, 1);
    atomic_store(&last_drained_seq, d->seq);
    free(d);
}

static void queue_drained_job(int seq, int held)
{
    drained_job *d = malloc(sizeof *d);
    d->job.run = run_drained_job;
    d->seq = seq;
    tb_release_later(&d->job, held);
}

static void test_run_held(void)
{
    /* The thread kept busy by a blocker, so that only this thread's calls
     * can take what is queued behind it. */
    block_release_thread();
    atomic_store(&last_drained_seq, 0);
    int seq = 0;
    for (int i = 0; i < TB_RELEASE_HOLD_RUN + 10; i++)
        queue_drained_job(++seq, 1);
    queue_drained_job(++seq, 0);
    queue_drained_job(++seq, 1);
    CHECK_EQ(seq, DRAINED);
    tb_release_run_held(); /* the first TB_RELEASE_HOLD_RUN */
    CHECK_EQ(atomic_load(&last_drained_seq), TB_RELEASE_HOLD_RUN);
    tb_release_run_held(); /* the other 10 held first in line */
    CHECK_EQ(atomic_load(&last_drained_seq), TB_RELEASE_HOLD_RUN + 10);
    tb_release_run_held(); /* an unheld one is first in line: nothing */
    CHECK_EQ(atomic_load(&last_drained_seq), TB_RELEASE_HOLD_RUN + 10);
    atomic_store(&release_blocker, 1);
    drain();
    CHECK_EQ(atomic_load(&last_drained_seq), DRAINED);
    CHECK_EQ(atomic_load(&drained_seq_broken), 0);
    int here = 0;
    for (int i = 1; i <= DRAINED; i++)
        here += pthread_equal(ran_on[i], pthread_self()) != 0;
    CHECK_EQ(here, TB_RELEASE_HOLD_RUN + 10);
    CHECK(!pthread_equal(ran_on[DRAINED - 1], pthread_self()));
    CHECK(!pthread_equal(ran_on[DRAINED], pthread_self()));

    /* Nobody asks: the thread runs a held job itself, after the grace
     * (counted from a moment before it was queued). */
    atomic_store(&last_drained_seq, 0);
    double queued = now();
    queue_drained_job(1, 1);
    drain();
    CHECK_EQ(atomic_load(&last_drained_seq), 1);
    CHECK(!pthread_equal(ran_on[1], pthread_self()));
    CHECK(ran_at[1] - queued >= TB_RELEASE_GRACE_MS / 1000.0);
}

/* Producers queue held and unheld jobs while two holders (a mutex as the
 * GIL, which the release thread's hold takes too) keep asking: every job
 * runs once, and no two held jobs at once. */
#define STRESS_PRODUCERS 4
#define STRESS_JOBS 4000
static pthread_mutex_t gil = PTHREAD_MUTEX_INITIALIZER;
static atomic_int stress_runs[STRESS_PRODUCERS * STRESS_JOBS];
static atomic_int held_running, held_overlap, producers_left;

typedef struct {
    tb_release_job job; /* first */
    int id;
    int held;
} stress_job;

static void run_stress_job(tb_release_job *job)
{
    stress_job *j = (stress_job *)job;
    if (j->held && atomic_fetch_add(&held_running, 1) != 0)
        atomic_fetch_add(&held_overlap, 1);
    atomic_fetch_add(&stress_runs[j->id], 1);
    if (j->held)
        atomic_fetch_sub(&held_running, 1);
    free(j);
}

static void *stress_producer(void *arg)
{
    int p = (int)(intptr_t)arg;
    for (int i = 0; i < STRESS_JOBS; i++) {
        stress_job *j = malloc(sizeof *j);
        j->job.run = run_stress_job;
        j->id = p * STRESS_JOBS + i;
        j->held = (i % 5) != 0; /* mostly Python's deleters */
        tb_release_later(&j->job, j->held);
    }
    atomic_fetch_sub(&producers_left, 1);
    return NULL;
}

static void *stress_holder(void *arg)
{
    (void)arg;
    while (atomic_load(&producers_left) > 0 || tb_release_pending() > 0) {
        pthread_mutex_lock(&gil);
        tb_release_run_held();
        pthread_mutex_unlock(&gil);
        sched_yield();
    }
    return NULL;
}

static int take_gil(void)
{
    pthread_mutex_lock(&gil);
    return 7;
}

static void give_gil(int state)
{
    (void)state;
    pthread_mutex_unlock(&gil);
}

static void test_run_held_stress(void)
{
    tb_release_set_hold(take_gil, give_gil);
    atomic_store(&producers_left, STRESS_PRODUCERS);
    pthread_t producers[STRESS_PRODUCERS], holders[2];
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&holders[i], NULL, stress_holder, NULL), 0);
    for (int i = 0; i < STRESS_PRODUCERS; i++)
        CHECK_EQ(pthread_create(&producers[i], NULL, stress_producer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < STRESS_PRODUCERS; i++)
        CHECK_EQ(pthread_join(producers[i], NULL), 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_join(holders[i], NULL), 0);
    drain();
    int once = 0;
    for (int i = 0; i < STRESS_PRODUCERS * STRESS_JOBS; i++)
        once += atomic_load(&stress_runs[i]) == 1;
    CHECK_EQ(once, STRESS_PRODUCERS * STRESS_JOBS);
    CHECK_EQ(atomic_load(&held_overlap), 0);
    CHECK_EQ(tb_release_pending(), 0);
}

int main(void)
{
    test_many_threads();
    test_blocking_job_holds_no_caller();
    test_hold();
    test_run_held();
    test_run_held_stress();
    printf("test_release: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
