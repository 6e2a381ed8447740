#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_condattr_setclock */
#include "tb_release.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

/* One queue and one thread per build. The library is never unloaded (its
 * code stays mapped for the life of the VM, tb_nif.c), so the thread is
 * detached and lives as long as the VM; it sleeps while the queue is empty.
 * Jobs leave the queue in order, a whole queue at once (the thread) or the
 * held ones first in line (tb_release_run_held). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake; /* on CLOCK_MONOTONIC (start) */
static tb_release_job *head, *tail;
static struct timespec queued_since; /* when the queue last went from empty */
static int started;                  /* 1 running, -1 could not start */
static atomic_long pending;

static _Atomic(int (*)(void)) hold_take;
static _Atomic(void (*)(int)) hold_give;

void tb_release_set_hold(int (*take)(void), void (*give)(int))
{
    atomic_store(&hold_give, give);
    atomic_store(&hold_take, take);
}

/* Under the lock: the time until which held jobs at the head are left for
 * tb_release_run_held (the holder's own calls) to run. */
static struct timespec grace_end(void)
{
    struct timespec end = queued_since;
    end.tv_nsec += TB_RELEASE_GRACE_MS * 1000000L;
    end.tv_sec += end.tv_nsec / 1000000000L;
    end.tv_nsec %= 1000000000L;
    return end;
}

static int passed(struct timespec end)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec);
}

static void *release_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&lock);
        for (;;) {
            if (!head) {
                pthread_cond_wait(&wake, &lock);
                continue;
            }
            /* Held jobs first in line wait their grace, for the holder's own
             * calls to run them where the hold is taken already. */
            struct timespec end = grace_end();
            if (head->held && atomic_load(&hold_take) && !passed(end)) {
                pthread_cond_timedwait(&wake, &lock, &end);
                continue;
            }
            break;
        }
        /* The whole queue at once: a burst runs under one hold. */
        tb_release_job *batch = head;
        head = tail = NULL;
        pthread_mutex_unlock(&lock);
        int (*take)(void) = atomic_load(&hold_take);
        void (*give)(int) = atomic_load(&hold_give);
        int holding = 0, state = 0, run = 0;
        while (batch) {
            tb_release_job *job = batch;
            batch = job->next; /* run frees the job */
            if (job->held && take && give && !holding) {
                state = take();
                holding = 1;
                run = 0;
            } else if (holding && (!job->held || run == TB_RELEASE_HOLD_RUN)) {
                give(state);
                holding = 0;
                if (job->held) {
                    state = take();
                    holding = 1;
                    run = 0;
                }
            }
            run++;
            job->run(job);
            atomic_fetch_sub_explicit(&pending, 1, memory_order_relaxed);
        }
        if (holding)
            give(state);
    }
    return NULL;
}

/* Under the lock. */
static int start(void)
{
    if (started)
        return started > 0;
    pthread_attr_t attr;
    pthread_t thread;
    started = -1;
    pthread_condattr_t clock;
    if (pthread_condattr_init(&clock) != 0)
        return 0;
    int made = pthread_condattr_setclock(&clock, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&wake, &clock) == 0;
    pthread_condattr_destroy(&clock);
    if (!made)
        return 0;
    if (pthread_attr_init(&attr) != 0)
        return 0;
    if (pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
        pthread_create(&thread, &attr, release_main, NULL) == 0)
        started = 1;
    pthread_attr_destroy(&attr);
    return started > 0;
}

void tb_release_later(tb_release_job *job, int held)
{
    job->next = NULL;
    job->held = held;
    atomic_fetch_add_explicit(&pending, 1, memory_order_relaxed);
    pthread_mutex_lock(&lock);
    if (!start()) {
        pthread_mutex_unlock(&lock);
        job->run(job);
        atomic_fetch_sub_explicit(&pending, 1, memory_order_relaxed);
        return;
    }
    /* The thread sleeps only on an empty queue (or in a grace, which ends
     * by itself): woken by the first job. */
    if (tail) {
        tail->next = job;
    } else {
        head = job;
        clock_gettime(CLOCK_MONOTONIC, &queued_since);
        pthread_cond_signal(&wake);
    }
    tail = job;
    pthread_mutex_unlock(&lock);
}

void tb_release_run_held(void)
{
    if (atomic_load_explicit(&pending, memory_order_relaxed) == 0)
        return;
    /* The held jobs first in line, in order, TB_RELEASE_HOLD_RUN at most
     * (the holder's caller waits for them): what follows them runs after,
     * here at a later call or on the thread. */
    pthread_mutex_lock(&lock);
    tb_release_job *run = NULL, **last = &run;
    for (int taken = 0; head && head->held && taken < TB_RELEASE_HOLD_RUN; taken++) {
        *last = head;
        last = &head->next;
        head = head->next;
    }
    *last = NULL;
    if (!head)
        tail = NULL;
    pthread_mutex_unlock(&lock);
    while (run) {
        tb_release_job *job = run;
        run = job->next; /* run frees the job */
        job->run(job);
        atomic_fetch_sub_explicit(&pending, 1, memory_order_relaxed);
    }
}

long tb_release_pending(void)
{
    return atomic_load_explicit(&pending, memory_order_relaxed);
}
