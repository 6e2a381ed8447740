#define _GNU_SOURCE /* shm_open, ftruncate, getpid, fallocate, dladdr */
#include "tb_ipc.h"

#include <dirent.h>
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
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tb_fault.h"
#include "tb_layout.h"
#include "tb_nifs.h"
#include "tb_shm_names.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"

/* A mapped region: the storage of the tensors over it. The process that
 * created the name removes it when its own mapping is freed (or its reaper
 * does, when the VM dies first): openers that mapped it before keep their
 * mapping (POSIX), later opens fail cleanly. */
typedef struct {
    tb_storage header; /* TB_MEMORY_REGION; the region's file identifies it */
    void *addr;
    size_t length;    /* what is mapped: at least one byte */
    size_t byte_size; /* what the tensor covers, from the start */
    int created;
    tb_range mapping; /* registered while mapped (tb_storage_map_file) */
    char name[NAME_MAX + 2]; /* "/" and the name */
} tb_region;

static void release_region(tb_storage *s)
{
    tb_region *r = (tb_region *)s;
    if (r->created)
        shm_unlink(r->name);
    tb_storage_unmap_file(&r->mapping);
    free(r);
}

/* Maps fd for length bytes (at least one), and names the region's file. */
static tb_region *map_region(int fd, const char *name, size_t length, size_t byte_size, int created, int *error)
{
    tb_region *r = malloc(sizeof *r);
    if (!r) {
        *error = ENOMEM;
        return NULL;
    }
    r->length = length ? length : 1;
    tb_storage_init(&r->header, TB_MEMORY_REGION, 0, release_region);
    r->addr = tb_storage_map_file(&r->header, fd, r->length, 0, &r->mapping, error);
    if (!r->addr) {
        free(r);
        return NULL;
    }
    r->byte_size = byte_size;
    r->created = created;
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

static ERL_NIF_TERM make_tensor(ErlNifEnv *env, tb_region *r, const tb_dense *d)
{
    const tb_layout *l = &d->layout;
    tb_shim_tensor *h;
    tb_shim_error err;
    if (!tb_shim_from_blob(r->addr, l->ndim, l->shape, l->strides, tb_dtypes[d->dtype].torch_scalar_type, TB_DEVICE_CPU,
                           0, &r->header, tb_storage_release, &h, &err))
        return tb_raise_error(env, "ipc: %s", err.message);
    return tb_tensor_return(env, h);
}

/* ---- Names and their creators' lives (tb_shm_names.h) ----------------
 *
 * This VM's token and lock are made with its first region; a reaper
 * process started then waits for the lock and removes the names within
 * moments of the VM's death (tensor_blob_reaper.c). */

static pthread_mutex_t owner_lock = PTHREAD_MUTEX_INITIALIZER;
static int owner_fd = -1;        /* holds the lock; never closed */
static char owner_token[32];     /* "<pid>-<hex>" */

/* Names of creators that are gone: their lock is free, or was removed with
 * their last names by an earlier reclaim that stopped part way. Names of
 * another form (earlier builds named regions by pid alone) are left: a
 * pid cannot say whether their creator lives. */
static int reclaim_stale(void)
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
        if (strncmp(e->d_name, TB_NAME_PREFIX, strlen(TB_NAME_PREFIX)) != 0)
            continue;
        const char *token = e->d_name + strlen(TB_NAME_PREFIX);
        size_t n = tb_shm_token_length(token);
        if (n == 0 || n >= sizeof judged || (strncmp(token, judged, n) == 0 && judged[n] == '\0') ||
            (strncmp(token, owner_token, n) == 0 && owner_token[n] == '\0'))
            continue;
        snprintf(judged, sizeof judged, "%.*s", (int)n, token);
        char lock[NAME_MAX + 1];
        snprintf(lock, sizeof lock, TB_NAME_PREFIX "%s" TB_LOCK_SUFFIX, judged);
        int fd = openat(dir_fd, lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            if (errno == ENOENT) /* no lock: its creator is gone */
                reclaimed += tb_shm_unlink_token(dir_fd, judged, n);
            continue; /* not ours to judge (another user's) */
        }
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            reclaimed += tb_shm_unlink_token(dir_fd, judged, n);
        close(fd); /* drops the lock, if taken */
    }
    closedir(dir);
    close(dir_fd);
    return reclaimed;
}

/* The reaper beside this library (priv/tensor_blob_reaper): started once,
 * it leaves at once and its child waits for our lock. Without it, names
 * are still reclaimed by the next VM that loads tensor_blob. */
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

/* Makes this VM's token and takes its lock, once. 0 with *error set. */
static int own_names(int *error)
{
    pthread_mutex_lock(&owner_lock);
    for (int attempt = 0; owner_fd < 0 && attempt < 8; attempt++) {
        uint64_t nonce;
        if (getrandom(&nonce, sizeof nonce, 0) != sizeof nonce)
            nonce = (uint64_t)(uintptr_t)&nonce ^ (uint64_t)getpid() * 0x9e3779b97f4a7c15u;
        char token[sizeof owner_token];
        snprintf(token, sizeof token, "%d-%016llx", (int)getpid(), (unsigned long long)nonce);
        char path[NAME_MAX + sizeof TB_SHM_DIR + 2];
        snprintf(path, sizeof path, TB_SHM_DIR "/" TB_NAME_PREFIX "%s" TB_LOCK_SUFFIX, token);
        int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            *error = errno;
            if (*error == EEXIST)
                continue;
            break;
        }
        struct stat st;
        /* A reclaim that ran between the open and the lock removed the
         * file: the lock would guard nothing. Take another token. */
        if (flock(fd, LOCK_EX | LOCK_NB) != 0 || fstat(fd, &st) != 0 || st.st_nlink == 0) {
            *error = errno ? errno : EAGAIN;
            close(fd);
            continue;
        }
        snprintf(owner_token, sizeof owner_token, "%s", token);
        owner_fd = fd;
        start_reaper(path + strlen(TB_SHM_DIR "/"));
    }
    int ok = owner_fd >= 0;
    pthread_mutex_unlock(&owner_lock);
    return ok;
}

void tb_ipc_load(void)
{
    tb_fault_install();
    reclaim_stale();
}

ERL_NIF_TERM tb_nif_ipc_reclaim(TB_NIF_PARAMS)
{
    (void)argv;
    return enif_make_int(env, reclaim_stale());
}

static ERL_NIF_TERM ipc_zeros(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_dense(env, argv[0], argv[1], &d, &exc))
        return exc;
    static atomic_uint counter;
    char name[NAME_MAX + 2];
    int error = 0;
    if (!own_names(&error))
        return tb_raise_error(env, "ipc: cannot make the lock that marks this VM's regions as alive in " TB_SHM_DIR
                                   ": %s",
                              strerror(error));
    snprintf(name, sizeof name, "/" TB_NAME_PREFIX "%s.%u", owner_token, atomic_fetch_add(&counter, 1));
    /* Owner-only permissions, and never an existing name. */
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return tb_raise_error(env, "ipc: shm_open failed: %s", strerror(errno));
    size_t length = d.check.byte_size ? d.check.byte_size : 1;
    /* Reserve the pages now: a region only sized with ftruncate on a full
     * tmpfs maps fine and kills the VM with SIGBUS at the first write. */
    error = ftruncate(fd, (off_t)length) != 0 ? errno : posix_fallocate(fd, 0, (off_t)length);
    if (error) {
        close(fd);
        shm_unlink(name);
        struct statvfs vfs;
        if (error == ENOSPC && statvfs(TB_SHM_DIR, &vfs) == 0)
            return tb_raise_error(env, "ipc: a region of %lu bytes does not fit in " TB_SHM_DIR " (%lu bytes free)",
                                  (unsigned long)length, (unsigned long)(vfs.f_bavail * vfs.f_frsize));
        return tb_raise_error(env, "ipc: cannot reserve %lu bytes of shared memory: %s", (unsigned long)length,
                              strerror(error));
    }
    tb_region *r = map_region(fd, name, length, d.check.byte_size, 1, &error);
    close(fd);
    if (!r) {
        shm_unlink(name);
        return tb_raise_error(env, "ipc: cannot map %lu bytes of shared memory: %s", (unsigned long)length,
                              strerror(error));
    }
    return make_tensor(env, r, &d);
}

ERL_NIF_TERM tb_nif_ipc_zeros(TB_NIF_PARAMS)
{
    /* Reserving the pages writes them: dirty when large. */
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_dense(env, argv[0], argv[1], &d, &exc))
        return exc;
    return tb_run_copy(env, "ipc_zeros", d.check.byte_size, 0, ipc_zeros, argc, argv);
}

ERL_NIF_TERM tb_nif_ipc_name(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc))
        return exc;
    if (tb_storage_kind(&d.info) != TB_MEMORY_REGION)
        return tb_atoms.nil;
    const tb_region *r = (const tb_region *)tb_storage_of(&d.info);
    /* Only the whole region, row-major from its start, is what an opener maps. */
    if (d.info.data != r->addr || !d.info.is_contiguous || d.dense_bytes != r->byte_size)
        return tb_atoms.nil;
    return enif_make_tuple2(env, tb_make_string(env, r->name), enif_make_uint64(env, r->byte_size));
}

/* What shm_open accepts on Linux (glibc): an optional leading slash, then
 * 1 to NAME_MAX - 2 bytes with no slash and no NUL, other than "." and "..". */
#define TB_SHM_NAME_MAX (NAME_MAX - 2)
static int shm_name(const ErlNifBinary *bin, char *out, size_t size)
{
    const unsigned char *p = bin->data;
    size_t n = bin->size;
    if (n > 0 && p[0] == '/') {
        p++;
        n--;
    }
    if (n == 0 || n > TB_SHM_NAME_MAX || memchr(p, '/', n) || memchr(p, '\0', n) || (n == 1 && p[0] == '.') ||
        (n == 2 && p[0] == '.' && p[1] == '.'))
        return 0;
    snprintf(out, size, "/%.*s", (int)n, (const char *)p);
    return 1;
}

static ERL_NIF_TERM ipc_open(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifBinary bin;
    char name[NAME_MAX + 2];
    if (!enif_inspect_binary(env, argv[0], &bin))
        return tb_raise_badarg(env, "handle: expected a shared-memory name (a binary), got %T", argv[0]);
    if (!shm_name(&bin, name, sizeof name))
        return tb_raise_badarg(env, "handle: %T is no shared-memory name (an optional leading slash, then 1 to %d "
                                    "bytes with no slash or NUL)",
                               argv[0], TB_SHM_NAME_MAX);
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_dense(env, argv[2], argv[1], &d, &exc))
        return exc;

    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return tb_raise_badarg(env, "handle: no shared memory named %T (removed, or never created)", argv[0]);
        return tb_raise_badarg(env, "handle: cannot open shared memory %T: %s", argv[0], strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size < d.check.byte_size) {
        close(fd);
        return tb_raise_badarg(env, "shape: %T of %s needs %lu bytes; the shared memory %T holds %ld", argv[2],
                               tb_dtypes[d.dtype].name, (unsigned long)d.check.byte_size, argv[0],
                               (long)st.st_size);
    }
    /* An empty region is mapped one byte long, and unmapped as long. */
    if (st.st_size == 0) {
        close(fd);
        if (d.check.byte_size > 0)
            return tb_raise_badarg(env, "shape: the shared memory %T is empty", argv[0]);
        tb_shim_tensor *h;
        tb_shim_error err;
        if (!tb_shim_zeros(d.layout.ndim, d.layout.shape, tb_dtypes[d.dtype].torch_scalar_type, &h, &err))
            return tb_raise_error(env, "ipc: %s", err.message);
        return tb_tensor_return(env, h);
    }
    /* Reserve the pages, as for a region made here: one only sized with
     * ftruncate (as Python's shared_memory makes them) on a full tmpfs
     * maps fine and faults at the first write. KEEP_SIZE: the creator's
     * file keeps its size whatever happens to it meanwhile. A region
     * whose pages are all there (st_blocks) needs nothing: open stays
     * O(1) for the regions tensor_blob and most programs make. */
    int sparse = (uint64_t)st.st_blocks * 512 < (uint64_t)st.st_size;
    if (sparse && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, st.st_size) != 0 && errno != EOPNOTSUPP &&
        errno != ENOSYS) {
        int e = errno;
        close(fd);
        struct statvfs vfs;
        if (e == ENOSPC && statvfs(TB_SHM_DIR, &vfs) == 0)
            return tb_raise_error(env, "ipc: the shared memory %T has %ld bytes, not all of them stored yet, and "
                                       "they do not fit in " TB_SHM_DIR " (%lu bytes free); its writes would fail",
                                  argv[0], (long)st.st_size, (unsigned long)(vfs.f_bavail * vfs.f_frsize));
        return tb_raise_error(env, "ipc: cannot reserve the %ld bytes of the shared memory %T: %s", (long)st.st_size,
                              argv[0], strerror(e));
    }
    int error;
    tb_region *r = map_region(fd, name, (size_t)st.st_size, d.check.byte_size, 0, &error);
    close(fd);
    if (!r)
        return tb_raise_error(env, "ipc: cannot map %T: %s", argv[0], strerror(error));
    return make_tensor(env, r, &d);
}

ERL_NIF_TERM tb_nif_ipc_open(TB_NIF_PARAMS)
{
    /* Reserving the pages of a sparse region writes them: dirty when large. */
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_dense(env, argv[2], argv[1], &d, &exc))
        return exc;
    return tb_run_copy(env, "ipc_open", d.check.byte_size, 0, ipc_open, argc, argv);
}
