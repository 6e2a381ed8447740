/* safetensors_open: a file's tensors over one private mapping of it
 * (tb_file_map.h), each holding the mapping's one libtorch storage: the
 * mapping lives until the last tensor, view, DLPack export or binary over
 * it is gone. The header is read with pread into memory of our own, then
 * decoded (tb_safetensors_decode.h): a file changed under us changes
 * nothing the decoder reads. No tensor byte is read, except an entry whose
 * offset does not fit its element size, which is copied once (under the
 * SIGBUS guard): no misaligned pointer is handed out. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_fault.h"
#include "tb_file_map.h"
#include "tb_file_terms.h"
#include "tb_nifs.h"
#include "tb_safetensors.h"
#include "tb_safetensors_decode.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "torch_shim.h"

/* ---- The file and its header ----------------------------------------- */

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

/* The header of the file open at fd, of file_size bytes, read and decoded
 * into h: h->error says why not. */
static void read_header(int fd, uint64_t file_size, tb_safetensors_header *h, uint64_t *header_len)
{
    unsigned char prefix[8];
    *header_len = 0;
    tb_safetensors_error pe = file_size < 8                ? TB_ST_TOO_SMALL
                              : read_all(fd, prefix, 8, 0) ? tb_safetensors_prefix(prefix, file_size, header_len)
                                                           : TB_ST_TOO_SMALL;
    memset(h, 0, sizeof *h);
    char *json = NULL;
    if (pe != TB_ST_OK) {
        h->error = pe;
    } else if (!(json = malloc(*header_len ? *header_len : 1))) {
        h->error = TB_ST_NO_MEMORY;
    } else if (!read_all(fd, json, *header_len, 8)) {
        h->error = TB_ST_HEADER_PAST_END; /* shrunk since fstat */
    } else {
        tb_safetensors_decode(json, *header_len, file_size - 8 - *header_len, h);
    }
    free(json);
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
                               path_term, tb_file_make_string(env, &h->name), tb_file_make_string(env, &h->detail));
    if (h->name.ptr)
        return tb_raise_badarg(env, why, "path", "path: %T is not a valid safetensors file: tensor %T: %s", path_term,
                               tb_file_make_string(env, &h->name), text);
    if (h->error == TB_ST_BAD_JSON || h->error == TB_ST_TOO_DEEP)
        return tb_raise_badarg(env, why, "path", "path: %T is not a valid safetensors file: %s (at byte %lu of it)",
                               path_term, text, (unsigned long)h->at);
    return tb_raise_badarg(env, why, "path", "path: %T is not a valid safetensors file: %s", path_term, text);
}

/* ---- The tensors asked for ------------------------------------------- */

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

/* Every dtype asked for is one the linked libtorch has. */
static int dtypes_in_libtorch(ErlNifEnv *env, ERL_NIF_TERM path_term, const selection *sel,
                              const tb_safetensors_header *h, ERL_NIF_TERM *exc)
{
    for (size_t i = 0; i < h->count; i++) {
        const tb_safetensors_entry *e = &h->entries[i];
        if (selected(sel, &e->name) && !tb_shim_has_scalar_type(tb_dtypes[e->dtype].torch_scalar_type)) {
            *exc = tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "path",
                                   "path: %T: tensor %T: dtype %s is not in the linked libtorch (%s); leave it out "
                                   "with %C",
                                   path_term, tb_file_make_string(env, &e->name), tb_dtypes[e->dtype].name,
                                   tb_shim_torch_version(), "#{only => Names}", "only: names");
            return 0;
        }
    }
    return 1;
}

/* Every name asked for is in the file: the refusal names the first one
 * missing, or the list (a name asked for twice). */
static int names_in_file(ErlNifEnv *env, const ERL_NIF_TERM argv[], const selection *sel,
                         const tb_safetensors_header *h, ERL_NIF_TERM *exc)
{
    unsigned found = 0;
    for (size_t i = 0; i < h->count; i++)
        found += selected(sel, &h->entries[i].name);
    if (sel->all || found == sel->count)
        return 1;
    const ErlNifBinary *missing = NULL;
    for (unsigned i = 0; i < sel->count && !missing; i++) {
        int here = 0;
        for (size_t j = 0; j < h->count && !here; j++)
            here = h->entries[j].name.len == sel->names[i].size &&
                   memcmp(h->entries[j].name.ptr, sel->names[i].data, sel->names[i].size) == 0;
        if (!here)
            missing = &sel->names[i];
    }
    ERL_NIF_TERM name = argv[1];
    if (missing) {
        tb_safetensors_string s = {(const char *)missing->data, missing->size};
        name = tb_file_make_string(env, &s);
    }
    *exc = tb_raise_badarg(env, TB_WHY_MISSING, "only", "only: %T asks for tensor %T, which %T does not hold", argv[1],
                           name, argv[0]);
    return 0;
}

/* The file named argv[0], open, its header decoded into h and the names
 * asked for checked against it: the file, or -1 with *exc. Either way h
 * holds what was decoded (tb_safetensors_free). */
static int open_checked(ErlNifEnv *env, const ERL_NIF_TERM argv[], const char *path, const selection *sel,
                        struct stat *st, tb_safetensors_header *h, uint64_t *header_len, ERL_NIF_TERM *exc)
{
    memset(h, 0, sizeof *h);
    int fd = open_regular(env, argv[0], path, st, exc);
    if (fd < 0)
        return -1;
    read_header(fd, (uint64_t)st->st_size, h, header_len);
    if (h->error != TB_ST_OK)
        *exc = header_error(env, argv[0], h);
    else if (dtypes_in_libtorch(env, argv[0], sel, h, exc) && names_in_file(env, argv, sel, h, exc))
        return fd;
    close(fd);
    return -1;
}

/* ---- The tensors over the mapping ------------------------------------ */

/* The whole file mapped, as one byte tensor (*base) that every tensor
 * aliases: one storage for the whole file. */
static int map_whole(ErlNifEnv *env, ERL_NIF_TERM path_term, int fd, const struct stat *st, const char *path,
                     void **file, tb_shim_tensor **base, ERL_NIF_TERM *exc)
{
    int error;
    tb_file_map *m = tb_file_map_open(fd, st, path, 0, (size_t)st->st_size, file, &error);
    if (!m) {
        *exc = tb_raise_error(env, TB_WHY_SYSTEM, "path", "path: %T: cannot map it: %s", path_term, strerror(error));
        return 0;
    }
    tb_shim_out o;
    if (!tb_file_map_bytes(m, *file, (size_t)st->st_size, &o.handle, &o.err)) {
        *exc = tb_raise_error(env, TB_WHY_LIBTORCH, "path", "path: %T: %s", path_term, o.err.message);
        return 0;
    }
    *base = o.handle;
    return 1;
}

/* A copy of an entry whose offset does not fit its element size: its bytes
 * at from, read under the SIGBUS guard. */
static int copy_entry(ErlNifEnv *env, ERL_NIF_TERM path_term, const char *from, const tb_safetensors_entry *e,
                      tb_shim_out *o, ERL_NIF_TERM *exc)
{
    const tb_dtype *dt = &tb_dtypes[e->dtype];
    if (!tb_shim_zeros(e->ndim, e->shape, dt->torch_scalar_type, &o->handle, &o->err)) {
        *exc = tb_raise_error(env, TB_WHY_LIBTORCH, "path", "path: %T: tensor %T: %s", path_term,
                              tb_file_make_string(env, &e->name), o->err.message);
        return 0;
    }
    tb_shim_info info;
    tb_shim_info_of(o->handle, &info);
    int64_t n = (int64_t)(e->end - e->begin), one = 1;
    if (!tb_fault_copy_strided((void *)from, 1, &n, &one, 1, info.data, 1)) {
        tb_shim_release(o->handle);
        *exc = tb_raise_error(env, TB_WHY_GONE, "path",
                              "path: %T: tensor %T: the file shrank under the copy of its bytes (SIGBUS)", path_term,
                              tb_file_make_string(env, &e->name));
        return 0;
    }
    return 1;
}

/* The tensor of entry e over the mapping (base: a byte tensor of the whole
 * file, at file): an alias of its storage, or, where its offset does not
 * fit its element size, a copy (*copied set). */
static int entry_tensor(ErlNifEnv *env, ERL_NIF_TERM path_term, tb_shim_tensor *base, const char *file,
                        uint64_t data_at, const tb_safetensors_entry *e, ERL_NIF_TERM *out, int *copied,
                        ERL_NIF_TERM *exc)
{
    const tb_dtype *dt = &tb_dtypes[e->dtype];
    uint64_t at = data_at + e->begin;
    uint64_t bytes = e->end - e->begin;
    tb_shim_out o;
    *copied = bytes != 0 && at % dt->element_size != 0;
    if (*copied) {
        if (!copy_entry(env, path_term, file + at, e, &o, exc))
            return 0;
        return tb_tensor_make(env, o.handle, out, exc);
    }
    /* The decoder refused any shape whose elements overflow: an overflow
     * here is one of a tensor without elements (a dimension of size 0),
     * whose saturated strides reach nothing. */
    int64_t strides[TB_MAX_DIMS];
    (void)tb_row_major_strides(e->ndim, e->shape, strides);
    if (!tb_shim_alias(base, bytes ? at : 0, e->ndim, e->shape, strides, dt->torch_scalar_type, &o.handle, &o.err)) {
        *exc = tb_raise_error(env, TB_WHY_LIBTORCH, "path", "path: %T: tensor %T: %s", path_term,
                              tb_file_make_string(env, &e->name), o.err.message);
        return 0;
    }
    return tb_tensor_make(env, o.handle, out, exc);
}

static ERL_NIF_TERM metadata_term(ErlNifEnv *env, const tb_safetensors_header *h)
{
    if (!h->has_meta)
        return tb_atoms.nil;
    ERL_NIF_TERM meta = enif_make_list(env, 0);
    for (size_t i = h->meta_count; i-- > 0;)
        meta = enif_make_list_cell(env,
                                   enif_make_tuple2(env, tb_file_make_string(env, &h->meta[i].key),
                                                    tb_file_make_string(env, &h->meta[i].value)),
                                   meta);
    return meta;
}

/* {[{Name, Tensor}], Metadata, [Name copied]}, the tensors asked for in
 * file order; or the exception. */
static ERL_NIF_TERM open_result(ErlNifEnv *env, ERL_NIF_TERM path_term, tb_shim_tensor *base, const char *file,
                                uint64_t data_start, const selection *sel, const tb_safetensors_header *h)
{
    ERL_NIF_TERM tensors = enif_make_list(env, 0), copied = enif_make_list(env, 0), exc;
    for (size_t i = h->count; i-- > 0;) {
        const tb_safetensors_entry *e = &h->entries[i];
        if (!selected(sel, &e->name))
            continue;
        ERL_NIF_TERM t;
        int was_copied;
        if (!entry_tensor(env, path_term, base, file, data_start, e, &t, &was_copied, &exc))
            return exc;
        ERL_NIF_TERM name = tb_file_make_string(env, &e->name);
        tensors = enif_make_list_cell(env, enif_make_tuple2(env, name, t), tensors);
        if (was_copied)
            copied = enif_make_list_cell(env, name, copied);
    }
    return enif_make_tuple3(env, tensors, metadata_term(env, h), copied);
}

/* (Path, all | [Name]) -> {[{Name, Tensor}], [{Key, Value}] | nil, [Name copied]} */
ERL_NIF_TERM tb_nif_safetensors_open(TB_NIF_PARAMS)
{
    char path[PATH_MAX];
    ERL_NIF_TERM answer;
    selection sel;
    if (!tb_file_get_path(env, argv[0], path, &answer) || !get_selection(env, argv[1], &sel, &answer))
        return answer;
    struct stat st;
    tb_safetensors_header h;
    uint64_t header_len;
    int fd = open_checked(env, argv, path, &sel, &st, &h, &header_len, &answer);
    if (fd >= 0) {
        void *file = NULL;
        tb_shim_tensor *base = NULL;
        int mapped = map_whole(env, argv[0], fd, &st, path, &file, &base, &answer);
        close(fd);
        if (mapped) {
            /* The data start after the length and the header. */
            answer = open_result(env, argv[0], base, file, 8 + header_len, &sel, &h);
            tb_shim_release(base);
        }
    }
    free(sel.names);
    tb_safetensors_free(&h);
    return answer;
}
