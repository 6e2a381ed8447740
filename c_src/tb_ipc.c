#define _GNU_SOURCE /* shm_open, ftruncate, getpid */
#include "tb_ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_args.h"
#include "tb_nif.h"
#include "tb_spec.h"
#include "tb_tensor.h"

/* A mapped region; the storage deleter's context. The process that created
 * the name removes it when its own mapping is freed: openers that mapped it
 * before keep their mapping (POSIX), later opens fail cleanly. */
typedef struct {
    void *addr;
    size_t length;
    size_t byte_size; /* what the tensor covers, from the start */
    char name[NAME_MAX + 1];
} tb_region;

/* What glibc's shm_open takes: an optional leading '/', then 1 to
 * NAME_MAX - 2 bytes with no '/' (Torchx's names have no leading slash). */
#define TB_IPC_NAME_MAX (NAME_MAX - 2)

static void region_unmap(tb_region *r)
{
    if (r->length)
        munmap(r->addr, r->length);
    enif_free(r);
}

/* Two deleters: the address tells a creator's storage from an opener's. */
static void release_created(void *ctx)
{
    tb_region *r = ctx;
    shm_unlink(r->name);
    region_unmap(r);
}

static void release_opened(void *ctx)
{
    region_unmap(ctx);
}

/* Maps fd for length bytes (at least one page), or NULL. */
static void *map_fd(int fd, size_t length)
{
    void *addr = mmap(NULL, length ? length : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return addr == MAP_FAILED ? NULL : addr;
}

static ERL_NIF_TERM make_tensor(ErlNifEnv *env, tb_region *r, const tb_layout *l, tb_dtype_id dtype,
                                void (*deleter)(void *))
{
    tb_shim_tensor *h;
    tb_shim_error err;
    if (!tb_shim_from_blob(r->addr, l->ndim, l->shape, l->strides, tb_dtypes[dtype].torch_scalar_type, TB_DEVICE_CPU,
                           0, r, deleter, &h, &err))
        return tb_raise_error(env, "ipc: %s", err.message);
    return tb_tensor_make(env, h);
}

ERL_NIF_TERM tb_nif_ipc_zeros(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_layout l;
    tb_dtype_id dtype;
    tb_spec_result s;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_shape_dtype(env, argv[0], argv[1], &l, &dtype, &s, &exc))
        return exc;
    tb_region *r = enif_alloc(sizeof *r);
    if (!r)
        return tb_raise_error(env, "ipc: out of memory");
    static atomic_uint counter;
    unsigned salt = (unsigned)(uintptr_t)r ^ (unsigned)getpid() * 2654435761u;
    snprintf(r->name, sizeof r->name, "/tensor_blob.%d.%u.%08x", (int)getpid(), atomic_fetch_add(&counter, 1), salt);
    /* Owner-only permissions, and never an existing name. */
    int fd = shm_open(r->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        int e = errno;
        enif_free(r);
        return tb_raise_error(env, "ipc: shm_open failed: %s", strerror(e));
    }
    r->byte_size = s.byte_size;
    r->length = s.byte_size ? s.byte_size : 1;
    if (ftruncate(fd, (off_t)r->length) != 0 || !(r->addr = map_fd(fd, r->length))) {
        int e = errno;
        close(fd);
        shm_unlink(r->name);
        enif_free(r);
        return tb_raise_error(env, "ipc: cannot size or map %lu bytes of shared memory: %s",
                              (unsigned long)s.byte_size, strerror(e));
    }
    close(fd);
    return make_tensor(env, r, &l, dtype, release_created);
}

ERL_NIF_TERM tb_nif_ipc_name(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_tensor *t = tb_tensor_get(env, argv[0]);
    if (!t)
        return tb_raise_badarg(env, "tensor: expected a tensor, got %T", argv[0]);
    tb_shim_info info;
    tb_shim_info_of(t->handle, &info);
    if (info.storage_deleter != release_created && info.storage_deleter != release_opened)
        return tb_atoms.nil;
    tb_region *r = info.storage_context;
    /* Only the whole region, row-major from its start, is what an opener maps. */
    if (info.data != r->addr || !info.is_contiguous || tb_tensor_dense_bytes(&info) != r->byte_size)
        return tb_atoms.nil;
    ERL_NIF_TERM name;
    size_t n = strlen(r->name);
    memcpy(enif_make_new_binary(env, n, &name), r->name, n);
    return enif_make_tuple2(env, name, enif_make_uint64(env, r->byte_size));
}

ERL_NIF_TERM tb_nif_ipc_open(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifBinary bin;
    if (!enif_inspect_binary(env, argv[0], &bin))
        return tb_raise_badarg(env, "handle: expected a shared-memory name (a binary), got %T", argv[0]);
    size_t slash = bin.size > 0 && bin.data[0] == '/';
    if (bin.size - slash < 1 || bin.size - slash > TB_IPC_NAME_MAX || memchr(bin.data + slash, '/', bin.size - slash) ||
        memchr(bin.data, '\0', bin.size))
        return tb_raise_badarg(env, "handle: %T is no shared-memory name (\"name\" or \"/name\": 1 to %d bytes after "
                                    "an optional leading slash, no other slash, no NUL)",
                               argv[0], TB_IPC_NAME_MAX);
    tb_layout l;
    tb_dtype_id dtype;
    tb_spec_result s;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_shape_dtype(env, argv[2], argv[1], &l, &dtype, &s, &exc))
        return exc;

    tb_region *r = enif_alloc(sizeof *r);
    if (!r)
        return tb_raise_error(env, "ipc: out of memory");
    memcpy(r->name, bin.data, bin.size);
    r->name[bin.size] = '\0';
    int fd = shm_open(r->name, O_RDWR, 0);
    if (fd < 0) {
        int e = errno;
        enif_free(r);
        if (e == ENOENT)
            return tb_raise_badarg(env, "handle: no shared memory named %T (removed, or never created)", argv[0]);
        return tb_raise_badarg(env, "handle: cannot open shared memory %T: %s", argv[0], strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size < s.byte_size) {
        close(fd);
        enif_free(r);
        return tb_raise_badarg(env, "shape: %T of %s needs %lu bytes; the shared memory %T holds %ld", argv[2],
                               tb_dtypes[dtype].name, (unsigned long)s.byte_size, argv[0], (long)st.st_size);
    }
    r->byte_size = s.byte_size;
    r->length = (size_t)st.st_size;
    r->addr = map_fd(fd, r->length);
    int e = errno;
    close(fd);
    if (!r->addr) {
        enif_free(r);
        return tb_raise_error(env, "ipc: cannot map %T: %s", argv[0], strerror(e));
    }
    return make_tensor(env, r, &l, dtype, release_opened);
}
