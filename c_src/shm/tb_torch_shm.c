#define _GNU_SOURCE /* shm_open, ftruncate, getpid, posix_fallocate */
#include "tb_torch_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_layout.h"
#include "tb_nifs.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "tb_torch_cuda.h"

/* PyTorch keeps the count in a std::atomic<int> at the start of the header:
 * lock-free on every platform it shares memory on, so the same bytes as a
 * C11 atomic_int, which other processes update concurrently. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the header's count must be a lock-free int, as PyTorch's is");
_Static_assert(sizeof(atomic_int) == sizeof(int), "the header's count is an int");

/* One mapping of a region: the storage of the tensors over its data. It
 * holds one reference in the header from the open (or the creation) until
 * the last tensor over it is freed. */
typedef struct {
    tb_storage header; /* TB_MEMORY_TORCH_SHM; the region's file identifies it */
    void *base;        /* the header; the data starts TB_TORCH_SHM_HEADER bytes in */
    size_t length;     /* what is mapped: header and data */
    size_t byte_size;  /* what the tensor covers, from the data's start */
    tb_range mapping;  /* registered while mapped (tb_storage_map_file) */
    char name[NAME_MAX + 2];
} tb_torch_region;

#define TB_TORCH_PREFIX "torch_tensor_blob."

static atomic_int *refcount_of(void *base)
{
    return (atomic_int *)base;
}

static void *data_of(const tb_torch_region *r)
{
    return (char *)r->base + TB_TORCH_SHM_HEADER;
}

/* As PyTorch's RefcountedMapAllocator::close: the holder that takes the
 * count to zero unlinks the name; every holder unmaps its own mapping. */
static void release_region(tb_storage *s)
{
    tb_torch_region *r = (tb_torch_region *)s;
    if (atomic_fetch_sub(refcount_of(r->base), 1) == 1)
        shm_unlink(r->name); /* ENOENT: PyTorch's shm manager removed it when its processes ended */
    tb_storage_unmap_file(&r->mapping);
    free(r);
}

/* Maps fd for length bytes; 0 with *error set when it cannot. */
static tb_torch_region *map_region(int fd, const char *name, size_t length, size_t byte_size, int *error)
{
    tb_torch_region *r = malloc(sizeof *r);
    if (!r) {
        *error = ENOMEM;
        return NULL;
    }
    tb_storage_init(&r->header, TB_MEMORY_TORCH_SHM, 0, release_region);
    r->base = tb_storage_map_file(&r->header, fd, length, TB_TORCH_SHM_HEADER, &r->mapping, error);
    if (!r->base) {
        free(r);
        return NULL;
    }
    r->length = length;
    r->byte_size = byte_size;
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

/* The tensor over the data; on failure the region's reference is dropped. */
static ERL_NIF_TERM make_tensor(ErlNifEnv *env, tb_torch_region *r, const tb_dense *d)
{
    const tb_layout *l = &d->layout;
    tb_shim_tensor *h;
    tb_shim_error err;
    if (!tb_shim_from_blob(data_of(r), l->ndim, l->shape, l->strides, tb_dtypes[d->dtype].torch_scalar_type,
                           TB_DEVICE_CPU, 0, &r->header, tb_storage_release, &h, &err))
        return tb_raise_error(env, "torch_shm: %s", err.message);
    return tb_tensor_return(env, h);
}

static ERL_NIF_TERM torch_shm_zeros(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_dense(env, argv[0], argv[1], &d, &exc))
        return exc;
    static atomic_uint counter;
    char name[NAME_MAX + 2];
    unsigned salt = (unsigned)(uintptr_t)&d ^ (unsigned)getpid() * 2654435761u;
    snprintf(name, sizeof name, "/" TB_TORCH_PREFIX "%d.%u.%08x", (int)getpid(), atomic_fetch_add(&counter, 1),
             salt);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        return tb_raise_error(env, "torch_shm: shm_open failed: %s", strerror(errno));
    size_t length = TB_TORCH_SHM_HEADER + (size_t)d.check.byte_size;
    /* The pages are reserved now: on a full tmpfs a first write to pages
     * only promised by ftruncate kills the VM with SIGBUS. */
    int error = ftruncate(fd, (off_t)length) != 0 ? errno : posix_fallocate(fd, 0, (off_t)length);
    tb_torch_region *r = error ? NULL : map_region(fd, name, length, d.check.byte_size, &error);
    close(fd);
    if (!r) {
        shm_unlink(name);
        return tb_raise_error(env, "torch_shm: cannot reserve %lu bytes of shared memory: %s",
                              (unsigned long)length, strerror(error));
    }
    /* Nobody else knows the name yet: the creator's reference, as PyTorch
     * sets it when it creates a region (ALLOCATOR_MAPPED_EXCLUSIVE). */
    atomic_store(refcount_of(r->base), 1);
    return make_tensor(env, r, &d);
}

ERL_NIF_TERM tb_nif_torch_shm_zeros(TB_NIF_PARAMS)
{
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_dense(env, argv[0], argv[1], &d, &exc))
        return exc;
    return tb_run_copy(env, "torch_shm_zeros", d.check.byte_size, 0, torch_shm_zeros, argc, argv);
}

/* A shared-memory name as shm_open takes it: "/" then 1 to NAME_MAX - 2
 * bytes, no slash, no NUL, not "." or "..". */
static int region_name(const ErlNifBinary *bin, char *out, size_t size)
{
    const char *p = (const char *)bin->data;
    size_t n = bin->size;
    if (n > 0 && p[0] == '/')
        p++, n--;
    int dots = (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.');
    if (n == 0 || n > NAME_MAX - 2 || dots || memchr(p, '/', n) || memchr(p, '\0', n))
        return 0;
    snprintf(out, size, "/%.*s", (int)n, p);
    return 1;
}

ERL_NIF_TERM tb_nif_torch_shm_open(TB_NIF_PARAMS)
{
    ErlNifBinary bin;
    char name[NAME_MAX + 2];
    if (!enif_inspect_binary(env, argv[0], &bin) || !region_name(&bin, name, sizeof name))
        return tb_raise_badarg(env, "handle: expected the name of a PyTorch shared-memory region (\"/torch_...\"), "
                                    "got %T",
                               argv[0]);
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_dense(env, argv[2], argv[1], &d, &exc))
        return exc;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return tb_raise_badarg(env, "handle: no shared memory named %T (freed by its last user, or never "
                                        "created)",
                                   argv[0]);
        return tb_raise_badarg(env, "handle: cannot open shared memory %T: %s", argv[0], strerror(e));
    }
    struct stat st;
    uint64_t needed = TB_TORCH_SHM_HEADER + d.check.byte_size;
    if (fstat(fd, &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size < needed) {
        close(fd);
        return tb_raise_badarg(env, "shape: %T of %s needs %lu bytes after PyTorch's %d-byte header; the shared "
                                    "memory %T holds %ld in all",
                               argv[2], tb_dtypes[d.dtype].name, (unsigned long)d.check.byte_size,
                               TB_TORCH_SHM_HEADER, argv[0], (long)st.st_size);
    }
    int error;
    tb_torch_region *r = map_region(fd, name, (size_t)st.st_size, d.check.byte_size, &error);
    close(fd);
    if (!r)
        return tb_raise_error(env, "torch_shm: cannot map %T: %s", argv[0], strerror(error));
    int seen;
    if (!tb_torch_take_reference(refcount_of(r->base), &seen)) {
        tb_storage_unmap_file(&r->mapping);
        free(r);
        return tb_raise_badarg(env, "handle: %T holds no live PyTorch region (its reference count is %d)", argv[0],
                               seen);
    }
    return make_tensor(env, r, &d);
}

ERL_NIF_TERM tb_nif_torch_shm_name(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc))
        return exc;
    if (tb_storage_kind(&d.info) != TB_MEMORY_TORCH_SHM)
        return tb_atoms.nil;
    const tb_torch_region *r = (const tb_torch_region *)tb_storage_of(&d.info);
    /* Only the whole data, row-major from its start, is what PyTorch rebuilds. */
    if (d.info.data != data_of(r) || !d.info.is_contiguous || d.dense_bytes != r->byte_size)
        return tb_atoms.nil;
    return enif_make_tuple2(env, tb_make_string(env, r->name), enif_make_uint64(env, r->byte_size));
}
