#include "tb_release.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

/* One queue and one thread per build. The library is never unloaded (its
 * code stays mapped for the life of the VM, tb_nif.c), so the thread is
 * detached and lives as long as the VM; it sleeps while the queue is empty. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static tb_release_job *head, *tail;
static int started; /* 1 running, -1 could not start */
static atomic_long pending;

static _Atomic(int (*)(void)) hold_take;
static _Atomic(void (*)(int)) hold_give;

void tb_release_set_hold(int (*take)(void), void (*give)(int))
{
    atomic_store(&hold_give, give);
    atomic_store(&hold_take, take);
}

static void *release_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&lock);
        while (!head)
            pthread_cond_wait(&wake, &lock);
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
    if (tail)
        tail->next = job;
    else
        head = job;
    tail = job;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
}

long tb_release_pending(void)
{
    return atomic_load_explicit(&pending, memory_order_relaxed);
}
