/* Releases that must not run on a scheduler: a thread of the library's
 * own runs them, in the order they came (but see tb_release_run_held). A
 * DLPack producer's deleter may block (Python's take the GIL, which another
 * thread may hold for seconds); an import that says so hands its deleter
 * here, so the scheduler that drops the last reference never waits for it. */
#ifndef TB_RELEASE_H
#define TB_RELEASE_H

typedef struct tb_release_job {
    struct tb_release_job *next;
    void (*run)(struct tb_release_job *job); /* frees what holds the job */
    int held;                                /* runs inside the hold (tb_release_set_hold) */
} tb_release_job;

/* Queues job; the release thread calls job->run(job). held: the job runs
 * inside the hold, when one is set. Where that thread cannot be started,
 * runs it at once (a wait is better than a leak). Any thread may call it. */
void tb_release_later(tb_release_job *job, int held);

/* A hold the release thread takes once around each run of held jobs that
 * it finds queued together, rather than each job taking it on its own:
 * Python's GIL (PyGILState_Ensure and _Release), which every Python
 * deleter takes, so a burst of them costs one hand-over of the GIL, not
 * one each. Given up every TB_RELEASE_HOLD_RUN jobs, so that a long burst
 * lets Python's other threads in. Set once Python is known (any thread). */
#define TB_RELEASE_HOLD_RUN 64
void tb_release_set_hold(int (*take)(void), void (*give)(int));

/* Runs the held jobs first in line (TB_RELEASE_HOLD_RUN at most) here and
 * now, for the holder's own code, called with the hold taken: Python's
 * deleters then run where the GIL is held already, with no hand-over to
 * the release thread (the Python door's builtins call it). Once a hold is set,
 * the thread leaves held jobs first in line to such calls for
 * TB_RELEASE_GRACE_MS after the queue fills, then runs them itself. Such a
 * job may run before older ones the thread is still running. */
#define TB_RELEASE_GRACE_MS 2
void tb_release_run_held(void);

/* Jobs queued and not yet finished. */
long tb_release_pending(void);

#endif
