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
#include "tb_safetensors.h"
#include "tb_storage.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "torch_shim.h"

/* One private mapping of a file: the storage of every tensor over it. */
typedef struct {
    tb_storage header; /* TB_MEMORY_FILE */
    tb_range mapping;  /* registered while mapped */
} tb_file_map;

static void release_map(tb_storage *s)
{
    tb_file_map *m = (tb_file_map *)s;
    tb_storage_unmap_file(&m->mapping);
    free(m);
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

static int selected(const selection *sel, const tb_st_string *name)
{
    if (sel->all)
        return 1;
    ErlNifBinary key = {.size = name->len, .data = (unsigned char *)name->ptr};
    return bsearch(&key, sel->names, sel->count, sizeof *sel->names, cmp_bin) != NULL;
}

static ERL_NIF_TERM make_string(ErlNifEnv *env, const tb_st_string *s)
{
    ERL_NIF_TERM t;
    unsigned char *p = enif_make_new_binary(env, s->len, &t);
    if (s->len)
        memcpy(p, s->ptr, s->len);
    return t;
}

/* The header's refusal, naming the file and the tensor. */
static ERL_NIF_TERM header_error(ErlNifEnv *env, ERL_NIF_TERM path_term, const tb_st_header *h)
{
    tb_reason why = h->error == TB_ST_NO_MEMORY       ? TB_WHY_NO_MEMORY
                    : h->error == TB_ST_UNKNOWN_DTYPE ? TB_WHY_BAD_DTYPE
                    : h->error == TB_ST_TOO_MANY_DIMS ? TB_WHY_UNSUPPORTED
                                                      : TB_WHY_BAD_FILE;
    const char *text = tb_st_error_text(h->error);
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
                        uint64_t data_at, const tb_st_entry *e, ERL_NIF_TERM *out, int *copied, ERL_NIF_TERM *exc)
{
    const tb_dtype *dt = &tb_dtypes[e->dtype];
    int64_t strides[TB_ST_MAX_DIMS];
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
    tb_st_error pe = (uint64_t)st.st_size < 8     ? TB_ST_TOO_SMALL
                     : read_all(fd, prefix, 8, 0) ? tb_st_prefix(prefix, (uint64_t)st.st_size, &header_len)
                                                  : TB_ST_TOO_SMALL;
    tb_st_header h;
    memset(&h, 0, sizeof h);
    char *json = NULL;
    if (pe != TB_ST_OK) {
        h.error = pe;
    } else if (!(json = malloc(header_len ? header_len : 1))) {
        h.error = TB_ST_NO_MEMORY;
    } else if (!read_all(fd, json, header_len, 8)) {
        h.error = TB_ST_HEADER_PAST_END; /* shrunk since fstat */
    } else {
        tb_st_decode(json, header_len, (uint64_t)st.st_size - 8 - header_len, &h);
    }
    free(json);
    if (h.error != TB_ST_OK) {
        close(fd);
        free(sel.names);
        exc = header_error(env, argv[0], &h);
        tb_st_free(&h);
        return exc;
    }
    /* Every name asked for is in the file, and every dtype asked for is
     * one the linked libtorch has. */
    unsigned found = 0;
    for (size_t i = 0; i < h.count; i++) {
        const tb_st_entry *e = &h.entries[i];
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
            tb_st_free(&h);
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
            tb_st_string s = {(const char *)missing->data, missing->size};
            name = make_string(env, &s);
        }
        close(fd);
        free(sel.names);
        tb_st_free(&h);
        return tb_raise_badarg(env, TB_WHY_MISSING, "only", "only: %T asks for tensor %T, which %T does not hold",
                               argv[1], name, argv[0]);
    }

    tb_file_map *m = malloc(sizeof *m);
    int error = ENOMEM;
    void *file = NULL;
    if (m) {
        tb_storage_init(&m->header, TB_MEMORY_FILE, 0, release_map);
        file = tb_storage_map_private(&m->header, fd, (size_t)st.st_size, &m->mapping, &error);
    }
    close(fd);
    if (!file) {
        free(m);
        free(sel.names);
        tb_st_free(&h);
        return tb_raise_error(env, TB_WHY_SYSTEM, "path", "path: %T: cannot map it: %s", argv[0], strerror(error));
    }
    /* One storage for the whole file: every tensor aliases it. */
    int64_t size = (int64_t)st.st_size, one = 1;
    tb_shim_out base;
    if (!tb_shim_from_blob(file, 1, &size, &one, tb_dtypes[TB_DT_UINT8].torch_scalar_type, TB_DEVICE_CPU, 0, &m->header,
                           tb_storage_release, &base.handle, &base.err)) {
        free(sel.names);
        tb_st_free(&h);
        return tb_raise_error(env, TB_WHY_LIBTORCH, "path", "path: %T: %s", argv[0], base.err.message);
    }
    ERL_NIF_TERM tensors = enif_make_list(env, 0), copied = enif_make_list(env, 0);
    uint64_t data_start = 8 + header_len; /* after the length and the header */
    for (size_t i = h.count; i-- > 0;) {
        const tb_st_entry *e = &h.entries[i];
        if (!selected(&sel, &e->name))
            continue;
        ERL_NIF_TERM t;
        int was_copied;
        if (!entry_tensor(env, argv[0], base.handle, file, data_start, e, &t, &was_copied, &exc)) {
            tb_shim_release(base.handle);
            free(sel.names);
            tb_st_free(&h);
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
    tb_st_free(&h);
    return enif_make_tuple3(env, tensors, meta, copied);
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
static int get_meta(ErlNifEnv *env, ERL_NIF_TERM term, tb_st_meta **out, unsigned *count, ERL_NIF_TERM *exc)
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
            !enif_inspect_binary(env, kv[1], &v) || !tb_st_valid_utf8((const char *)k.data, k.size) ||
            !tb_st_valid_utf8((const char *)v.data, v.size))
            goto bad;
        (*out)[i] = (tb_st_meta){{(const char *)k.data, k.size}, {(const char *)v.data, v.size}};
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
    tb_st_entry *entries = calloc(count ? count : 1, sizeof *entries);
    tb_tensor_desc *descs = calloc(count ? count : 1, sizeof *descs);
    tb_st_meta *meta = NULL;
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
            !tb_st_valid_utf8((const char *)name.data, name.size) ||
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
        if (d->info.ndim > TB_ST_MAX_DIMS) {
            exc = tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "tensors", "tensors: %T has too many dimensions", nt[0]);
            goto done;
        }
        entries[i] = (tb_st_entry){.name = {(const char *)name.data, name.size},
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
    header = tb_st_encode(entries, count, meta, meta_count, has_meta, &header_len);
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
