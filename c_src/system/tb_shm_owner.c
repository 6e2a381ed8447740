#define _GNU_SOURCE /* getpid, posix_fallocate, dladdr */
#include "tb_shm_owner.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tb_fault.h"
#include "tb_shm_names.h"

/* Mapped for this many slots at once (virtual: the file grows by GROWTH
 * slots as needed, its pages reserved then). */
#define JOURNAL_SLOTS (1u << 16)
#define GROWTH 64u

typedef struct tb_shm_journal {
    int fd;
    tb_shm_slot *slots;
    uint32_t reserved; /* slots the file holds */
    uint32_t used;     /* slots ever handed out */
    uint32_t *free_list, free_count, free_capacity;
} tb_shm_journal;

static pthread_mutex_t owner_lock = PTHREAD_MUTEX_INITIALIZER;
static char owner_token[32]; /* "<pid>-<hex>" */
static int owner_fd = -1;    /* holds the lock; never closed, nor any earlier one */
static tb_shm_journal *journal;
static unsigned long long counter;

/* The reaper beside this library (priv/tensor_blob_reaper): started once
 * per identity, it leaves at once and its child waits for our lock.
 * Without it, names are still reclaimed by the next VM that loads
 * tensor_blob. */
static void start_reaper(const char *lock_name)
{
    Dl_info info;
    if (!dladdr((void *)start_reaper, &info) || !info.dli_fname)
        return;
    char path[4096];
    const char *slash = strrchr(info.dli_fname, '/');
    int dir_len = slash ? (int)(slash - info.dli_fname) : 1;
    snprintf(path, sizeof path, "%.*s/tensor_blob_reaper", dir_len, slash ? info.dli_fname : ".");
    char *argv[] = {path, (char *)lock_name, NULL};
    char *envp[] = {NULL};
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    if (posix_spawn_file_actions_init(&actions) != 0)
        return;
    posix_spawnattr_init(&attr);
    /* Its own session, so a terminal's interrupt for the VM spares it. */
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    if (posix_spawn(&pid, path, &actions, &attr, argv, envp) == 0) {
        /* The first process exits once its child runs on: reap it. */
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
}

static int linked(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_nlink > 0;
}

/* The journal of a token, new and empty; NULL with *error. */
static tb_shm_journal *make_journal(const char *token, int *error)
{
    char path[NAME_MAX + sizeof TB_SHM_DIR + 2];
    snprintf(path, sizeof path, TB_SHM_DIR "/" TB_NAME_PREFIX "%s" TB_JOURNAL_SUFFIX, token);
    tb_shm_journal *j = calloc(1, sizeof *j);
    if (!j) {
        *error = ENOMEM;
        return NULL;
    }
    j->fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (j->fd < 0) {
        *error = errno;
        free(j);
        return NULL;
    }
    j->slots = mmap(NULL, (size_t)JOURNAL_SLOTS * sizeof(tb_shm_slot), PROT_READ | PROT_WRITE, MAP_SHARED, j->fd, 0);
    if (j->slots == MAP_FAILED) {
        *error = errno;
        close(j->fd);
        unlink(path);
        free(j);
        return NULL;
    }
    return j;
}

/* A new token, its lock taken and its journal made, and its reaper. The
 * identity before (if any) keeps its lock and journal for the life of the
 * VM: its names and references are still released when the VM dies. */
static int make_identity(int *error)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        uint64_t nonce;
        if (getrandom(&nonce, sizeof nonce, 0) != sizeof nonce)
            nonce = (uint64_t)(uintptr_t)&nonce ^ (uint64_t)getpid() * 0x9e3779b97f4a7c15u ^ (uint64_t)time(NULL);
        char token[sizeof owner_token];
        snprintf(token, sizeof token, "%d-%016llx", (int)getpid(), (unsigned long long)nonce);
        char path[NAME_MAX + sizeof TB_SHM_DIR + 2];
        snprintf(path, sizeof path, TB_SHM_DIR "/" TB_NAME_PREFIX "%s" TB_LOCK_SUFFIX, token);
        int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            *error = errno;
            if (*error == EEXIST)
                continue;
            return 0;
        }
        /* A reclaim that ran between the open and the lock removed the
         * file: the lock would guard nothing. Take another token. */
        if (flock(fd, LOCK_EX | LOCK_NB) != 0 || !linked(fd)) {
            *error = errno ? errno : EAGAIN;
            close(fd);
            continue;
        }
        tb_shm_journal *j = make_journal(token, error);
        if (!j) {
            unlink(path);
            close(fd);
            return 0;
        }
        snprintf(owner_token, sizeof owner_token, "%s", token);
        owner_fd = fd;
        journal = j;
        start_reaper(path + strlen(TB_SHM_DIR "/"));
        return 1;
    }
    return 0;
}

/* Under owner_lock: an identity whose lock and journal are both still in
 * /dev/shm, made anew when either was deleted. */
static int ensure_identity(int *error)
{
    if (owner_fd >= 0 && linked(owner_fd) && linked(journal->fd))
        return 1;
    return make_identity(error);
}

int tb_shm_owner_name(const char *prefix, char *out, size_t size, int *error)
{
    pthread_mutex_lock(&owner_lock);
    int ok = ensure_identity(error);
    if (ok)
        snprintf(out, size, "/%s%s.%llu", prefix, owner_token, counter++);
    pthread_mutex_unlock(&owner_lock);
    return ok;
}

typedef struct {
    tb_shm_slot *slot;
    const char *name;
    uint32_t state;
} slot_write;

static void write_slot(void *arg)
{
    slot_write *w = arg;
    snprintf(w->slot->name, sizeof w->slot->name, "%s", w->name);
    atomic_store_explicit((_Atomic uint32_t *)&w->slot->state, w->state, memory_order_release);
}

static void write_state(void *arg)
{
    slot_write *w = arg;
    atomic_store_explicit((_Atomic uint32_t *)&w->slot->state, w->state, memory_order_release);
}

/* Under owner_lock: a free slot of the current journal, or UINT32_MAX. */
static uint32_t take_slot(tb_shm_journal *j, int *error)
{
    if (j->free_count > 0)
        return j->free_list[--j->free_count];
    if (j->used == j->reserved) {
        if (j->reserved == JOURNAL_SLOTS) {
            *error = EMFILE;
            return UINT32_MAX;
        }
        uint32_t more = j->reserved + GROWTH;
        int e = posix_fallocate(j->fd, 0, (off_t)more * (off_t)sizeof(tb_shm_slot));
        if (e) {
            *error = e;
            return UINT32_MAX;
        }
        j->reserved = more;
    }
    return j->used++;
}

int tb_shm_owner_record(const char *name, uint32_t state, tb_shm_ref *ref, int *error)
{
    pthread_mutex_lock(&owner_lock);
    uint32_t index = ensure_identity(error) ? take_slot(journal, error) : UINT32_MAX;
    tb_shm_journal *j = journal;
    pthread_mutex_unlock(&owner_lock);
    if (index == UINT32_MAX)
        return 0;
    slot_write w = {.slot = &j->slots[index], .name = name, .state = state};
    if (!tb_fault_run(write_slot, &w)) {
        *error = EFAULT; /* the journal was shrunk under us: that slot is lost */
        return 0;
    }
    ref->journal = j;
    ref->index = index;
    return 1;
}

void tb_shm_owner_hold(const tb_shm_ref *ref)
{
    if (!ref->journal)
        return;
    slot_write w = {.slot = &ref->journal->slots[ref->index], .state = TB_SLOT_HELD};
    (void)tb_fault_run(write_state, &w);
}

static void exchange_state(void *arg)
{
    slot_write *w = arg;
    w->state = atomic_exchange((_Atomic uint32_t *)&w->slot->state, w->state);
}

int tb_shm_owner_forget(tb_shm_ref *ref)
{
    tb_shm_journal *j = ref->journal;
    if (!j)
        return 1;
    ref->journal = NULL;
    slot_write w = {.slot = &j->slots[ref->index], .state = TB_SLOT_FREE};
    if (!tb_fault_run(exchange_state, &w))
        return 1; /* the journal was shrunk: nobody else can read the record, and the slot is lost */
    pthread_mutex_lock(&owner_lock);
    if (j->free_count == j->free_capacity) {
        uint32_t capacity = j->free_capacity ? 2 * j->free_capacity : 64;
        uint32_t *list = realloc(j->free_list, capacity * sizeof *list);
        if (list) {
            j->free_list = list;
            j->free_capacity = capacity;
        }
    }
    if (j->free_count < j->free_capacity) /* else the slot is not reused */
        j->free_list[j->free_count++] = ref->index;
    pthread_mutex_unlock(&owner_lock);
    /* Free already: a reclaimer that judged this VM dead (its lock was
     * deleted) took the record and dropped the reference. */
    return w.state != TB_SLOT_FREE;
}

int tb_shm_owner_reclaim(void)
{
    char token[sizeof owner_token];
    pthread_mutex_lock(&owner_lock);
    memcpy(token, owner_token, sizeof token);
    pthread_mutex_unlock(&owner_lock);
    return tb_shm_reclaim(token);
}
