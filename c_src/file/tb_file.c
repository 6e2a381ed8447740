/* Files of tensors: the safetensors format, both ways.
 *
 * safetensors_open maps a file privately (its pages copied on write: the
 * file is never written through a mapping) and makes one tensor per entry
 * over the mapping, each holding the mapping's one libtorch storage: the
 * mapping lives until the last tensor, view, DLPack export or binary over
 * it is gone. The header is read with pread into memory of our own, then
 * decoded (tb_safetensors.h): a file changed under us changes nothing the
 * decoder reads. No tensor byte is read, except an entry whose offset does
 * not fit its element size, which is copied once (under the SIGBUS guard):
 * no misaligned pointer is handed out.
 *
 * safetensors_write writes tensors, one after another, into a temporary
 * file beside the target, then renames it over the target: a reader's
 * mapping of the old file stays valid. One tensor at most is held in
 * memory of our own (a strided or device one, copied to host bytes). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_fault.h"
#include "tb_nifs.h"
#include "tb_proc_maps.h"
#include "tb_safetensors.h"
#include "tb_safetensors_decode.h"
#include "tb_safetensors_encode.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "torch_shim.h"

/* Which version of a file was mapped: another node on this host maps the
 * same one, or refuses (file_view). */
typedef struct {
    uint64_t dev, ino, size;
    int64_t mtime_sec, mtime_nsec;
} file_identity;

static file_identity identity_of(const struct stat *st)
{
    return (file_identity){(uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
                           (int64_t)st->st_mtim.tv_sec, (int64_t)st->st_mtim.tv_nsec};
}

static int same_identity(const file_identity *a, const file_identity *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_sec == b->mtime_sec &&
           a->mtime_nsec == b->mtime_nsec;
}

/* One private mapping of a file: the storage of every tensor over it. */
typedef struct {
    tb_storage header; /* TB_MEMORY_FILE */
    tb_range mapping;  /* registered while mapped */
    uint64_t file_at;  /* the file offset the mapping starts at */
    file_identity id;  /* the file, as it was when mapped */
    char *path;        /* its absolute name then, or NULL */
} tb_file_map;

static void release_map(tb_storage *s)
{
    tb_file_map *m = (tb_file_map *)s;
    tb_storage_unmap_file(&m->mapping);
    free(m->path);
    free(m);
}

/* Maps length bytes of fd from at (page-aligned) privately, as a storage
 * that remembers which file it is; NULL with *error (an errno). */
static tb_file_map *map_file(int fd, const struct stat *st, const char *path, uint64_t at, size_t length, void **data,
                             int *error)
{
    tb_file_map *m = calloc(1, sizeof *m);
    if (!m) {
        *error = ENOMEM;
        return NULL;
    }
    tb_storage_init(&m->header, TB_MEMORY_FILE, 0, release_map);
    *data = tb_storage_map_private(&m->header, fd, at, length, &m->mapping, error);
    if (!*data) {
        free(m);
        return NULL;
    }
    m->file_at = at;
    m->id = identity_of(st);
    m->path = realpath(path, NULL); /* none: the tensors are copied to other nodes */
    return m;
}

/* A path argument as a C string: a binary without NUL bytes. */
static int get_path(ErlNifEnv *env, ERL_NIF_TERM term, char *path, ERL_NIF_TERM *exc)
{
    ErlNifBinary bin;
    if (!enif_inspect_binary(env, term, &bin) || bin.size == 0 || bin.size >= PATH_MAX ||
        memchr(bin.data, 0, bin.size)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "path",
                               "path: %T is not a file name (a non-empty name without NUL bytes)", term);
        return 0;
    }
    memcpy(path, bin.data, bin.size);
    path[bin.size] = 0;
    return 1;
}

static int read_all(int fd, void *buf, size_t len, off_t at)
{
    char *p = buf;
    while (len) {
        ssize_t n = pread(fd, p, len, at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        p += n;
        len -= (size_t)n;
        at += n;
    }
    return 1;
}

static const char *kind_of(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

/* Opens a regular file for reading, following links: what the name names
 * is checked before it is opened (opening a device or a FIFO can block or
 * act), and the file opened without blocking is checked to be that one. */
static int open_regular(ErlNifEnv *env, ERL_NIF_TERM path_term, const char *path, struct stat *st, ERL_NIF_TERM *exc)
{
    struct stat named;
    if (stat(path, &named) != 0) {
        int e = errno;
        *exc = tb_raise_badarg(env, e == ENOENT ? TB_WHY_MISSING : TB_WHY_SYSTEM, "path", "path: %T: %s", path_term,
                               strerror(e));
        return -1;
    }
    if (!S_ISREG(named.st_mode)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_FILE, "path", "path: %T is %s, not a safetensors file", path_term,
                               kind_of(named.st_mode));
        return -1;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        *exc = tb_raise_badarg(env, TB_WHY_SYSTEM, "path", "path: %T: %s", path_term, strerror(e));
        return -1;
    }
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        *exc = tb_raise_badarg(env, TB_WHY_BAD_FILE, "path", "path: %T changed while it was opened (%s)", path_term,
                               "not a regular file any more");
        return -1;
    }
    return fd;
}

/* The names asked for (a sorted array of binaries), or all. */
typedef struct {
    ErlNifBinary *names;
    unsigned count;
    int all;
} selection;

static int cmp_bin(const void *a, const void *b)
{
    const ErlNifBinary *x = a, *y = b;
    size_t n = x->size < y->size ? x->size : y->size;
    int c = memcmp(x->data, y->data, n);
    return c ? c : (x->size > y->size) - (x->size < y->size);
}

static int get_selection(ErlNifEnv *env, ERL_NIF_TERM term, selection *sel, ERL_NIF_TERM *exc)
{
    sel->names = NULL;
    sel->count = 0;
    sel->all = term == tb_atoms.all;
    if (sel->all)
        return 1;
    ERL_NIF_TERM head, tail = term;
    if (!enif_get_list_length(env, term, &sel->count))
        goto bad;
    sel->names = malloc((sel->count ? sel->count : 1) * sizeof *sel->names);
    if (!sel->names) {
        *exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "safetensors: out of memory reading the names asked for");
        return 0;
    }
    for (unsigned i = 0; enif_get_list_cell(env, tail, &head, &tail); i++)
        if (!enif_inspect_binary(env, head, &sel->names[i]))
            goto bad;
    qsort(sel->names, sel->count, sizeof *sel->names, cmp_bin);
    return 1;
bad:
    free(sel->names);
    sel->names = NULL;
    *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "only", "only: %T is not a list of tensor names (binaries)", term);
    return 0;
}

static int selected(const selection *sel, const tb_safetensors_string *name)
{
    if (sel->all)
        return 1;
    ErlNifBinary key = {.size = name->len, .data = (unsigned char *)name->ptr};
    return bsearch(&key, sel->names, sel->count, sizeof *sel->names, cmp_bin) != NULL;
}

static ERL_NIF_TERM make_string(ErlNifEnv *env, const tb_safetensors_string *s)
{
    ERL_NIF_TERM t;
    unsigned char *p = enif_make_new_binary(env, s->len, &t);
    if (s->len)
        memcpy(p, s->ptr, s->len);
    return t;
}

/* The header's refusal, naming the file and the tensor. */
static ERL_NIF_TERM header_error(ErlNifEnv *env, ERL_NIF_TERM path_term, const tb_safetensors_header *h)
{
    tb_reason why = h->error == TB_ST_NO_MEMORY       ? TB_WHY_NO_MEMORY
                    : h->error == TB_ST_UNKNOWN_DTYPE ? TB_WHY_BAD_DTYPE
                    : h->error == TB_ST_TOO_MANY_DIMS ? TB_WHY_UNSUPPORTED
                                                      : TB_WHY_BAD_FILE;
    const char *text = tb_safetensors_error_text(h->error);
    if (h->error == TB_ST_UNKNOWN_DTYPE)
        return tb_raise_badarg(env, why, "path",
                               "path: %T: tensor %T: dtype %T is not one the format and this "
                               "library share (tables/0's safetensors names)",
                               path_term, make_string(env, &h->name), make_string(env, &h->detail));
    if (h->name.ptr)
        return tb_raise_badarg(env, why, "path", "path: %T is not a valid safetensors file: tensor %T: %s", path_term,
                               make_string(env, &h->name), text);
    if (h->error == TB_ST_BAD_JSON || h->error == TB_ST_TOO_DEEP)
        return tb_raise_badarg(env, why, "path", "path: %T is not a valid safetensors file: %s (at byte %lu of it)",
                               path_term, text, (unsigned long)h->at);
    return tb_raise_badarg(env, why, "path", "path: %T is not a valid safetensors file: %s", path_term, text);
}

/* The tensor of entry e over the mapping (base: a byte tensor of the whole
 * file): an alias of its storage, or, where its offset does not fit its
 * element size, a copy (*copied set). */
static int entry_tensor(ErlNifEnv *env, ERL_NIF_TERM path_term, tb_shim_tensor *base, const char *file,
                        uint64_t data_at, const tb_safetensors_entry *e, ERL_NIF_TERM *out, int *copied,
                        ERL_NIF_TERM *exc)
{
    const tb_dtype *dt = &tb_dtypes[e->dtype];
    int64_t strides[TB_MAX_DIMS];
    int64_t step = 1;
    for (int d = e->ndim - 1; d >= 0; d--) {
        strides[d] = step;
        step *= e->shape[d] ? e->shape[d] : 1;
    }
    uint64_t at = data_at + e->begin;
    uint64_t bytes = e->end - e->begin;
    tb_shim_out o;
    *copied = 0;
    int ok;
    if (bytes == 0 || at % dt->element_size == 0) {
        ok = tb_shim_alias(base, bytes ? at : 0, e->ndim, e->shape, strides, dt->torch_scalar_type, &o.handle, &o.err);
    } else {
        *copied = 1;
        ok = tb_shim_zeros(e->ndim, e->shape, dt->torch_scalar_type, &o.handle, &o.err);
        if (ok) {
            tb_shim_info info;
            tb_shim_info_of(o.handle, &info);
            int64_t n = (int64_t)bytes, one = 1;
            if (!tb_fault_copy_strided((void *)(file + at), 1, &n, &one, 1, info.data, 1)) {
                tb_shim_release(o.handle);
                *exc = tb_raise_error(env, TB_WHY_GONE, "path",
                                      "path: %T: tensor %T: the file shrank under the copy of its bytes (SIGBUS)",
                                      path_term, make_string(env, &e->name));
                return 0;
            }
        }
    }
    if (!ok) {
        *exc = tb_raise_error(env, TB_WHY_LIBTORCH, "path", "path: %T: tensor %T: %s", path_term,
                              make_string(env, &e->name), o.err.message);
        return 0;
    }
    return tb_tensor_make(env, o.handle, out, exc);
}

/* (Path, all | [Name]) -> {[{Name, Tensor}], [{Key, Value}] | nil, [Name copied]} */
ERL_NIF_TERM tb_nif_safetensors_open(TB_NIF_PARAMS)
{
    char path[PATH_MAX];
    ERL_NIF_TERM exc;
    selection sel;
    if (!get_path(env, argv[0], path, &exc) || !get_selection(env, argv[1], &sel, &exc))
        return exc;
    struct stat st;
    int fd = open_regular(env, argv[0], path, &st, &exc);
    if (fd < 0) {
        free(sel.names);
        return exc;
    }
    unsigned char prefix[8];
    uint64_t header_len = 0;
    tb_safetensors_error pe = (uint64_t)st.st_size < 8 ? TB_ST_TOO_SMALL
                              : read_all(fd, prefix, 8, 0)
                                  ? tb_safetensors_prefix(prefix, (uint64_t)st.st_size, &header_len)
                                  : TB_ST_TOO_SMALL;
    tb_safetensors_header h;
    memset(&h, 0, sizeof h);
    char *json = NULL;
    if (pe != TB_ST_OK) {
        h.error = pe;
    } else if (!(json = malloc(header_len ? header_len : 1))) {
        h.error = TB_ST_NO_MEMORY;
    } else if (!read_all(fd, json, header_len, 8)) {
        h.error = TB_ST_HEADER_PAST_END; /* shrunk since fstat */
    } else {
        tb_safetensors_decode(json, header_len, (uint64_t)st.st_size - 8 - header_len, &h);
    }
    free(json);
    if (h.error != TB_ST_OK) {
        close(fd);
        free(sel.names);
        exc = header_error(env, argv[0], &h);
        tb_safetensors_free(&h);
        return exc;
    }
    /* Every name asked for is in the file, and every dtype asked for is
     * one the linked libtorch has. */
    unsigned found = 0;
    for (size_t i = 0; i < h.count; i++) {
        const tb_safetensors_entry *e = &h.entries[i];
        if (!selected(&sel, &e->name))
            continue;
        found++;
        if (!tb_shim_has_scalar_type(tb_dtypes[e->dtype].torch_scalar_type)) {
            close(fd);
            free(sel.names);
            exc = tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "path",
                                  "path: %T: tensor %T: dtype %s is not in the linked libtorch (%s); leave it out "
                                  "with %C",
                                  argv[0], make_string(env, &e->name), tb_dtypes[e->dtype].name,
                                  tb_shim_torch_version(), "#{only => Names}", "only: names");
            tb_safetensors_free(&h);
            return exc;
        }
    }
    if (!sel.all && found != sel.count) {
        const ErlNifBinary *missing = NULL;
        for (unsigned i = 0; i < sel.count && !missing; i++) {
            int here = 0;
            for (size_t j = 0; j < h.count && !here; j++)
                here = h.entries[j].name.len == sel.names[i].size &&
                       memcmp(h.entries[j].name.ptr, sel.names[i].data, sel.names[i].size) == 0;
            if (!here)
                missing = &sel.names[i];
        }
        ERL_NIF_TERM name = argv[1];
        if (missing) {
            tb_safetensors_string s = {(const char *)missing->data, missing->size};
            name = make_string(env, &s);
        }
        close(fd);
        free(sel.names);
        tb_safetensors_free(&h);
        return tb_raise_badarg(env, TB_WHY_MISSING, "only", "only: %T asks for tensor %T, which %T does not hold",
                               argv[1], name, argv[0]);
    }

    int error;
    void *file = NULL;
    tb_file_map *m = map_file(fd, &st, path, 0, (size_t)st.st_size, &file, &error);
    close(fd);
    if (!m) {
        free(sel.names);
        tb_safetensors_free(&h);
        return tb_raise_error(env, TB_WHY_SYSTEM, "path", "path: %T: cannot map it: %s", argv[0], strerror(error));
    }
    /* One storage for the whole file: every tensor aliases it. */
    int64_t size = (int64_t)st.st_size, one = 1;
    tb_shim_out base;
    if (!tb_shim_from_blob(file, 1, &size, &one, tb_dtypes[TB_DT_UINT8].torch_scalar_type, TB_DEVICE_CPU, 0, &m->header,
                           tb_storage_release, &base.handle, &base.err)) {
        free(sel.names);
        tb_safetensors_free(&h);
        return tb_raise_error(env, TB_WHY_LIBTORCH, "path", "path: %T: %s", argv[0], base.err.message);
    }
    ERL_NIF_TERM tensors = enif_make_list(env, 0), copied = enif_make_list(env, 0);
    uint64_t data_start = 8 + header_len; /* after the length and the header */
    for (size_t i = h.count; i-- > 0;) {
        const tb_safetensors_entry *e = &h.entries[i];
        if (!selected(&sel, &e->name))
            continue;
        ERL_NIF_TERM t;
        int was_copied;
        if (!entry_tensor(env, argv[0], base.handle, file, data_start, e, &t, &was_copied, &exc)) {
            tb_shim_release(base.handle);
            free(sel.names);
            tb_safetensors_free(&h);
            return exc;
        }
        ERL_NIF_TERM name = make_string(env, &e->name);
        tensors = enif_make_list_cell(env, enif_make_tuple2(env, name, t), tensors);
        if (was_copied)
            copied = enif_make_list_cell(env, name, copied);
    }
    tb_shim_release(base.handle);
    free(sel.names);
    ERL_NIF_TERM meta = tb_atoms.nil;
    if (h.has_meta) {
        meta = enif_make_list(env, 0);
        for (size_t i = h.meta_count; i-- > 0;)
            meta = enif_make_list_cell(
                env, enif_make_tuple2(env, make_string(env, &h.meta[i].key), make_string(env, &h.meta[i].value)), meta);
    }
    tb_safetensors_free(&h);
    return enif_make_tuple3(env, tensors, meta, copied);
}

/* ---- Another node on this host: the same file, mapped there ---------- */

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
    const tb_storage *s = tb_storage_of(&d.info);
    /* Only a container this build made has the fields below (a hot
     * upgrade keeps an older build's tensors). */
    if (!s || s->kind != TB_MEMORY_FILE || s->free != release_map || d.info.device_type != TB_DEVICE_CPU)
        return tb_atoms.not_file;
    const tb_file_map *m = (const tb_file_map *)s;
    tb_range span;
    if (!m->path || !tb_storage_span(&d.info, tb_dtypes[d.dtype].element_size, &span) ||
        !tb_extent_inside(span.lo, span.hi - span.lo, m->mapping.lo, m->mapping.hi - m->mapping.lo))
        return tb_atoms.not_file;
    if (!tb_proc_maps_file_pages_only(span.lo, span.hi))
        return tb_atoms.written;
    struct stat st;
    file_identity now;
    if (stat(m->path, &st) != 0 || (now = identity_of(&st), !same_identity(&now, &m->id)))
        return tb_atoms.changed;
    ERL_NIF_TERM id[5] = {enif_make_uint64(env, m->id.dev), enif_make_uint64(env, m->id.ino),
                          enif_make_uint64(env, m->id.size), enif_make_int64(env, m->id.mtime_sec),
                          enif_make_int64(env, m->id.mtime_nsec)};
    return enif_make_tuple4(env, tb_make_string(env, m->path), enif_make_tuple_from_array(env, id, 5),
                            enif_make_uint64(env, m->file_at + (span.lo - m->mapping.lo)),
                            tb_make_strides(env, d.info.ndim, d.info.strides));
}

static int get_identity(ErlNifEnv *env, ERL_NIF_TERM term, file_identity *id)
{
    const ERL_NIF_TERM *f;
    int arity;
    ErlNifUInt64 dev, ino, size;
    ErlNifSInt64 sec, nsec;
    if (!enif_get_tuple(env, term, &arity, &f) || arity != 5 || !enif_get_uint64(env, f[0], &dev) ||
        !enif_get_uint64(env, f[1], &ino) || !enif_get_uint64(env, f[2], &size) || !enif_get_int64(env, f[3], &sec) ||
        !enif_get_int64(env, f[4], &nsec))
        return 0;
    *id = (file_identity){dev, ino, size, sec, nsec};
    return 1;
}

/* (Path, Identity, Offset, Dtype, Shape, Strides) -> a tensor over a new
 * private mapping of the pages that hold it, from the file the sender
 * mapped, when the name still holds that version of it: the page cache's
 * pages, which the sender's mapping shows too. */
ERL_NIF_TERM tb_nif_file_view(TB_NIF_PARAMS)
{
    char path[PATH_MAX];
    ERL_NIF_TERM exc;
    file_identity want;
    ErlNifUInt64 offset;
    tb_layout l;
    tb_dtype_id dtype;
    if (!get_path(env, argv[0], path, &exc))
        return exc;
    if (!get_identity(env, argv[1], &want) || !enif_get_uint64(env, argv[2], &offset))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "packed",
                               "packed: %T and %T are not a file's identity and an offset in it", argv[1], argv[2]);
    if (!tb_get_dtype(env, argv[3], "dtype", &dtype, &exc) ||
        !tb_get_shape(env, argv[4], "shape", &l.ndim, l.shape, &exc) ||
        !tb_get_strides(env, argv[5], "strides", l.ndim, l.strides, &exc))
        return exc;
    l.element_size = tb_dtypes[dtype].element_size;
    long page = sysconf(_SC_PAGESIZE);
    /* The layout with a stand-in address of the offset's alignment. */
    l.ptr = (uint64_t)page + offset % (uint64_t)page;
    tb_layout_result r = tb_layout_check(&l);
    if (r.status != TB_LAYOUT_OK)
        return tb_raise_layout(env, "packed", &l, r, tb_dtypes[dtype].name, "");
    if (r.numel == 0 || !tb_extent_inside(offset, r.byte_size, 0, want.size))
        return tb_raise_badarg(env, TB_WHY_OUT_OF_EXTENT, "packed",
                               "packed: %lu bytes at offset %T do not lie inside the %lu bytes of %T",
                               (unsigned long)r.byte_size, argv[2], (unsigned long)want.size, argv[0]);
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        return tb_raise_error(env, TB_WHY_GONE, "packed",
                              "packed: the file %T that the sending node mapped cannot be opened here: %s", argv[0],
                              strerror(e));
    }
    file_identity now;
    if (fstat(fd, &st) != 0 || (now = identity_of(&st), !same_identity(&now, &want))) {
        close(fd);
        return tb_raise_error(env, TB_WHY_GONE, "packed",
                              "packed: the file %T was replaced or changed since the sending node opened it (or this "
                              "node sees another file under that name): its bytes may differ from the sender's "
                              "tensor. Pack it again from a tensor of the file as it is now, or with %C",
                              argv[0], "#{via => binary}", "via: :binary");
    }
    uint64_t at = offset / (uint64_t)page * (uint64_t)page;
    size_t length = (size_t)(offset + r.byte_size - at);
    void *data = NULL;
    int error;
    tb_file_map *m = map_file(fd, &st, path, at, length, &data, &error);
    close(fd);
    if (!m)
        return tb_raise_error(env, TB_WHY_SYSTEM, "packed", "packed: %T: cannot map it: %s", argv[0], strerror(error));
    int64_t size = (int64_t)length, one = 1;
    tb_shim_out base, o;
    if (!tb_shim_from_blob(data, 1, &size, &one, tb_dtypes[TB_DT_UINT8].torch_scalar_type, TB_DEVICE_CPU, 0, &m->header,
                           tb_storage_release, &base.handle, &base.err))
        return tb_raise_error(env, TB_WHY_LIBTORCH, "packed", "packed: %T: %s", argv[0], base.err.message);
    int ok = tb_shim_alias(base.handle, offset - at, l.ndim, l.shape, l.strides, tb_dtypes[dtype].torch_scalar_type,
                           &o.handle, &o.err);
    tb_shim_release(base.handle);
    if (!ok)
        return tb_raise_error(env, TB_WHY_LIBTORCH, "packed", "packed: %T: %s", argv[0], o.err.message);
    return tb_tensor_return(env, o.handle);
}

/* ---- Writing ------------------------------------------------------------ */

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        p += n;
        len -= (size_t)n;
    }
    return 1;
}

/* The bytes of one tensor, row-major, appended to fd. Contiguous host
 * memory is written as it is: write(2) reads it in the kernel, where a
 * page that vanished is an error (EFAULT), not a signal. Anything else is
 * copied to host bytes first (under the SIGBUS guard for host memory). */
static int write_tensor(int fd, const tb_tensor_desc *d, char *why, size_t why_len)
{
    if (d->dense_bytes == 0)
        return 1;
    if (d->info.device_type == TB_DEVICE_CPU && d->info.is_contiguous) {
        if (write_all(fd, d->info.data, d->dense_bytes))
            return 1;
        snprintf(why, why_len, "%s", strerror(errno));
        return 0;
    }
    void *bytes = malloc(d->dense_bytes);
    if (!bytes) {
        snprintf(why, why_len, "out of memory for a copy of %llu bytes", (unsigned long long)d->dense_bytes);
        return 0;
    }
    tb_shim_error err;
    int ok = tb_shim_to_bytes(d->tensor->handle, bytes, &err);
    if (!ok)
        snprintf(why, why_len, "%s", err.message);
    else if (!(ok = write_all(fd, bytes, d->dense_bytes)))
        snprintf(why, why_len, "%s", strerror(errno));
    free(bytes);
    return ok;
}

/* Reads [{Key, Value}] of binaries, each UTF-8. */
static int get_meta(ErlNifEnv *env, ERL_NIF_TERM term, tb_safetensors_meta **out, unsigned *count, ERL_NIF_TERM *exc)
{
    *out = NULL;
    if (!enif_get_list_length(env, term, count))
        goto bad;
    *out = malloc((*count ? *count : 1) * sizeof **out);
    if (!*out) {
        *exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "safetensors: out of memory reading the metadata");
        return 0;
    }
    ERL_NIF_TERM head, tail = term;
    for (unsigned i = 0; enif_get_list_cell(env, tail, &head, &tail); i++) {
        const ERL_NIF_TERM *kv;
        int arity;
        ErlNifBinary k, v;
        if (!enif_get_tuple(env, head, &arity, &kv) || arity != 2 || !enif_inspect_binary(env, kv[0], &k) ||
            !enif_inspect_binary(env, kv[1], &v) || !tb_safetensors_valid_utf8((const char *)k.data, k.size) ||
            !tb_safetensors_valid_utf8((const char *)v.data, v.size))
            goto bad;
        (*out)[i] = (tb_safetensors_meta){{(const char *)k.data, k.size}, {(const char *)v.data, v.size}};
    }
    return 1;
bad:
    free(*out);
    *out = NULL;
    *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "metadata",
                           "metadata: %T is not a map of UTF-8 strings to UTF-8 strings", term);
    return 0;
}

/* (Path, [{Name, Tensor}], [{Key, Value}] | nil) -> ok. In file order. */
ERL_NIF_TERM tb_nif_safetensors_write(TB_NIF_PARAMS)
{
    char path[PATH_MAX];
    ERL_NIF_TERM exc;
    unsigned count;
    if (!get_path(env, argv[0], path, &exc))
        return exc;
    if (!enif_get_list_length(env, argv[1], &count))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "tensors", "tensors: %T is not a list of {Name, Tensor}",
                               argv[1]);
    tb_safetensors_entry *entries = calloc(count ? count : 1, sizeof *entries);
    tb_tensor_desc *descs = calloc(count ? count : 1, sizeof *descs);
    tb_safetensors_meta *meta = NULL;
    unsigned meta_count = 0;
    int has_meta = argv[2] != tb_atoms.nil;
    char *header = NULL;
    if (!entries || !descs) {
        exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "safetensors: out of memory reading the tensors");
        goto done;
    }
    ERL_NIF_TERM head, tail = argv[1];
    uint64_t next = 0;
    for (unsigned i = 0; enif_get_list_cell(env, tail, &head, &tail); i++) {
        const ERL_NIF_TERM *nt;
        int arity;
        ErlNifBinary name;
        if (!enif_get_tuple(env, head, &arity, &nt) || arity != 2 || !enif_inspect_binary(env, nt[0], &name) ||
            !tb_safetensors_valid_utf8((const char *)name.data, name.size) ||
            (name.size == 12 && memcmp(name.data, "__metadata__", 12) == 0)) {
            exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "tensors",
                                  "tensors: %T is not {Name, Tensor} with a UTF-8 name other than __metadata__", head);
            goto done;
        }
        if (!tb_tensor_arg(env, nt[1], "tensors", &descs[i], &exc))
            goto done;
        const tb_tensor_desc *d = &descs[i];
        if (!tb_dtype_safetensors_name(d->dtype)) {
            exc = tb_raise_badarg(env, TB_WHY_BAD_DTYPE, "tensors", "tensors: %T: dtype %s has no safetensors name",
                                  nt[0], tb_dtypes[d->dtype].name);
            goto done;
        }
        if (d->info.ndim > TB_MAX_DIMS) {
            exc = tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "tensors", "tensors: %T has too many dimensions", nt[0]);
            goto done;
        }
        entries[i] = (tb_safetensors_entry){.name = {(const char *)name.data, name.size},
                                            .dtype = d->dtype,
                                            .ndim = d->info.ndim,
                                            .shape = d->info.sizes,
                                            .begin = next,
                                            .end = next + d->dense_bytes};
        next += d->dense_bytes;
    }
    if (has_meta && !get_meta(env, argv[2], &meta, &meta_count, &exc))
        goto done;
    size_t header_len;
    header = tb_safetensors_encode(entries, count, meta, meta_count, has_meta, &header_len);
    if (!header) {
        exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "safetensors: out of memory writing the header");
        goto done;
    }
    /* A new name beside the target, ours alone (O_EXCL), renamed over it. */
    char tmp[PATH_MAX + 64];
    static unsigned long serial;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        int e = errno;
        exc = tb_raise_error(env, TB_WHY_SYSTEM, "path", "path: %T: cannot create a file beside it: %s", argv[0],
                             strerror(e));
        goto done;
    }
    unsigned char prefix[8];
    for (int b = 0; b < 8; b++)
        prefix[b] = (unsigned char)((uint64_t)header_len >> (8 * b));
    char why[300] = "";
    int ok = write_all(fd, prefix, 8) && write_all(fd, header, header_len);
    if (!ok)
        snprintf(why, sizeof why, "%s", strerror(errno));
    unsigned failed_at = count;
    for (unsigned i = 0; ok && i < count; i++)
        if (!(ok = write_tensor(fd, &descs[i], why, sizeof why)))
            failed_at = i;
    if (ok && fdatasync(fd) != 0) {
        ok = 0;
        snprintf(why, sizeof why, "%s", strerror(errno));
    }
    if (close(fd) != 0 && ok) {
        ok = 0;
        snprintf(why, sizeof why, "%s", strerror(errno));
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        snprintf(why, sizeof why, "%s", strerror(errno));
    }
    if (!ok) {
        unlink(tmp);
        if (failed_at < count)
            exc = tb_raise_error(env, TB_WHY_SYSTEM, "path", "path: %T: writing tensor %T: %s", argv[0],
                                 make_string(env, &entries[failed_at].name), why);
        else
            exc = tb_raise_error(env, TB_WHY_SYSTEM, "path", "path: %T: %s", argv[0], why);
        goto done;
    }
    exc = tb_atoms.ok;
done:
    free(entries);
    free(descs);
    free(meta);
    free(header);
    return exc;
}
