#define _GNU_SOURCE /* fdopendir, unlinkat, O_NOFOLLOW */
#include "tb_shm_names.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tb_fault.h"

/* PyTorch keeps the count in a std::atomic<int> at the start of the header:
 * lock-free on every platform it shares memory on, so the same bytes as a
 * C11 atomic_int, which other processes update concurrently. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the header's count must be a lock-free int, as PyTorch's is");
_Static_assert(sizeof(atomic_int) == sizeof(int), "the header's count is an int");
_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "a slot's state is a plain word in the file");

const tb_shm_name_form tb_shm_name_forms[TB_SHM_NAME_FORMS] = {
    {TB_NAME_PREFIX, 0},
    {TB_TORCH_NAME_PREFIX, TB_TORCH_HEADER},
};

/* The form a directory entry's name is of, with *token where its token
 * starts; NULL when it is of none. */
static const tb_shm_name_form *form_of(const char *name, const char **token)
{
    for (size_t i = 0; i < TB_SHM_NAME_FORMS; i++) {
        size_t n = strlen(tb_shm_name_forms[i].prefix);
        if (strncmp(name, tb_shm_name_forms[i].prefix, n) == 0) {
            *token = name + n;
            return &tb_shm_name_forms[i];
        }
    }
    return NULL;
}

int tb_shm_name(const char *p, size_t n, char *out, size_t size)
{
    if (n > 0 && p[0] == '/')
        p++, n--;
    int dots = (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.');
    if (n == 0 || n > TB_SHM_NAME_MAX || dots || memchr(p, '/', n) || memchr(p, '\0', n) || size < n + 2)
        return 0;
    snprintf(out, size, "/%.*s", (int)n, p);
    return 1;
}

int tb_shm_torch_format(const char *name)
{
    return strncmp(name + 1, TB_TORCH_FORMAT_PREFIX, strlen(TB_TORCH_FORMAT_PREFIX)) == 0;
}

/* A regular file of this user, or why not (the descriptor is closed). */
static int checked(int fd, struct stat *st, int *error)
{
    if (fstat(fd, st) != 0)
        *error = errno;
    else if (!S_ISREG(st->st_mode))
        *error = TB_SHM_NOT_REGULAR;
    else if (st->st_uid != geteuid())
        *error = TB_SHM_NOT_OURS;
    else
        return fd;
    close(fd);
    return -1;
}

int tb_shm_open(const char *name, int create, struct stat *st, int *error)
{
    char path[sizeof TB_SHM_DIR + NAME_MAX + 1];
    snprintf(path, sizeof path, TB_SHM_DIR "%s", name);
    int flags = O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
    int fd = open(path, flags, 0600);
    if (fd < 0) {
        *error = errno;
        return -1;
    }
    return checked(fd, st, error);
}

const char *tb_shm_strerror(int error)
{
    switch (error) {
    case TB_SHM_NOT_REGULAR:
        return "not a regular file (a FIFO, a device, a socket or a directory planted under that name), refused";
    case TB_SHM_NOT_OURS: return "the file belongs to another user, refused";
    case ELOOP: return "a symbolic link, refused";
    default: return strerror(error);
    }
}

int tb_shm_open_at(int dir_fd, const char *name, int flags)
{
    int fd = openat(dir_fd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    int error;
    if (checked(fd, &st, &error) < 0) {
        errno = error > 0 ? error : EPERM;
        return -1;
    }
    return fd;
}

/* ---- PyTorch's header count, under the guard ------------------------- */

typedef struct {
    atomic_int *count;
    int seen, result;
} count_op;

static void take(void *arg)
{
    count_op *op = arg;
    int c = atomic_load(op->count);
    do {
        op->seen = c;
        if (c <= 0 || c == INT_MAX)
            return;
    } while (!atomic_compare_exchange_weak(op->count, &c, c + 1));
    op->result = 1;
}

/* Never below zero: a count already zero was dropped by its last holder. */
static void drop(void *arg)
{
    count_op *op = arg;
    int c = atomic_load(op->count);
    do {
        if (c <= 0)
            return;
    } while (!atomic_compare_exchange_weak(op->count, &c, c - 1));
    op->result = c == 1;
}

static void peek(void *arg)
{
    count_op *op = arg;
    op->seen = atomic_load(op->count);
}

static void init(void *arg)
{
    count_op *op = arg;
    atomic_store(op->count, 1);
    op->result = 1;
}

int tb_shm_header_take(void *header, int *seen)
{
    count_op op = {.count = header, .seen = 0, .result = 0};
    if (!tb_fault_run(take, &op))
        return -1;
    *seen = op.seen;
    return op.result;
}

int tb_shm_header_drop(void *header)
{
    count_op op = {.count = header, .result = 0};
    return tb_fault_run(drop, &op) ? op.result : -1;
}

int tb_shm_header_init(void *header)
{
    count_op op = {.count = header, .result = 0};
    return tb_fault_run(init, &op) && op.result;
}

/* ---- What a VM that is gone left ------------------------------------- */

size_t tb_shm_token_length(const char *s)
{
    size_t i = 0;
    while (s[i] >= '0' && s[i] <= '9')
        i++;
    if (i == 0 || s[i] != '-')
        return 0;
    size_t hex = ++i;
    while ((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))
        i++;
    return i - hex == 16 && s[i] == '.' ? i : 0;
}

/* Drops the reference a dead VM held in the header of name; unlinks the
 * name when that was the last. made: the VM was making it, so nobody else
 * knows the name: it goes whatever its count. own: the VM made it, so
 * when its header vanished (shrunk by another program) the name goes too,
 * as no holder can count down to zero. */
static void drop_dead_reference(const char *name, int made, int own)
{
    struct stat st;
    int error;
    int fd = tb_shm_open(name, 0, &st, &error);
    if (fd < 0)
        return; /* gone already, or not ours to touch */
    void *header = !made && st.st_size >= TB_TORCH_HEADER
                       ? mmap(NULL, TB_TORCH_HEADER, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                       : MAP_FAILED;
    close(fd);
    int last = header == MAP_FAILED ? -1 : tb_shm_header_drop(header);
    if (last == 1 || made || (last < 0 && own))
        shm_unlink(name);
    if (header != MAP_FAILED)
        munmap(header, TB_TORCH_HEADER);
}

typedef struct {
    tb_shm_slot *slot;
    uint32_t state;
    char name[NAME_MAX + 1];
} slot_read;

/* Takes the slot's record, leaving it free: whoever reads it acts on it. */
static void take_slot(void *arg)
{
    slot_read *r = arg;
    r->state = atomic_exchange((_Atomic uint32_t *)&r->slot->state, TB_SLOT_FREE);
    if (r->state != TB_SLOT_FREE)
        memcpy(r->name, r->slot->name, sizeof r->name);
}

/* The references listed in a token's journal. */
static void release_journal(int dir_fd, const char *token, size_t length)
{
    char journal[NAME_MAX + 1];
    snprintf(journal, sizeof journal, TB_NAME_PREFIX "%.*s" TB_JOURNAL_SUFFIX, (int)length, token);
    int fd = tb_shm_open_at(dir_fd, journal, O_RDWR);
    struct stat st;
    if (fd < 0)
        return;
    void *base = fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(tb_shm_slot)
                     ? mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                     : MAP_FAILED;
    close(fd);
    if (base == MAP_FAILED)
        return;
    char own[NAME_MAX + 1]; /* the start of the names the token made */
    snprintf(own, sizeof own, "/" TB_TORCH_NAME_PREFIX "%.*s.", (int)length, token);
    size_t slots = (size_t)st.st_size / sizeof(tb_shm_slot);
    for (size_t i = 0; i < slots; i++) {
        slot_read r = {.slot = (tb_shm_slot *)base + i};
        if (!tb_fault_run(take_slot, &r))
            break; /* the journal was shrunk: what is past its end is lost */
        if (r.state != TB_SLOT_HELD && r.state != TB_SLOT_MADE)
            continue;
        char name[NAME_MAX + 2];
        r.name[NAME_MAX] = '\0';
        if (!tb_shm_name(r.name, strlen(r.name), name, sizeof name))
            continue;
        /* Only what the token could have recorded (a forged journal names
         * anything): it makes only names of its own, and holds
         * references only in PyTorch-format headers. */
        int made = r.state == TB_SLOT_MADE, ours = strncmp(name, own, strlen(own)) == 0;
        if (made ? !ours : !tb_shm_torch_format(name))
            continue;
        drop_dead_reference(name, made, ours);
    }
    munmap(base, (size_t)st.st_size);
}

/* 1 when dir_fd/name, a regular file of ours, has no count a holder could
 * take to zero: shorter than header bytes, or its header vanished when
 * read (shrunk by another program). */
static int uncounted(int dir_fd, const char *name, size_t header)
{
    int fd = tb_shm_open_at(dir_fd, name, O_RDONLY);
    if (fd < 0)
        return 0; /* gone already, or not ours to touch */
    struct stat st;
    int none = 0;
    if (fstat(fd, &st) == 0) {
        void *base = st.st_size >= (off_t)header ? mmap(NULL, header, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
        count_op op = {.count = base};
        if (base == MAP_FAILED) {
            none = st.st_size < (off_t)header;
        } else {
            none = !tb_fault_run(peek, &op);
            munmap(base, header);
        }
    }
    close(fd);
    return none;
}

int tb_shm_release_token(int dir_fd, const char *token, size_t length)
{
    release_journal(dir_fd, token, length);
    char lock[NAME_MAX + 1], journal[NAME_MAX + 1];
    snprintf(lock, sizeof lock, TB_NAME_PREFIX "%.*s" TB_LOCK_SUFFIX, (int)length, token);
    snprintf(journal, sizeof journal, TB_NAME_PREFIX "%.*s" TB_JOURNAL_SUFFIX, (int)length, token);
    int listing = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* its own offset */
    DIR *dir = listing >= 0 ? fdopendir(listing) : NULL;
    if (!dir) {
        if (listing >= 0)
            close(listing);
        return 0;
    }
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        const char *name = e->d_name, *t;
        const tb_shm_name_form *form = form_of(name, &t);
        if (!form || strncmp(t, token, length) != 0 || t[length] != '.' || strcmp(name, lock) == 0)
            continue;
        /* A counted name the journal left has holders, who unlink it. */
        if (form->header && !uncounted(dir_fd, name, form->header))
            continue;
        removed += unlinkat(dir_fd, name, 0) == 0 && strcmp(name, journal) != 0;
    }
    closedir(dir);
    unlinkat(dir_fd, lock, 0);
    return removed;
}

int tb_shm_reclaim(const char *skip_token)
{
    int dir_fd = open(TB_SHM_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0)
        return 0;
    int listing = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* its own offset */
    DIR *dir = listing >= 0 ? fdopendir(listing) : NULL;
    if (!dir) {
        if (listing >= 0)
            close(listing);
        close(dir_fd);
        return 0;
    }
    int reclaimed = 0;
    char judged[32] = ""; /* the last token judged: its other names need no second look */
    struct dirent *e;
    while ((e = readdir(dir))) {
        const char *token;
        if (!form_of(e->d_name, &token))
            continue;
        size_t n = tb_shm_token_length(token);
        if (n == 0 || n >= sizeof judged || (strncmp(token, judged, n) == 0 && judged[n] == '\0') ||
            (strncmp(token, skip_token, n) == 0 && skip_token[n] == '\0'))
            continue;
        snprintf(judged, sizeof judged, "%.*s", (int)n, token);
        char lock[NAME_MAX + 1];
        snprintf(lock, sizeof lock, TB_NAME_PREFIX "%s" TB_LOCK_SUFFIX, judged);
        /* A FIFO planted as a lock opens at once here, and is skipped. */
        int fd = tb_shm_open_at(dir_fd, lock, O_RDONLY);
        if (fd < 0) {
            if (errno == ENOENT) /* no lock: its creator is gone */
                reclaimed += tb_shm_release_token(dir_fd, judged, n);
            continue; /* not ours to judge (another user's, or no lock file) */
        }
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            reclaimed += tb_shm_release_token(dir_fd, judged, n);
        close(fd); /* drops the lock, if taken */
    }
    closedir(dir);
    close(dir_fd);
    return reclaimed;
}
