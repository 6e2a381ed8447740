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

#include "tb_fd.h"
#include "tb_file_header.h"
#include "tb_file_map.h"
#include "tb_file_terms.h"
#include "tb_nifs.h"
#include "tb_safetensors.h"
#include "tb_safetensors_decode.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "torch_shim.h"

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

/* Every dtype asked for is one the linked libtorch holds, unless asked to
 * skip such tensors or open them as bytes. */
static int dtypes_in_libtorch(ErlNifEnv *env, ERL_NIF_TERM path_term, const selection *sel,
                              const tb_safetensors_header *h, ERL_NIF_TERM *exc)
{
    for (size_t i = 0; i < h->count && sel->unheld == UNHELD_REFUSE; i++) {
        const tb_safetensors_entry *e = &h->entries[i];
        if (selected(sel, &e->name) && !tb_file_header_held(e)) {
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
        int is_held = tb_file_header_held(e);
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

/* The file named argv[0], open, its header decoded into f and the names
 * asked for checked against it: the file, or -1 with *exc. */
static int open_checked(ErlNifEnv *env, const ERL_NIF_TERM argv[], const char *path, const selection *sel,
                        struct stat *st, tb_file_header *f, ERL_NIF_TERM *exc)
{
    int fd = tb_file_header_open(env, argv[0], path, st, f, exc);
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
    if (!tb_fd_read_all(o->fd, info.data, (size_t)(e->end - e->begin), (off_t)at)) {
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

/* {Name, FormatDtype, Shape, Dtype | nil}: a tensor the linked libtorch
 * cannot hold. */
static ERL_NIF_TERM unheld_term(ErlNifEnv *env, const tb_safetensors_entry *e)
{
    ERL_NIF_TERM t[4];
    tb_file_header_entry_terms(env, e, t);
    return enif_make_tuple_from_array(env, t, 4);
}

/* The lists open_result makes, from the last entry back. */
typedef struct {
    ERL_NIF_TERM tensors, copied, unheld;
} result_lists;

/* Entry e's tensor (or its report) onto the lists; or the exception. */
static int add_entry(ErlNifEnv *env, const opening *o, const tb_safetensors_entry *e, result_lists *r,
                     ERL_NIF_TERM *exc)
{
    int is_held = tb_file_header_held(e);
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
    return enif_make_tuple4(env, r.tensors, tb_file_header_metadata(env, h), r.copied, r.unheld);
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
    tb_file_header f;
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
