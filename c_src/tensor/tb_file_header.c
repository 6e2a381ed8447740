/* A safetensors file opened for reading: only a regular file, its header
 * read with pread into memory of our own and decoded in one bounded pass
 * (tb_safetensors_decode.h), and the errors that name the file: what it is
 * instead (a directory, a FIFO, text, JSON), how many bytes it has and its
 * header needs. Shared by the NIFs that open a file and read its header
 * alone; the terms of its entries and metadata. */
#define _GNU_SOURCE
#include "tb_file_header.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tb_fd.h"
#include "tb_file_terms.h"
#include "tb_raise.h"
#include "tb_safetensors_decode.h"
#include "tb_term.h"
#include "torch_shim.h"

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

/* The header of the file open at fd, of f->file_size bytes, read and
 * decoded into f. */
static void read_header(int fd, tb_file_header *f)
{
    tb_safetensors_header *h = &f->h;
    memset(f->prefix, 0, sizeof f->prefix);
    f->header_len = 0;
    tb_safetensors_error pe = f->file_size < 8 ? TB_ST_TOO_SMALL
                              : tb_fd_read_all(fd, f->prefix, 8, 0)
                                  ? tb_safetensors_prefix(f->prefix, f->file_size, &f->header_len)
                                  : TB_ST_TOO_SMALL;
    memset(h, 0, sizeof *h);
    char *json = NULL;
    if (pe != TB_ST_OK) {
        h->error = pe;
    } else if (!(json = malloc(f->header_len ? f->header_len : 1))) {
        h->error = TB_ST_NO_MEMORY;
    } else if (!tb_fd_read_all(fd, json, f->header_len, 8)) {
        h->error = TB_ST_HEADER_PAST_END; /* shrunk since fstat */
    } else {
        tb_safetensors_decode(json, f->header_len, f->file_size - 8 - f->header_len, h);
    }
    free(json);
}

/* What a file whose length prefix is refused starts with: "JSON" (a '{'
 * or '[' after spaces), "text" (8 printable bytes), or NULL. */
static const char *starts_with(const tb_file_header *f)
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
static uint64_t claimed_length(const tb_file_header *f)
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
static int cut_or_text(ErlNifEnv *env, ERL_NIF_TERM path_term, const tb_file_header *f, ERL_NIF_TERM *exc)
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
static ERL_NIF_TERM header_error(ErlNifEnv *env, ERL_NIF_TERM path_term, const tb_file_header *f)
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

/* The file named path_term (path), open and its header read into f: the
 * file, or -1 with *exc. Either way f->h holds what was decoded
 * (tb_safetensors_free). */
int tb_file_header_open(ErlNifEnv *env, ERL_NIF_TERM path_term, const char *path, struct stat *st, tb_file_header *f,
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

/* 1 when the linked libtorch holds the entry's values: the format's dtype
 * has a dtype of the table, and libtorch has that one. */
int tb_file_header_held(const tb_safetensors_entry *e)
{
    return e->dtype != TB_DT_NONE && tb_shim_has_scalar_type(tb_dtypes[e->dtype].torch_scalar_type);
}

/* An entry's name, its format's dtype, its shape as the file gives it
 * and its dtype of the table (or nil), into t[0..3]. */
void tb_file_header_entry_terms(ErlNifEnv *env, const tb_safetensors_entry *e, ERL_NIF_TERM t[4])
{
    ERL_NIF_TERM dims[TB_MAX_DIMS];
    for (int d = 0; d < e->ndim; d++)
        dims[d] = enif_make_uint64(env, (ErlNifUInt64)e->shape[d]);
    t[0] = tb_file_make_string(env, &e->name);
    t[1] = tb_make_string(env, tb_st_dtypes[e->format].name);
    t[2] = enif_make_tuple_from_array(env, dims, (unsigned)e->ndim);
    t[3] = e->dtype == TB_DT_NONE ? tb_atoms.nil : tb_atoms.dtypes[e->dtype];
}

ERL_NIF_TERM tb_file_header_metadata(ErlNifEnv *env, const tb_safetensors_header *h)
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
