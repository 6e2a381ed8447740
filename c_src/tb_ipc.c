#define _GNU_SOURCE /* shm_open, ftruncate, getpid, posix_fallocate */
#include "tb_ipc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "tb_layout.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"

/* A mapped region: the storage of the tensors over it. The process that
 * created the name removes it when its own mapping is freed: openers that
 * mapped it before keep their mapping (POSIX), later opens fail cleanly. */
typedef struct {
    tb_storage header; /* TB_MEMORY_REGION; the region's file identifies it */
    void *addr;
    size_t length;    /* what is mapped: at least one byte */
    size_t byte_size; /* what the tensor covers, from the start */
    int created;
    tb_range mapping; /* registered while mapped (tb_storage_mapped) */
    char name[NAME_MAX + 2]; /* "/" and the name */
} tb_region;

#define TB_SHM_DIR "/dev/shm"
#define TB_NAME_PREFIX "tensor_blob."

static void release_region(tb_storage *s)
{
    tb_region *r = (tb_region *)s;
    if (r->created)
        shm_unlink(r->name);
    tb_storage_unmapped(&r->mapping);
    munmap(r->addr, r->length);
    free(r);
}

/* Maps fd for length bytes (at least one), and names the region's file. */
static tb_region *map_region(int fd, const char *name, size_t length, size_t byte_size, int created, int *error)
{
    struct stat st;
    tb_region *r = malloc(sizeof *r);
    if (!r || fstat(fd, &st) != 0) {
        *error = r ? errno : ENOMEM;
        free(r);
        return NULL;
    }
    r->length = length ? length : 1;
    r->addr = mmap(NULL, r->length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r->addr == MAP_FAILED) {
        *error = errno;
        free(r);
        return NULL;
    }
    r->byte_size = byte_size;
    r->created = created;
    snprintf(r->name, sizeof r->name, "%s", name);
    tb_storage_init(&r->header, TB_MEMORY_REGION, 0, release_region);
    r->header.file_dev = (uint64_t)st.st_dev;
    r->header.file_ino = (uint64_t)st.st_ino;
    r->header.file_offset = 0;
    r->mapping = (tb_range){.lo = (uintptr_t)r->addr,
                            .hi = (uintptr_t)r->addr + r->length,
                            .file_dev = r->header.file_dev,
                            .file_ino = r->header.file_ino,
                            .file_lo = 0,
                            .file_hi = r->length};
    tb_storage_mapped(&r->mapping);
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

/* Names left by creators that are gone: destructors do not run when a VM
 * halts. Our names carry the creator's OS pid ("tensor_blob.<pid>...."). */
static int reclaim_stale(void)
{
    DIR *dir = opendir(TB_SHM_DIR);
    if (!dir)
        return 0;
    int reclaimed = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (strncmp(e->d_name, TB_NAME_PREFIX, strlen(TB_NAME_PREFIX)) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + strlen(TB_NAME_PREFIX), &end, 10);
        if (pid <= 0 || *end != '.' || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* alive, or not ours to ask: keep it */
        char name[NAME_MAX + 2];
        snprintf(name, sizeof name, "/%s", e->d_name);
        reclaimed += shm_unlink(name) == 0;
    }
    closedir(dir);
    return reclaimed;
}

void tb_ipc_load(void)
{
    reclaim_stale();
}

ERL_NIF_TERM tb_nif_ipc_reclaim(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
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
    unsigned salt = (unsigned)(uintptr_t)&d ^ (unsigned)getpid() * 2654435761u;
    snprintf(name, sizeof name, "/" TB_NAME_PREFIX "%d.%u.%08x", (int)getpid(), atomic_fetch_add(&counter, 1),
             salt);
    /* Owner-only permissions, and never an existing name. */
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        return tb_raise_error(env, "ipc: shm_open failed: %s", strerror(errno));
    size_t length = d.check.byte_size ? d.check.byte_size : 1;
    /* Reserve the pages now: a region only sized with ftruncate on a full
     * tmpfs maps fine and kills the VM with SIGBUS at the first write. */
    int error = ftruncate(fd, (off_t)length) != 0 ? errno : posix_fallocate(fd, 0, (off_t)length);
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

ERL_NIF_TERM tb_nif_ipc_zeros(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    /* Reserving the pages writes them: dirty when large. */
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_dense(env, argv[0], argv[1], &d, &exc))
        return exc;
    return tb_run_copy(env, "ipc_zeros", d.check.byte_size, 0, ipc_zeros, argc, argv);
}

ERL_NIF_TERM tb_nif_ipc_name(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
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

ERL_NIF_TERM tb_nif_ipc_open(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
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

    int fd = shm_open(name, O_RDWR, 0);
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
    int error;
    tb_region *r = map_region(fd, name, (size_t)st.st_size, d.check.byte_size, 0, &error);
    close(fd);
    if (!r)
        return tb_raise_error(env, "ipc: cannot map %T: %s", argv[0], strerror(error));
    return make_tensor(env, r, &d);
}
