#define _GNU_SOURCE /* syscall, SYS_gettid */
#include "tb_fault.h"
#include "tb_layout.h"

#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The guarded copies in progress, one slot per thread that runs one: the
 * handler finds its thread's by the kernel thread id, which it can read
 * without touching thread-local storage (a library's dynamic TLS may be
 * allocated lazily, which a signal handler must not do). */
#define TB_FAULT_SLOTS 256

typedef struct {
    atomic_long tid; /* 0: free */
    sigjmp_buf jump;
} fault_slot;

static fault_slot slots[TB_FAULT_SLOTS];
static struct sigaction previous;
static atomic_int installed;

static long thread_id(void)
{
    return syscall(SYS_gettid);
}

/* A SIGBUS that is not ours: what would have happened without us. */
static void chain(int sig, siginfo_t *info, void *context)
{
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, info, context);
    } else if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
        /* Die of it: a fault repeats when the handler returns; a SIGBUS
         * sent by kill() is raised again, now with the default action. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, NULL);
        if (info->si_code <= 0)
            raise(sig);
    } else {
        previous.sa_handler(sig);
    }
}

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    int saved = errno;
    if (info->si_code > 0) { /* a fault, not a kill() */
        long self = thread_id();
        for (int i = 0; i < TB_FAULT_SLOTS; i++)
            if (atomic_load_explicit(&slots[i].tid, memory_order_relaxed) == self)
                siglongjmp(slots[i].jump, 1);
    }
    chain(sig, info, context);
    errno = saved;
}

int tb_fault_install(void)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&installed, &expected, 1))
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &previous) != 0) {
        atomic_store(&installed, 0);
        return 0;
    }
    return 1;
}

static int claim_slot(void)
{
    long self = thread_id();
    for (;;) {
        for (int i = 0; i < TB_FAULT_SLOTS; i++) {
            long free_tid = 0;
            if (atomic_compare_exchange_strong(&slots[i].tid, &free_tid, self))
                return i;
        }
        sched_yield(); /* more copies at once than slots: wait for one */
    }
}

/* Dimensions with their strides in bytes, without those of size 1, and
 * with each pair that is one run of memory merged: a contiguous tensor is
 * one dimension. -1 when the tensor has no elements; 0 for one element
 * (every size is 1). */
static int coalesce(int ndim, const int64_t *sizes, const int64_t *strides, size_t element_size, int64_t *n,
                    int64_t *step)
{
    int out = 0;
    for (int i = 0; i < ndim; i++) {
        if (sizes[i] == 0)
            return -1;
        if (sizes[i] == 1)
            continue;
        int64_t bytes = strides[i] * (int64_t)element_size;
        if (out > 0 && step[out - 1] == bytes * sizes[i]) {
            n[out - 1] *= sizes[i];
            step[out - 1] = bytes;
        } else {
            n[out] = sizes[i];
            step[out] = bytes;
            out++;
        }
    }
    return out;
}

/* One strided row, element by element: each common size its own loop,
 * so the copy of an element is a move, not a call. */
#define TB_COPY_ROW(size)                                         \
    for (int64_t i = 0; i < n; i++, p += step, dense += (size)) { \
        if (to_dense)                                             \
            memcpy(dense, p, (size));                             \
        else                                                      \
            memcpy(p, dense, (size));                             \
    }

static void copy_elements(char *p, int64_t step, int64_t n, size_t element_size, char *dense, int to_dense)
{
    switch (element_size) {
    case 1: TB_COPY_ROW(1) break;
    case 2: TB_COPY_ROW(2) break;
    case 4: TB_COPY_ROW(4) break;
    case 8: TB_COPY_ROW(8) break;
    default: TB_COPY_ROW(element_size)
    }
}

static void copy_strided(char *base, int ndim, const int64_t *n, const int64_t *step, size_t element_size, char *dense,
                         int to_dense)
{
    /* The innermost dimension is copied as one run where it is contiguous. */
    int64_t inner = ndim ? n[ndim - 1] : 1;
    int run = ndim == 0 || step[ndim - 1] == (int64_t)element_size;
    size_t run_bytes = run ? (size_t)inner * element_size : element_size;
    int64_t index[TB_MAX_DIMS] = {0};
    for (;;) {
        if (run) {
            if (to_dense)
                memcpy(dense, base, run_bytes);
            else
                memcpy(base, dense, run_bytes);
            dense += run_bytes;
        } else {
            copy_elements(base, step[ndim - 1], inner, element_size, dense, to_dense);
            dense += (size_t)inner * element_size;
        }
        /* The next position of the outer dimensions, odometer style. */
        int d = ndim - 2;
        for (; d >= 0; d--) {
            base += step[d];
            if (++index[d] < n[d])
                break;
            base -= step[d] * n[d];
            index[d] = 0;
        }
        if (d < 0)
            return;
    }
}

typedef struct {
    char *base, *dense;
    int ndim, to_dense;
    size_t element_size;
    int64_t n[TB_MAX_DIMS], step[TB_MAX_DIMS];
} copy_job;

static void run_copy(void *arg)
{
    const copy_job *job = arg;
    copy_strided(job->base, job->ndim, job->n, job->step, job->element_size, job->dense, job->to_dense);
}

/* fn(arg) with the slot's jump set: 0 when a fault ended it. Nothing
 * here changes after sigsetjmp, so nothing is lost to the jump. */
static int run_guarded(fault_slot *slot, void (*fn)(void *), void *arg)
{
    if (sigsetjmp(slot->jump, 0) != 0)
        return 0;
    atomic_signal_fence(memory_order_seq_cst);
    fn(arg);
    atomic_signal_fence(memory_order_seq_cst);
    return 1;
}

int tb_fault_run(void (*fn)(void *), void *arg)
{
    fault_slot *slot = &slots[claim_slot()];
    int ok = run_guarded(slot, fn, arg);
    atomic_store(&slot->tid, 0);
    if (!ok) {
        /* The handler ran with SIGBUS blocked, and the jump kept the mask
         * (saving it would cost a system call per call): unblock it. */
        sigset_t bus;
        sigemptyset(&bus);
        sigaddset(&bus, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
    }
    return ok;
}

int tb_fault_copy_strided(void *base, int ndim, const int64_t *sizes, const int64_t *strides, size_t element_size,
                          void *dense, int to_dense)
{
    copy_job job = {.base = base, .dense = dense, .to_dense = to_dense, .element_size = element_size};
    if (ndim < 0 || ndim > TB_MAX_DIMS)
        return 0;
    job.ndim = coalesce(ndim, sizes, strides, element_size, job.n, job.step);
    if (job.ndim < 0)
        return 1; /* no elements */
    return tb_fault_run(run_copy, &job);
}
