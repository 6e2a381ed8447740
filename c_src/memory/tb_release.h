/* Releases that must not run on a scheduler: a thread of the library's
 * own runs them, in the order they came. A DLPack producer's deleter may
 * block (Python's take the GIL, which another thread may hold for
 * seconds); an import that says so hands its deleter here, so the
 * scheduler that drops the last reference never waits for it. */
#ifndef TB_RELEASE_H
#define TB_RELEASE_H

typedef struct tb_release_job {
    struct tb_release_job *next;
    void (*run)(struct tb_release_job *job); /* frees what holds the job */
} tb_release_job;

/* Queues job; the release thread calls job->run(job). Where that thread
 * cannot be started, runs it at once (a wait is better than a leak). Any
 * thread may call it. */
void tb_release_later(tb_release_job *job);

/* Jobs queued and not yet finished. */
long tb_release_pending(void);

#endif
