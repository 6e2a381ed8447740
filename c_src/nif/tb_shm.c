#define _GNU_SOURCE /* fallocate, FALLOC_FL_KEEP_SIZE */
#include "tb_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "tb_layout.h"
#include "tb_nifs.h"
#include "tb_shm_names.h"
#include "tb_shm_owner.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"

/* A format: what comes before the data, and what names it makes. */
typedef struct {
    tb_memory_kind kind;
    size_t header;      /* 0, or PyTorch's counted header */
    const char *prefix; /* of the names made here */
    const char *tag;    /* the start of its error messages */
    const char *gone;   /* why a name may be missing */
} region_format;

static const region_format posix_format = {TB_MEMORY_REGION, 0, TB_NAME_PREFIX, "ipc", "removed, or never created"};
static const region_format torch_format = {TB_MEMORY_TORCH_SHM, TB_TORCH_HEADER, TB_TORCH_NAME_PREFIX, "torch_shm",
                                           "freed by its last user, or never created: the exporting process "
                                           "must hold its tensor until this side has opened it"};

/* One mapping of a region: the storage of the tensors over its data. A
 * plain region's creator removes the name when its mapping is freed (or
 * its reaper does, when the VM dies first): openers that mapped it before
 * keep their mapping (POSIX), later opens fail cleanly. A PyTorch-format
 * mapping holds one reference in the header from the open (or the
 * creation) until the last tensor over it is freed, recorded in the
 * journal meanwhile. */
typedef struct {
    tb_storage header; /* the format's kind; the region's file identifies it */
    const region_format *format;
    void *base;       /* the file's first byte; the data starts format->header in */
    size_t length;    /* what is mapped: at least one byte */
    size_t byte_size; /* what the tensor covers, from the data's start */
    int created;      /* made here: a plain region's name goes with it */
    tb_shm_ref ref;   /* the journal's record of the header reference */
    tb_range mapping; /* registered while mapped (tb_storage_map_file) */
    char name[NAME_MAX + 2];
} tb_region;

static void *data_of(const tb_region *r)
{
    return (char *)r->base + r->format->header;
}

/* As PyTorch's RefcountedMapAllocator::close for the counted format: the
 * holder that takes the count to zero unlinks the name; every holder
 * unmaps its own mapping. The count is touched under the SIGBUS guard: a
 * file another program shrank leaves nothing to drop. */
static void release_region(tb_storage *s)
{
    tb_region *r = (tb_region *)s;
    if (r->format->header) {
        /* A header that vanished counts nothing: its creator removes the
         * name, as no holder can reach zero. */
        int last = tb_shm_owner_forget(&r->ref) ? tb_shm_header_drop(r->base) : 0;
        if (last == 1 || (last < 0 && r->created))
            shm_unlink(r->name); /* ENOENT: PyTorch's shm manager removed it when its processes ended */
    } else if (r->created) {
        shm_unlink(r->name);
    }
    tb_storage_unmap_file(&r->mapping);
    free(r);
}

/* Maps fd for length bytes (at least one); NULL with *error. */
static tb_region *map_region(const region_format *f, int fd, const char *name, size_t length, size_t byte_size,
                             int created, int *error)
{
    tb_region *r = malloc(sizeof *r);
    if (!r) {
        *error = ENOMEM;
        return NULL;
    }
    r->format = f;
    r->length = length ? length : 1;
    tb_storage_init(&r->header, f->kind, 0, release_region);
    r->base = tb_storage_map_file(&r->header, fd, r->length, f->header, &r->mapping, error);
    if (!r->base) {
        free(r);
        return NULL;
    }
    r->byte_size = byte_size;
    r->created = created;
    r->ref.journal = NULL;
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

/* Undoes map_region when no tensor was made (no reference held). */
static void unmap_region(tb_region *r)
{
    tb_storage_unmap_file(&r->mapping);
    free(r);
}

/* The tensor over the data; on failure the region is released. */
static ERL_NIF_TERM make_tensor(ErlNifEnv *env, tb_region *r, const tb_dense *d)
{
    const tb_layout *l = &d->layout;
    tb_shim_tensor *h;
    tb_shim_error err;
    if (!tb_shim_from_blob(data_of(r), l->ndim, l->shape, l->strides, tb_dtypes[d->dtype].torch_scalar_type,
                           TB_DEVICE_CPU, 0, &r->header, tb_storage_release, &h, &err))
        return tb_raise_error(env, TB_WHY_LIBTORCH, NULL, "%s: %s", r->format->tag, err.message);
    return tb_tensor_return(env, h);
}

/* A region that could not be made: for want of room, said about the shape
 * with the bytes it needs, as a tensor that cannot be allocated is. */
static ERL_NIF_TERM no_room(ErlNifEnv *env, const region_format *f, const tb_dense *d, size_t length, int error)
{
    struct statvfs vfs;
    if (error == ENOSPC && statvfs(TB_SHM_DIR, &vfs) == 0)
        return tb_raise_error(env, TB_WHY_NO_MEMORY, "shape",
                              "shape: %T of %s needs %lu bytes; %s: a region of %lu bytes does not fit in " TB_SHM_DIR
                              " (%lu bytes free)",
                              tb_make_shape(env, d->layout.ndim, d->layout.shape), tb_dtypes[d->dtype].name,
                              (unsigned long)d->check.byte_size, f->tag, (unsigned long)length,
                              (unsigned long)(vfs.f_bavail * vfs.f_frsize));
    return tb_raise_error(env, TB_WHY_SYSTEM, NULL, "%s: cannot reserve %lu bytes of shared memory: %s", f->tag,
                          (unsigned long)length, tb_shm_strerror(error));
}

void tb_shm_load(void)
{
    tb_shm_owner_reclaim();
}

ERL_NIF_TERM tb_nif_ipc_reclaim(TB_NIF_PARAMS)
{
    return enif_make_int(env, tb_shm_owner_reclaim());
}

/* ---- Making a region ------------------------------------------------- */

/* A new region of length bytes, its pages reserved now (a region only
 * sized with ftruncate on a full tmpfs maps fine and kills the VM with
 * SIGBUS at the first write), under a fresh name of this VM's (into
 * name). NULL with *error, and nothing left in /dev/shm. */
static tb_region *create_region(const region_format *f, size_t length, size_t byte_size, char *name, int *error)
{
    if (!tb_shm_owner_name(f->prefix, name, NAME_MAX + 2, error))
        return NULL;
    struct stat st;
    int fd = tb_shm_open(name, 1, &st, error);
    if (fd < 0)
        return NULL;
    *error = ftruncate(fd, (off_t)length) != 0 ? errno : posix_fallocate(fd, 0, (off_t)length);
    tb_region *r = *error ? NULL : map_region(f, fd, name, length, byte_size, 1, error);
    close(fd);
    if (!r)
        shm_unlink(name);
    return r;
}

/* A new region of the format holding d (the NIF's shape and dtype, read). */
static ERL_NIF_TERM region_zeros(ErlNifEnv *env, const region_format *f, const tb_dense *dense)
{
    const tb_dense d = *dense;
    size_t length = f->header + (size_t)d.check.byte_size;
    length = length ? length : 1; /* an empty region is one byte long */
    char name[NAME_MAX + 2];
    int error = 0;
    tb_shm_ref made = {0};
    tb_region *r;
    if (!f->header) {
        r = create_region(f, length, d.check.byte_size, name, &error);
    } else {
        /* Recorded as being made first: if the VM dies before the tensor
         * exists, its reaper removes the name, which nobody else knows. */
        if (!tb_shm_owner_name(f->prefix, name, sizeof name, &error) ||
            !tb_shm_owner_record(name, TB_SLOT_MADE, &made, &error))
            return tb_raise_error(env, TB_WHY_SYSTEM, NULL,
                                  "%s: cannot record the region in this VM's journal in " TB_SHM_DIR ": %s", f->tag,
                                  tb_shm_strerror(error));
        struct stat st;
        int fd = tb_shm_open(name, 1, &st, &error);
        int opened = fd >= 0; /* else the name is not ours to unlink */
        r = NULL;
        if (opened) {
            error = ftruncate(fd, (off_t)length) != 0 ? errno : posix_fallocate(fd, 0, (off_t)length);
            r = error ? NULL : map_region(f, fd, name, length, d.check.byte_size, 1, &error);
            close(fd);
        }
        /* Nobody else knows the name yet: the creator's reference, as
         * PyTorch sets it when it creates a region
         * (ALLOCATOR_MAPPED_EXCLUSIVE). */
        if (r && !tb_shm_header_init(r->base)) {
            unmap_region(r);
            r = NULL;
            error = EFAULT;
        }
        if (r) {
            r->ref = made;
            tb_shm_owner_hold(&r->ref);
        } else {
            if (opened)
                shm_unlink(name);
            (void)tb_shm_owner_forget(&made);
        }
    }
    if (!r) {
        if (error == EEXIST || error == ELOOP || error == TB_SHM_NOT_REGULAR || error == TB_SHM_NOT_OURS)
            return tb_raise_error(env, TB_WHY_SYSTEM, NULL, "%s: shm_open failed: %s", f->tag, tb_shm_strerror(error));
        return no_room(env, f, &d, length, error);
    }
    return make_tensor(env, r, &d);
}

/* ---- Opening a region ------------------------------------------------ */

/* The name argument as shm_open takes it, in the format f: a PyTorch
 * region is named torch_..., and a name of that form is opened in no other
 * format, so that a handle claiming one format never maps the other (a
 * plain region's first bytes taken as a count, or the reverse). */
static int region_name(ErlNifEnv *env, const region_format *f, ERL_NIF_TERM term, char *name, ERL_NIF_TERM *exc)
{
    ErlNifBinary bin;
    int ok = enif_inspect_binary(env, term, &bin) && tb_shm_name((const char *)bin.data, bin.size, name, NAME_MAX + 2);
    if (f->header) {
        if (ok && tb_shm_torch_format(name))
            return 1;
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "handle",
                               "handle: expected the name of a PyTorch shared-memory region (\"/torch_...\"), "
                               "got %T",
                               term);
        return 0;
    }
    if (!enif_is_binary(env, term))
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "handle",
                               "handle: expected a shared-memory name (a binary), got %T", term);
    else if (!ok)
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "handle",
                               "handle: %T is no shared-memory name (an optional leading slash, then 1 to %d "
                               "bytes with no slash or NUL)",
                               term, TB_SHM_NAME_MAX);
    else if (tb_shm_torch_format(name))
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "handle",
                               "handle: %T names a region of PyTorch's format (a counted header, then the "
                               "data): %C opens it as one, not as plain memory",
                               term, "tensor_blob_ipc:open/3", "TensorBlob.IPC.open/3");
    else
        return 1;
    return 0;
}

/* Reserves the pages of a sparse region, as for a region made here: one
 * only sized with ftruncate (as Python's shared_memory and PyTorch make
 * them) on a full tmpfs maps fine and faults at the first write.
 * KEEP_SIZE: the creator's file keeps its size whatever happens to it
 * meanwhile. A region whose pages are all there (st_blocks) needs nothing:
 * open stays O(1) for the regions tensor_blob and most programs make. */
static int reserve(int fd, const struct stat *st)
{
    int sparse = (uint64_t)st->st_blocks * 512 < (uint64_t)st->st_size;
    if (sparse && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, st->st_size) != 0 && errno != EOPNOTSUPP && errno != ENOSYS)
        return errno;
    return 0;
}

/* The region name (argv[0]) names, opened when it holds d (argv[2] of
 * dtype argv[1]) after f's header: the file (its fstat in *st), or -1 with
 * *exc. */
static int open_region_file(ErlNifEnv *env, const region_format *f, const char *name, const tb_dense *d,
                            const ERL_NIF_TERM argv[], struct stat *st, ERL_NIF_TERM *exc)
{
    int error;
    int fd = tb_shm_open(name, 0, st, &error);
    if (fd < 0) {
        if (error == ENOENT)
            *exc = tb_raise_badarg(env, TB_WHY_NO_REGION, "handle", "handle: no shared memory named %T (%s)", argv[0],
                                   f->gone);
        else
            *exc = tb_raise_badarg(env, TB_WHY_SYSTEM, "handle", "handle: cannot open shared memory %T: %s", argv[0],
                                   tb_shm_strerror(error));
        return -1;
    }
    uint64_t needed = f->header + d->check.byte_size;
    if ((uint64_t)st->st_size >= needed)
        return fd;
    close(fd);
    if (f->header)
        *exc = tb_raise_badarg(env, TB_WHY_OUT_OF_EXTENT, "shape",
                               "shape: %T of %s needs %lu bytes after PyTorch's %d-byte header; the shared "
                               "memory %T holds %ld in all",
                               argv[2], tb_dtypes[d->dtype].name, (unsigned long)d->check.byte_size, (int)f->header,
                               argv[0], (long)st->st_size);
    else
        *exc = tb_raise_badarg(env, TB_WHY_OUT_OF_EXTENT, "shape",
                               "shape: %T of %s needs %lu bytes; the shared memory %T holds %ld", argv[2],
                               tb_dtypes[d->dtype].name, (unsigned long)d->check.byte_size, argv[0], (long)st->st_size);
    return -1;
}

/* The tensor of an empty plain region: no bytes to map. */
static ERL_NIF_TERM empty_region(ErlNifEnv *env, const region_format *f, const tb_dense *d, const ERL_NIF_TERM argv[])
{
    if (d->check.byte_size > 0)
        return tb_raise_badarg(env, TB_WHY_OUT_OF_EXTENT, "shape", "shape: the shared memory %T is empty", argv[0]);
    tb_shim_tensor *h;
    tb_shim_error err;
    if (!tb_shim_zeros(d->layout.ndim, d->layout.shape, tb_dtypes[d->dtype].torch_scalar_type, &h, &err))
        return tb_raise_error(env, TB_WHY_LIBTORCH, NULL, "%s: %s", f->tag, err.message);
    return tb_tensor_return(env, h);
}

/* The region open at fd (its fstat st), its pages reserved, mapped: NULL
 * with *exc. */
static tb_region *map_region_file(ErlNifEnv *env, const region_format *f, const char *name, const tb_dense *d,
                                  const ERL_NIF_TERM argv[], int fd, const struct stat *st, ERL_NIF_TERM *exc)
{
    int error = reserve(fd, st);
    struct statvfs vfs;
    if (error == ENOSPC && statvfs(TB_SHM_DIR, &vfs) == 0) {
        *exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL,
                              "%s: the shared memory %T has %ld bytes, not all of them stored yet, and "
                              "they do not fit in " TB_SHM_DIR " (%lu bytes free); its writes would fail",
                              f->tag, argv[0], (long)st->st_size, (unsigned long)(vfs.f_bavail * vfs.f_frsize));
        return NULL;
    }
    if (error) {
        *exc = tb_raise_error(env, TB_WHY_SYSTEM, NULL, "%s: cannot reserve the %ld bytes of the shared memory %T: %s",
                              f->tag, (long)st->st_size, argv[0], strerror(error));
        return NULL;
    }
    tb_region *r = map_region(f, fd, name, (size_t)st->st_size, d->check.byte_size, 0, &error);
    if (!r)
        *exc = tb_raise_error(env, TB_WHY_SYSTEM, NULL, "%s: cannot map %T: %s", f->tag, argv[0], strerror(error));
    return r;
}

/* One reference of a PyTorch-format header, recorded before it is taken:
 * a VM that dies between the two leaves a reference, and never drops one
 * it did not take. 0 with *exc (nothing held). */
static int take_reference(ErlNifEnv *env, const region_format *f, tb_region *r, const char *name,
                          const ERL_NIF_TERM argv[], ERL_NIF_TERM *exc)
{
    int error;
    if (!tb_shm_owner_record(name, TB_SLOT_FREE, &r->ref, &error)) {
        *exc = tb_raise_error(env, TB_WHY_SYSTEM, NULL,
                              "%s: cannot record the reference in this VM's journal in " TB_SHM_DIR ": %s", f->tag,
                              tb_shm_strerror(error));
        return 0;
    }
    int seen;
    int taken = tb_shm_header_take(r->base, &seen);
    if (taken == 1) {
        tb_shm_owner_hold(&r->ref);
        return 1;
    }
    (void)tb_shm_owner_forget(&r->ref);
    if (taken < 0)
        *exc = tb_raise_error(env, TB_WHY_GONE, NULL,
                              "%s: the shared memory %T vanished under its header (SIGBUS: shrunk by "
                              "another program)",
                              f->tag, argv[0]);
    else
        *exc = tb_raise_badarg(env, TB_WHY_GONE, "handle",
                               "handle: %T holds no live PyTorch region (its reference count is %d)", argv[0], seen);
    return 0;
}

/* Maps the region name (argv[0], read) names as d (argv[2] of dtype
 * argv[1], read). */
static ERL_NIF_TERM region_open(ErlNifEnv *env, const region_format *f, const char *name, const tb_dense *dense,
                                const ERL_NIF_TERM argv[])
{
    const tb_dense d = *dense;
    struct stat st;
    ERL_NIF_TERM exc;
    int fd = open_region_file(env, f, name, &d, argv, &st, &exc);
    if (fd < 0)
        return exc;
    /* An empty plain region is mapped one byte long, and unmapped as long. */
    tb_region *r = st.st_size == 0 ? NULL : map_region_file(env, f, name, &d, argv, fd, &st, &exc);
    close(fd);
    if (st.st_size == 0)
        return empty_region(env, f, &d, argv);
    if (!r)
        return exc;
    if (f->header && !take_reference(env, f, r, name, argv, &exc)) {
        unmap_region(r);
        return exc;
    }
    return make_tensor(env, r, &d);
}

/* Each NIF reads its arguments once, then runs where its writes belong
 * (making a region, or reserving the pages of a sparse one, writes them:
 * dirty when large; rescheduled, it reads them again there). */
static ERL_NIF_TERM zeros_nif(ErlNifEnv *env, const region_format *f, const char *what, tb_nif_fun *self, int argc,
                              const ERL_NIF_TERM argv[])
{
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_get_dense(env, argv[0], argv[1], &d, &exc))
        return exc;
    if (tb_reschedule_copy(env, what, d.check.byte_size, 0, self, argc, argv, &exc))
        return exc;
    return region_zeros(env, f, &d);
}

static ERL_NIF_TERM open_nif(ErlNifEnv *env, const region_format *f, const char *what, tb_nif_fun *self, int argc,
                             const ERL_NIF_TERM argv[])
{
    char name[NAME_MAX + 2];
    tb_dense d;
    ERL_NIF_TERM exc;
    if (!region_name(env, f, argv[0], name, &exc) || !tb_tensor_get_dense(env, argv[2], argv[1], &d, &exc))
        return exc;
    if (tb_reschedule_copy(env, what, d.check.byte_size, 0, self, argc, argv, &exc))
        return exc;
    return region_open(env, f, name, &d, argv);
}

ERL_NIF_TERM tb_nif_ipc_zeros(TB_NIF_PARAMS)
{
    return zeros_nif(env, &posix_format, "ipc_zeros", tb_nif_ipc_zeros, argc, argv);
}

ERL_NIF_TERM tb_nif_torch_shm_zeros(TB_NIF_PARAMS)
{
    return zeros_nif(env, &torch_format, "torch_shm_zeros", tb_nif_torch_shm_zeros, argc, argv);
}

ERL_NIF_TERM tb_nif_ipc_open(TB_NIF_PARAMS)
{
    return open_nif(env, &posix_format, "ipc_open", tb_nif_ipc_open, argc, argv);
}

ERL_NIF_TERM tb_nif_torch_shm_open(TB_NIF_PARAMS)
{
    return open_nif(env, &torch_format, "torch_shm_open", tb_nif_torch_shm_open, argc, argv);
}

/* ---- Names ----------------------------------------------------------- */

/* {Name, ByteSize} of a tensor that is a whole region of the format:
 * only the whole data, row-major from its start, is what an opener maps. */
static ERL_NIF_TERM region_name_of(ErlNifEnv *env, const region_format *f, ERL_NIF_TERM term)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, term, "tensor", &d, &exc))
        return exc;
    if (tb_storage_kind(&d.info) != f->kind)
        return tb_atoms.nil;
    const tb_region *r = (const tb_region *)tb_storage_of(&d.info);
    if (d.info.data != data_of(r) || !d.info.is_contiguous || d.dense_bytes != r->byte_size)
        return tb_atoms.nil;
    /* Whoever maps the name next reads its pages with no guard of ours (a
     * backend handed it): a file another program shrank is refused here,
     * as the library's own copies of it raise. */
    struct stat st;
    int error;
    int fd = tb_shm_open(r->name, 0, &st, &error);
    if (fd >= 0) {
        close(fd);
        uint64_t needed = r->format->header + r->byte_size;
        if ((uint64_t)st.st_ino == r->header.file_ino && (uint64_t)st.st_size < needed)
            return tb_raise_error(env, TB_WHY_GONE, "tensor",
                                  "tensor: its memory vanished under the mapping (the shared memory %s was shrunk "
                                  "to %ld bytes by another program, and its data needs %lu); nothing else can map "
                                  "it now",
                                  r->name, (long)st.st_size, (unsigned long)needed);
    }
    return enif_make_tuple2(env, tb_make_string(env, r->name), enif_make_uint64(env, r->byte_size));
}

ERL_NIF_TERM tb_nif_ipc_name(TB_NIF_PARAMS)
{
    return region_name_of(env, &posix_format, argv[0]);
}

ERL_NIF_TERM tb_nif_torch_shm_name(TB_NIF_PARAMS)
{
    return region_name_of(env, &torch_format, argv[0]);
}
