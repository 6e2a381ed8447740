/* Another node on this host: a tensor of a file this node mapped
 * (safetensors_open) is sent as where its bytes lie in which version of
 * the file (file_source), and the other node maps those pages of that file
 * itself (file_view): the page cache's pages, which the sender's mapping
 * shows too. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_file_map.h"
#include "tb_file_terms.h"
#include "tb_nifs.h"
#include "tb_proc_maps.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "torch_shim.h"

/* (Tensor) -> {Path, {Dev, Ino, Size, MtimeSec, MtimeNsec}, Offset, Strides}
 * when another process may map the tensor's bytes from the file itself,
 * else why not: not_file (not a file's tensor of this build, or its name
 * is not known), written (a page under it was written here: a private
 * copy the file lacks), changed (the name holds another file now). */
ERL_NIF_TERM tb_nif_file_source(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc))
        return exc;
    const tb_file_map *m = tb_file_map_of(tb_storage_of(&d.info));
    if (!m || d.info.device_type != TB_DEVICE_CPU)
        return tb_atoms.not_file;
    tb_range span;
    if (!m->path || !tb_storage_span(&d.info, tb_dtypes[d.dtype].element_size, &span) ||
        !tb_extent_inside(span.lo, span.hi - span.lo, m->mapping.lo, m->mapping.hi - m->mapping.lo))
        return tb_atoms.not_file;
    if (!tb_proc_maps_file_pages_only(span.lo, span.hi))
        return tb_atoms.written;
    struct stat st;
    tb_file_identity now;
    if (stat(m->path, &st) != 0 || (now = tb_file_identity_of(&st), !tb_file_same_identity(&now, &m->id)))
        return tb_atoms.changed;
    ERL_NIF_TERM id[5] = {enif_make_uint64(env, m->id.dev), enif_make_uint64(env, m->id.ino),
                          enif_make_uint64(env, m->id.size), enif_make_int64(env, m->id.mtime_sec),
                          enif_make_int64(env, m->id.mtime_nsec)};
    return enif_make_tuple4(env, tb_make_string(env, m->path), enif_make_tuple_from_array(env, id, 5),
                            enif_make_uint64(env, m->file_at + (span.lo - m->mapping.lo)),
                            tb_make_strides(env, d.info.ndim, d.info.strides));
}

static int get_identity(ErlNifEnv *env, ERL_NIF_TERM term, tb_file_identity *id)
{
    const ERL_NIF_TERM *f;
    int arity;
    ErlNifUInt64 dev, ino, size;
    ErlNifSInt64 sec, nsec;
    if (!enif_get_tuple(env, term, &arity, &f) || arity != 5 || !enif_get_uint64(env, f[0], &dev) ||
        !enif_get_uint64(env, f[1], &ino) || !enif_get_uint64(env, f[2], &size) || !enif_get_int64(env, f[3], &sec) ||
        !enif_get_int64(env, f[4], &nsec))
        return 0;
    *id = (tb_file_identity){dev, ino, size, sec, nsec};
    return 1;
}

/* file_view's Dtype, Shape and Strides (argv[3..5]), checked as a layout
 * at offset in a file of file_size bytes: *byte_size, the bytes it spans. */
static int get_view_layout(ErlNifEnv *env, const ERL_NIF_TERM argv[], uint64_t offset, uint64_t file_size,
                           uint64_t page, tb_layout *l, tb_dtype_id *dtype, uint64_t *byte_size, ERL_NIF_TERM *exc)
{
    if (!tb_get_dtype(env, argv[3], "dtype", dtype, exc) ||
        !tb_get_shape(env, argv[4], "shape", &l->ndim, l->shape, exc) ||
        !tb_get_strides(env, argv[5], "strides", l->ndim, l->strides, exc))
        return 0;
    l->element_size = tb_dtypes[*dtype].element_size;
    /* The layout with a stand-in address of the offset's alignment. */
    l->ptr = page + offset % page;
    tb_layout_result r = tb_layout_check(l);
    if (r.status != TB_LAYOUT_OK) {
        *exc = tb_raise_layout(env, "packed", l, r, tb_dtypes[*dtype].name, "");
        return 0;
    }
    if (r.numel == 0 || !tb_extent_inside(offset, r.byte_size, 0, file_size)) {
        *exc = tb_raise_badarg(env, TB_WHY_OUT_OF_EXTENT, "packed",
                               "packed: %lu bytes at offset %T do not lie inside the %lu bytes of %T",
                               (unsigned long)r.byte_size, argv[2], (unsigned long)file_size, argv[0]);
        return 0;
    }
    *byte_size = r.byte_size;
    return 1;
}

/* The file named path (argv[0]) opened, when it is still the version
 * want names: the file, or -1 with *exc. */
static int open_same_file(ErlNifEnv *env, ERL_NIF_TERM path_term, const char *path, const tb_file_identity *want,
                          struct stat *st, ERL_NIF_TERM *exc)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        *exc = tb_raise_error(env, TB_WHY_GONE, "packed",
                              "packed: the file %T that the sending node mapped cannot be opened here: %s", path_term,
                              strerror(e));
        return -1;
    }
    tb_file_identity now;
    if (fstat(fd, st) != 0 || (now = tb_file_identity_of(st), !tb_file_same_identity(&now, want))) {
        close(fd);
        *exc = tb_raise_error(env, TB_WHY_GONE, "packed",
                              "packed: the file %T was replaced or changed since the sending node opened it (or this "
                              "node sees another file under that name): its bytes may differ from the sender's "
                              "tensor. Pack it again from a tensor of the file as it is now, or with %C",
                              path_term, "#{via => binary}", "via: :binary");
        return -1;
    }
    return fd;
}

/* The tensor of layout l and dtype at byte offset in m (length bytes at
 * data). */
static ERL_NIF_TERM view_of_map(ErlNifEnv *env, ERL_NIF_TERM path_term, tb_file_map *m, void *data, size_t length,
                                uint64_t offset, const tb_layout *l, tb_dtype_id dtype)
{
    tb_shim_out base, o;
    if (!tb_file_map_bytes(m, data, length, &base.handle, &base.err))
        return tb_raise_error(env, TB_WHY_LIBTORCH, "packed", "packed: %T: %s", path_term, base.err.message);
    int ok = tb_shim_alias(base.handle, offset, l->ndim, l->shape, l->strides, tb_dtypes[dtype].torch_scalar_type,
                           &o.handle, &o.err);
    tb_shim_release(base.handle);
    if (!ok)
        return tb_raise_error(env, TB_WHY_LIBTORCH, "packed", "packed: %T: %s", path_term, o.err.message);
    return tb_tensor_return(env, o.handle);
}

/* (Path, Identity, Offset, Dtype, Shape, Strides) -> a tensor over a new
 * private mapping of the pages that hold it, from the file the sender
 * mapped, when the name still holds that version of it. */
ERL_NIF_TERM tb_nif_file_view(TB_NIF_PARAMS)
{
    char path[PATH_MAX];
    ERL_NIF_TERM exc;
    tb_file_identity want;
    ErlNifUInt64 offset;
    if (!tb_file_get_path(env, argv[0], path, &exc))
        return exc;
    if (!get_identity(env, argv[1], &want) || !enif_get_uint64(env, argv[2], &offset))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "packed",
                               "packed: %T and %T are not a file's identity and an offset in it", argv[1], argv[2]);
    tb_layout l;
    tb_dtype_id dtype;
    uint64_t byte_size;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    if (!get_view_layout(env, argv, offset, want.size, page, &l, &dtype, &byte_size, &exc))
        return exc;
    struct stat st;
    int fd = open_same_file(env, argv[0], path, &want, &st, &exc);
    if (fd < 0)
        return exc;
    uint64_t at = offset / page * page;
    size_t length = (size_t)(offset + byte_size - at);
    void *data = NULL;
    int error;
    tb_file_map *m = tb_file_map_open(fd, &st, path, at, length, &data, &error);
    close(fd);
    if (!m)
        return tb_raise_error(env, TB_WHY_SYSTEM, "packed", "packed: %T: cannot map it: %s", argv[0], strerror(error));
    return view_of_map(env, argv[0], m, data, length, offset - at, &l, dtype);
}
