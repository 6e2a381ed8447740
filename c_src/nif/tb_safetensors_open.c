/* safetensors_open: a file's tensors over one private mapping of it
 * (tb_file_map.h), each holding the mapping's one libtorch storage: the
 * mapping lives until the last tensor, view, DLPack export or binary over
 * it is gone. The header is read with pread into memory of our own, then
 * decoded (tb_safetensors_decode.h): a file changed under us changes
 * nothing the decoder reads. No tensor byte is read, except an entry whose
 * offset does not fit its element size, which is read once with pread
 * straight into a new tensor's memory (the mapping's pages are not
 * touched: the peak grows by the tensor's bytes), or refused before any
 * byte is read: no misaligned pointer is handed out. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* A file's header as read: its prefix, its length, the file's size, and
 * the header decoded (h.error says why not). */
typedef struct {
    unsigned char prefix[8];
    uint64_t file_size, header_len;
    tb_safetensors_header h;
} file_header;

/* The header of the file open at fd, of f->file_size bytes, read and
 * decoded into f. */
static void read_header(int fd, file_header *f)
{
    tb_safetensors_header *h = &f->h;
    memset(f->prefix, 0, sizeof f->prefix);
    f->header_len = 0;
    tb_safetensors_error pe = f->file_size < 8 ? TB_ST_TOO_SMALL
                              : read_all(fd, f->prefix, 8, 0)
                                  ? tb_safetensors_prefix(f->prefix, f->file_size, &f->header_len)
                                  : TB_ST_TOO_SMALL;
    memset(h, 0, sizeof *h);
    char *json = NULL;
    if (pe != TB_ST_OK) {
        h->error = pe;
    } else if (!(json = malloc(f->header_len ? f->header_len : 1))) {
        h->error = TB_ST_NO_MEMORY;
    } else if (!read_all(fd, json, f->header_len, 8)) {
        h->error = TB_ST_HEADER_PAST_END; /* shrunk since fstat */
    } else {
        tb_safetensors_decode(json, f->header_len, f->file_size - 8 - f->header_len, h);
    }
    free(json);
}

/* What a file whose length prefix is refused starts with: "JSON" (a '{'
 * or '[' after spaces), "text" (8 printable bytes), or NULL. */
static const char *starts_with(const file_header *f)
{
    size_t n = f->file_size < 8 ? (size_t)f->file_size : 8, i = 0;
    while (i < n && strchr(" \t\r\n", f->prefix[i]) && f->prefix[i])
        i++;
    if (i < n && (f->prefix[i] == '{' || f->prefix[i] == '['))
        return "JSON";
    for (i = 0; i < n; i++)
        if (f->prefix[i] < 0x20 ? !strchr("\t\r\n", f->prefix[i]) || !f->prefix[i] : f->prefix[i] > 0x7e)
            return NULL;
    return n == 8 ? "text" : NULL;
}

/* The header length the prefix claims (at most TB_ST_MAX_HEADER when the
 * refusal is HEADER_PAST_END). */
static uint64_t claimed_length(const file_header *f)
{
    if (f->header_len)
        return f->header_len;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | f->prefix[i];
    return n;
}

/* The refusal of a file cut short, or of text, by its sizes and first
 * bytes; 0 when the header's error is none of those. */
static int cut_or_text(ErlNifEnv *env, ERL_NIF_TERM path_term, const file_header *f, ERL_NIF_TERM *exc)
{
    const tb_safetensors_header *h = &f->h;
    const char *text = h->error == TB_ST_HEADER_TOO_LARGE || h->error == TB_ST_HEADER_PAST_END ? starts_with(f) : NULL;
    unsigned long long has = f->file_size;
    if (text && text[0] == 'J')
        *exc = tb_raise_badarg(env, TB_WHY_BAD_FILE, "path",
                               "path: %T looks like JSON (an index file?), not a safetensors file: a sharded "
                               "checkpoint's index is named *.safetensors.index.json",
                               path_term);
    else if (text)
        *exc = tb_raise_badarg(env, TB_WHY_BAD_FILE, "path", "path: %T is text, not a safetensors file", path_term);
    else if (h->error == TB_ST_HEADER_PAST_END)
        *exc = tb_raise_badarg(env, TB_WHY_BAD_FILE, "path",
                               "path: %T is truncated: it has %llu bytes and its header needs %llu (its length "
                               "prefix runs past the end of the file)",
                               path_term, has, (unsigned long long)(8 + claimed_length(f)));
    else if (h->error == TB_ST_INCOMPLETE && h->count && 8 + f->header_len + h->entries[h->count - 1].end > has)
        *exc = tb_raise_badarg(env, TB_WHY_BAD_FILE, "path",
                               "path: %T is truncated: it has %llu bytes and its header needs %llu (tensor %T ends "
                               "past the end)",
                               path_term, has, (unsigned long long)(8 + f->header_len + h->entries[h->count - 1].end),
                               tb_file_make_string(env, &h->entries[h->count - 1].name));
    else
        return 0;
    return 1;
}

/* The header's refusal, naming the file and the tensor. */
static ERL_NIF_TERM header_error(ErlNifEnv *env, ERL_NIF_TERM path_term, const file_header *f)
{
    const tb_safetensors_header *h = &f->h;
    ERL_NIF_TERM exc;
    if (cut_or_text(env, path_term, f, &exc))
        return exc;
    tb_reason why = h->error == TB_ST_NO_MEMORY       ? TB_WHY_NO_MEMORY
                    : h->error == TB_ST_UNKNOWN_DTYPE ? TB_WHY_BAD_DTYPE
                    : h->error == TB_ST_TOO_MANY_DIMS ? TB_WHY_UNSUPPORTED
                                                      : TB_WHY_BAD_FILE;
    const char *text = tb_safetensors_error_text(h->error);
    if (h->error == TB_ST_UNKNOWN_DTYPE)
        return tb_raise_badarg(env, why, "path",
                               "path: %T: tensor %T: dtype %T is not one of the format's "
                               "(tables/0's safetensors names)",
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

/* What becomes of a tensor whose dtype the linked libtorch cannot hold. */
typedef enum { UNHELD_REFUSE, UNHELD_SKIP, UNHELD_BYTES } unheld_mode;

/* The names asked for (a sorted array of binaries), or all; and what
 * becomes of a tensor the linked libtorch cannot hold. */
typedef struct {
    ErlNifBinary *names;
    unsigned count;
    int all;
    unheld_mode unheld;
    int refuse_misaligned; /* refuse a tensor whose offset does not fit its element size */
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

static int get_unheld(ERL_NIF_TERM term, unheld_mode *mode)
{
    *mode = term == tb_atoms.skip ? UNHELD_SKIP : term == tb_atoms.bytes ? UNHELD_BYTES : UNHELD_REFUSE;
    return term == tb_atoms.skip || term == tb_atoms.bytes || term == tb_atoms.refuse;
}

/* 1 when the linked libtorch holds the entry's values: the format's dtype
 * has a dtype of the table, and libtorch has that one. */
static int held(const tb_safetensors_entry *e)
{
    return e->dtype != TB_DT_NONE && tb_shim_has_scalar_type(tb_dtypes[e->dtype].torch_scalar_type);
}

/* Every dtype asked for is one the linked libtorch holds, unless asked to
 * skip such tensors or open them as bytes. */
static int dtypes_in_libtorch(ErlNifEnv *env, ERL_NIF_TERM path_term, const selection *sel,
                              const tb_safetensors_header *h, ERL_NIF_TERM *exc)
{
    for (size_t i = 0; i < h->count && sel->unheld == UNHELD_REFUSE; i++) {
        const tb_safetensors_entry *e = &h->entries[i];
        if (selected(sel, &e->name) && !held(e)) {
            *exc = tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "path",
                                   "path: %T: tensor %T: dtype %s (%s) is not in the linked libtorch (%s); leave it "
                                   "out with %C, or open the rest with %C",
                                   path_term, tb_file_make_string(env, &e->name), tb_st_dtypes[e->format].name,
                                   e->dtype == TB_DT_NONE ? "which no libtorch has" : tb_dtypes[e->dtype].name,
                                   tb_shim_torch_version(), "#{only => Names}", "only: names", "#{unsupported => skip}",
                                   "unsupported: :skip");
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

/* What an entry opens as: a tensor of its dtype (its shape in elements,
 * tb_safetensors_tensor_shape), or of its bytes (uint8, its last dimension
 * in bytes: a 0-dim entry of more than one byte has one dimension). */
typedef struct {
    int scalar_type;
    unsigned element_size;
    int ndim;
    int64_t shape[TB_MAX_DIMS];
} entry_layout;

static void layout_of(const tb_safetensors_entry *e, int as_bytes, entry_layout *l)
{
    if (!as_bytes && tb_safetensors_tensor_shape(e, l->shape)) {
        l->scalar_type = tb_dtypes[e->dtype].torch_scalar_type;
        l->element_size = tb_dtypes[e->dtype].element_size;
        l->ndim = e->ndim;
        return;
    }
    unsigned bits = tb_st_dtypes[e->format].bits;
    l->scalar_type = tb_dtypes[TB_DT_UINT8].torch_scalar_type;
    l->element_size = 1;
    l->ndim = e->ndim;
    for (int d = 0; d < e->ndim; d++)
        l->shape[d] = e->shape[d];
    if (e->ndim > 0)
        l->shape[e->ndim - 1] = (int64_t)((uint64_t)e->shape[e->ndim - 1] * bits / 8);
    else if (bits != 8)
        l->shape[l->ndim++] = bits / 8;
}

/* Every tensor asked for starts at an offset that fits its element size,
 * unless asked to copy those that do not: checked before anything is read
 * or mapped. */
static int offsets_fit(ErlNifEnv *env, ERL_NIF_TERM path_term, const selection *sel, uint64_t data_at,
                       const tb_safetensors_header *h, ERL_NIF_TERM *exc)
{
    for (size_t i = 0; i < h->count && sel->refuse_misaligned; i++) {
        const tb_safetensors_entry *e = &h->entries[i];
        int is_held = held(e);
        if (!selected(sel, &e->name) || (!is_held && sel->unheld != UNHELD_BYTES) || e->end == e->begin)
            continue;
        entry_layout l;
        layout_of(e, !is_held, &l);
        if ((data_at + e->begin) % l.element_size != 0) {
            *exc = tb_raise_badarg(env, TB_WHY_MISALIGNED, "path",
                                   "path: %T: tensor %T starts at an offset that does not fit its element size, "
                                   "and %C",
                                   path_term, tb_file_make_string(env, &e->name), "misaligned => refuse",
                                   "misaligned: :refuse");
            return 0;
        }
    }
    return 1;
}

/* The file named path_term (path), open and its header read into f: the
 * file, or -1 with *exc. Either way f->h holds what was decoded
 * (tb_safetensors_free). */
static int open_header(ErlNifEnv *env, ERL_NIF_TERM path_term, const char *path, struct stat *st, file_header *f,
                       ERL_NIF_TERM *exc)
{
    memset(&f->h, 0, sizeof f->h);
    int fd = open_regular(env, path_term, path, st, exc);
    if (fd < 0)
        return -1;
    f->file_size = (uint64_t)st->st_size;
    read_header(fd, f);
    if (f->h.error == TB_ST_OK)
        return fd;
    *exc = header_error(env, path_term, f);
    close(fd);
    return -1;
}

/* The file named argv[0], open, its header decoded into f and the names
 * asked for checked against it: the file, or -1 with *exc. */
static int open_checked(ErlNifEnv *env, const ERL_NIF_TERM argv[], const char *path, const selection *sel,
                        struct stat *st, file_header *f, ERL_NIF_TERM *exc)
{
    int fd = open_header(env, argv[0], path, st, f, exc);
    if (fd < 0)
        return -1;
    if (dtypes_in_libtorch(env, argv[0], sel, &f->h, exc) && names_in_file(env, argv, sel, &f->h, exc) &&
        offsets_fit(env, argv[0], sel, 8 + f->header_len, &f->h, exc))
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

/* What open_result works from: the file (its name, its descriptor), the
 * byte tensor of its whole mapping, where the data start, and the tensors
 * asked for. */
typedef struct {
    ERL_NIF_TERM path_term;
    int fd;
    tb_shim_tensor *base;
    uint64_t data_at;
    const selection *sel;
} opening;

/* A copy of an entry whose offset does not fit its element size: its bytes
 * at file offset at, read with pread straight into a new tensor's memory
 * (one copy; the mapping's pages are not touched). */
static int copy_entry(ErlNifEnv *env, const opening *o, uint64_t at, const tb_safetensors_entry *e,
                      const entry_layout *l, tb_shim_out *out, ERL_NIF_TERM *exc)
{
    if (!tb_shim_empty(l->ndim, l->shape, l->scalar_type, &out->handle, &out->err)) {
        *exc = tb_raise_error(env, out->err.no_memory ? TB_WHY_NO_MEMORY : TB_WHY_LIBTORCH, "path",
                              "path: %T: tensor %T: %s", o->path_term, tb_file_make_string(env, &e->name),
                              out->err.message);
        return 0;
    }
    tb_shim_info info;
    tb_shim_info_of(out->handle, &info);
    errno = 0;
    if (!read_all(o->fd, info.data, (size_t)(e->end - e->begin), (off_t)at)) {
        int error = errno;
        tb_shim_release(out->handle);
        struct stat st;
        uint64_t has = fstat(o->fd, &st) == 0 ? (uint64_t)st.st_size : 0;
        *exc = error ? tb_raise_error(env, TB_WHY_SYSTEM, "path", "path: %T: tensor %T: reading its bytes: %s",
                                      o->path_term, tb_file_make_string(env, &e->name), strerror(error))
                     : tb_raise_error(env, TB_WHY_GONE, "path",
                                      "path: %T: tensor %T: the file was truncated while it was opened (it has %llu "
                                      "bytes; the tensor needs up to %llu)",
                                      o->path_term, tb_file_make_string(env, &e->name), (unsigned long long)has,
                                      (unsigned long long)(at + e->end - e->begin));
        return 0;
    }
    return 1;
}

/* The tensor of entry e over the mapping, of its dtype or of its bytes
 * (as_bytes): an alias of its storage, or, where its offset does not fit
 * its element size, a copy (*copied set). */
static int entry_tensor(ErlNifEnv *env, const opening *o, const tb_safetensors_entry *e, int as_bytes,
                        ERL_NIF_TERM *out, int *copied, ERL_NIF_TERM *exc)
{
    entry_layout l;
    layout_of(e, as_bytes, &l);
    uint64_t at = o->data_at + e->begin;
    uint64_t bytes = e->end - e->begin;
    tb_shim_out t;
    *copied = bytes != 0 && at % l.element_size != 0;
    if (*copied) {
        if (!copy_entry(env, o, at, e, &l, &t, exc))
            return 0;
        return tb_tensor_make(env, t.handle, out, exc);
    }
    /* The decoder refused any shape whose elements overflow: an overflow
     * here is one of a tensor without elements (a dimension of size 0),
     * whose saturated strides reach nothing. */
    int64_t strides[TB_MAX_DIMS];
    (void)tb_row_major_strides(l.ndim, l.shape, strides);
    if (!tb_shim_alias(o->base, bytes ? at : 0, l.ndim, l.shape, strides, l.scalar_type, &t.handle, &t.err)) {
        *exc = tb_raise_error(env, TB_WHY_LIBTORCH, "path", "path: %T: tensor %T: %s", o->path_term,
                              tb_file_make_string(env, &e->name), t.err.message);
        return 0;
    }
    return tb_tensor_make(env, t.handle, out, exc);
}

/* An entry's name, its format's dtype, its shape as the file gives it
 * and its dtype of the table (or nil), into t[0..3]. */
static void entry_terms(ErlNifEnv *env, const tb_safetensors_entry *e, ERL_NIF_TERM t[4])
{
    ERL_NIF_TERM dims[TB_MAX_DIMS];
    for (int d = 0; d < e->ndim; d++)
        dims[d] = enif_make_uint64(env, (ErlNifUInt64)e->shape[d]);
    t[0] = tb_file_make_string(env, &e->name);
    t[1] = tb_make_string(env, tb_st_dtypes[e->format].name);
    t[2] = enif_make_tuple_from_array(env, dims, (unsigned)e->ndim);
    t[3] = e->dtype == TB_DT_NONE ? tb_atoms.nil : tb_atoms.dtypes[e->dtype];
}

/* {Name, FormatDtype, Shape, Dtype | nil}: a tensor the linked libtorch
 * cannot hold. */
static ERL_NIF_TERM unheld_term(ErlNifEnv *env, const tb_safetensors_entry *e)
{
    ERL_NIF_TERM t[4];
    entry_terms(env, e, t);
    return enif_make_tuple_from_array(env, t, 4);
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

/* The lists open_result makes, from the last entry back. */
typedef struct {
    ERL_NIF_TERM tensors, copied, unheld;
} result_lists;

/* Entry e's tensor (or its report) onto the lists; or the exception. */
static int add_entry(ErlNifEnv *env, const opening *o, const tb_safetensors_entry *e, result_lists *r,
                     ERL_NIF_TERM *exc)
{
    int is_held = held(e);
    if (!is_held)
        r->unheld = enif_make_list_cell(env, unheld_term(env, e), r->unheld);
    if (!is_held && o->sel->unheld != UNHELD_BYTES)
        return 1;
    ERL_NIF_TERM t;
    int was_copied;
    if (!entry_tensor(env, o, e, !is_held, &t, &was_copied, exc))
        return 0;
    ERL_NIF_TERM name = tb_file_make_string(env, &e->name);
    r->tensors = enif_make_list_cell(env, enif_make_tuple2(env, name, t), r->tensors);
    if (was_copied)
        r->copied = enif_make_list_cell(env, name, r->copied);
    return 1;
}

/* {[{Name, Tensor}], Metadata, [Name copied], [Unheld]}, the tensors asked
 * for in file order (unheld_term: those the linked libtorch cannot hold);
 * or the exception. */
static ERL_NIF_TERM open_result(ErlNifEnv *env, const opening *o, const tb_safetensors_header *h)
{
    ERL_NIF_TERM nil = enif_make_list(env, 0), exc;
    result_lists r = {nil, nil, nil};
    for (size_t i = h->count; i-- > 0;)
        if (selected(o->sel, &h->entries[i].name) && !add_entry(env, o, &h->entries[i], &r, &exc))
            return exc;
    return enif_make_tuple4(env, r.tensors, metadata_term(env, h), r.copied, r.unheld);
}

/* The options (argv[1..3]) into sel: 0 with *exc when one is not. */
static int get_options(ErlNifEnv *env, const ERL_NIF_TERM argv[], selection *sel, ERL_NIF_TERM *exc)
{
    if (!get_selection(env, argv[1], sel, exc))
        return 0;
    if (!get_unheld(argv[2], &sel->unheld)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "unsupported", "unsupported: %T is not one of %C", argv[2],
                               "refuse, skip, bytes", ":refuse, :skip, :bytes");
    } else if (argv[3] != tb_atoms.copy && argv[3] != tb_atoms.refuse) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "misaligned", "misaligned: %T is not one of %C", argv[3],
                               "copy, refuse", ":copy, :refuse");
    } else {
        sel->refuse_misaligned = argv[3] == tb_atoms.refuse;
        return 1;
    }
    free(sel->names);
    return 0;
}

/* (Path, all | [Name], refuse | skip | bytes, copy | refuse) ->
 * {[{Name, Tensor}], [{Key, Value}] | nil, [Name copied], [Unheld]}: a
 * tensor whose dtype the linked libtorch cannot hold refuses the file, is
 * left out, or opens as its bytes (uint8); either of the last two is
 * reported in Unheld. A tensor whose offset does not fit its element size
 * is copied (and named in Copied), or refuses the file before any byte is
 * read. */
ERL_NIF_TERM tb_nif_safetensors_open(TB_NIF_PARAMS)
{
    char path[PATH_MAX];
    ERL_NIF_TERM answer;
    selection sel;
    if (!tb_file_get_path(env, argv[0], path, &answer) || !get_options(env, argv, &sel, &answer))
        return answer;
    struct stat st;
    file_header f;
    int fd = open_checked(env, argv, path, &sel, &st, &f, &answer);
    if (fd >= 0) {
        void *file = NULL;
        opening o = {.path_term = argv[0], .fd = fd, .base = NULL, .data_at = 8 + f.header_len, .sel = &sel};
        if (map_whole(env, argv[0], fd, &st, path, &file, &o.base, &answer)) {
            answer = open_result(env, &o, &f.h);
            tb_shim_release(o.base);
        }
        close(fd);
    }
    free(sel.names);
    tb_safetensors_free(&f.h);
    return answer;
}

/* {Name, FormatDtype, Shape, Begin, End, Dtype | nil, Held}: an entry as
 * info answers it (offsets in the data buffer). */
static ERL_NIF_TERM info_entry(ErlNifEnv *env, const tb_safetensors_entry *e)
{
    ERL_NIF_TERM t[7];
    entry_terms(env, e, t);
    t[5] = t[3];
    t[3] = enif_make_uint64(env, (ErlNifUInt64)e->begin);
    t[4] = enif_make_uint64(env, (ErlNifUInt64)e->end);
    t[6] = held(e) ? tb_atoms.true_ : tb_atoms.false_;
    return enif_make_tuple_from_array(env, t, 7);
}

/* (Path) -> {[Entry], [{Key, Value}] | nil, DataStart, FileSize}: the
 * header alone (read, decoded and checked as open does it; the data are
 * neither mapped nor read), its entries in file order (info_entry). */
ERL_NIF_TERM tb_nif_safetensors_info(TB_NIF_PARAMS)
{
    char path[PATH_MAX];
    ERL_NIF_TERM answer;
    if (!tb_file_get_path(env, argv[0], path, &answer))
        return answer;
    struct stat st;
    file_header f;
    int fd = open_header(env, argv[0], path, &st, &f, &answer);
    if (fd >= 0) {
        close(fd);
        ERL_NIF_TERM entries = enif_make_list(env, 0);
        for (size_t i = f.h.count; i-- > 0;)
            entries = enif_make_list_cell(env, info_entry(env, &f.h.entries[i]), entries);
        answer = enif_make_tuple4(env, entries, metadata_term(env, &f.h), enif_make_uint64(env, 8 + f.header_len),
                                  enif_make_uint64(env, f.file_size));
    }
    tb_safetensors_free(&f.h);
    return answer;
}
