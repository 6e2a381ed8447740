/* safetensors_write: tensors written one after another into a temporary
 * file beside the target, which is then renamed over the target: a
 * reader's mapping of the old file stays valid. One tensor at most is held
 * in memory of our own (a strided or device one, copied to host bytes). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tb_fd.h"
#include "tb_file_map.h"
#include "tb_file_terms.h"
#include "tb_nifs.h"
#include "tb_safetensors.h"
#include "tb_safetensors_encode.h"
#include "tb_tensor.h"
#include "tb_term.h"
#include "torch_shim.h"

/* ---- The arguments --------------------------------------------------- */

/* What a file will hold, read from the arguments: every buffer here is
 * released by release_contents, whatever was filled. */
typedef struct {
    unsigned count;
    tb_safetensors_entry *entries; /* in file order */
    tb_tensor_desc *descs;         /* the tensors of the entries */
    tb_safetensors_meta *meta;
    unsigned meta_count;
    int has_meta;
    int64_t *packed; /* the format's shapes of packed dtypes' tensors */
    char *header;
    size_t header_len;
} contents;

static void release_contents(contents *c)
{
    free(c->entries);
    free(c->descs);
    free(c->packed);
    free(c->meta);
    free(c->header);
}

/* One {Name, Tensor} of the list, as the entry of its bytes from *next on. */
static int get_tensor(ErlNifEnv *env, ERL_NIF_TERM pair, tb_safetensors_entry *entry, tb_tensor_desc *d, uint64_t *next,
                      ERL_NIF_TERM *exc)
{
    const ERL_NIF_TERM *nt;
    int arity;
    ErlNifBinary name;
    if (!enif_get_tuple(env, pair, &arity, &nt) || arity != 2 || !enif_inspect_binary(env, nt[0], &name) ||
        !tb_safetensors_valid_utf8((const char *)name.data, name.size) ||
        (name.size == 12 && memcmp(name.data, "__metadata__", 12) == 0)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "tensors",
                               "tensors: %T is not {Name, Tensor} with a UTF-8 name other than __metadata__", pair);
        return 0;
    }
    if (!tb_tensor_arg(env, nt[1], "tensors", d, exc))
        return 0;
    int format = tb_dtype_st_of(d->dtype);
    if (format < 0 || (d->info.ndim == 0 && tb_dtype_st_per_element(format) != 1)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_DTYPE, "tensors", "tensors: %T: dtype %s has no safetensors name%s",
                               nt[0], tb_dtypes[d->dtype].name, format < 0 ? "" : " for a tensor of no dimension");
        return 0;
    }
    if (d->info.ndim > TB_MAX_DIMS) {
        *exc = tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "tensors", "tensors: %T has too many dimensions", nt[0]);
        return 0;
    }
    *entry = (tb_safetensors_entry){.name = {(const char *)name.data, name.size},
                                    .format = format,
                                    .dtype = d->dtype,
                                    .ndim = d->info.ndim,
                                    .shape = d->info.sizes,
                                    .begin = *next,
                                    .end = *next + d->dense_bytes};
    *next += d->dense_bytes;
    return 1;
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

/* The shape in the format's values of each entry of a packed dtype (a
 * float4_e2m1fn_x2 tensor of [2, 3] is F4's [2, 6]), kept in c->packed. */
static int packed_shapes(contents *c)
{
    size_t dims = 0, at = 0;
    for (unsigned i = 0; i < c->count; i++)
        if (tb_dtype_st_per_element(c->entries[i].format) != 1)
            dims += (size_t)c->entries[i].ndim;
    if (dims == 0)
        return 1;
    if (!(c->packed = malloc(dims * sizeof *c->packed)))
        return 0;
    for (unsigned i = 0; i < c->count; i++) {
        tb_safetensors_entry *e = &c->entries[i];
        unsigned per = tb_dtype_st_per_element(e->format);
        if (per == 1)
            continue;
        memcpy(c->packed + at, e->shape, (size_t)e->ndim * sizeof *e->shape);
        c->packed[at + (size_t)e->ndim - 1] *= per;
        e->shape = c->packed + at;
        at += (size_t)e->ndim;
    }
    return 1;
}

/* The tensors (argv[1], a list of c->count), the metadata (argv[2]) and the
 * header they make. */
static int get_contents(ErlNifEnv *env, const ERL_NIF_TERM argv[], contents *c, ERL_NIF_TERM *exc)
{
    c->entries = calloc(c->count ? c->count : 1, sizeof *c->entries);
    c->descs = calloc(c->count ? c->count : 1, sizeof *c->descs);
    c->has_meta = argv[2] != tb_atoms.nil;
    if (!c->entries || !c->descs) {
        *exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "safetensors: out of memory reading the tensors");
        return 0;
    }
    ERL_NIF_TERM head, tail = argv[1];
    uint64_t next = 0;
    for (unsigned i = 0; enif_get_list_cell(env, tail, &head, &tail); i++)
        if (!get_tensor(env, head, &c->entries[i], &c->descs[i], &next, exc))
            return 0;
    if (c->has_meta && !get_meta(env, argv[2], &c->meta, &c->meta_count, exc))
        return 0;
    if (!packed_shapes(c)) {
        *exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "safetensors: out of memory reading the tensors");
        return 0;
    }
    c->header = tb_safetensors_encode(c->entries, c->count, c->meta, c->meta_count, c->has_meta, &c->header_len);
    if (!c->header) {
        *exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "safetensors: out of memory writing the header");
        return 0;
    }
    return 1;
}

/* ---- The file -------------------------------------------------------- */

/* The bytes of one tensor, row-major, appended to fd: 1 when written, 0
 * when not (why says why), -1 when its memory vanished under the read.
 * Contiguous host memory is written as it is: write(2) reads it in the
 * kernel, where a page that vanished is an error (EFAULT), not a signal.
 * Anything else is copied to host bytes first (under the SIGBUS guard for
 * host memory). */
static int write_tensor(int fd, const tb_tensor_desc *d, char *why, size_t why_len)
{
    if (d->dense_bytes == 0)
        return 1;
    if (d->info.device_type == TB_DEVICE_CPU && d->info.is_contiguous) {
        if (tb_fd_write_all(fd, d->info.data, d->dense_bytes))
            return 1;
        snprintf(why, why_len, "%s", strerror(errno));
        return errno == EFAULT ? -1 : 0;
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
    if (!ok && err.vanished)
        ok = -1;
    else if (ok > 0 && !(ok = tb_fd_write_all(fd, bytes, d->dense_bytes)))
        snprintf(why, why_len, "%s", strerror(errno));
    free(bytes);
    return ok;
}

/* The length, the header and the tensors, on the disk: *failed_at is the
 * tensor whose bytes failed (c->count for none), *vanished whether its
 * memory vanished under the read, why says what failed. */
static int write_contents(int fd, const contents *c, unsigned *failed_at, int *vanished, char *why, size_t why_len)
{
    unsigned char prefix[8];
    tb_safetensors_put_prefix(c->header_len, prefix);
    int ok = tb_fd_write_all(fd, prefix, 8) && tb_fd_write_all(fd, c->header, c->header_len);
    if (!ok)
        snprintf(why, why_len, "%s", strerror(errno));
    *failed_at = c->count;
    *vanished = 0;
    for (unsigned i = 0; ok && i < c->count; i++) {
        int wrote = write_tensor(fd, &c->descs[i], why, why_len);
        ok = wrote > 0;
        if (!ok) {
            *failed_at = i;
            *vanished = wrote < 0;
        }
    }
    if (ok && fdatasync(fd) != 0) {
        ok = 0;
        snprintf(why, why_len, "%s", strerror(errno));
    }
    return ok;
}

/* c written to a new name beside path, ours alone (O_EXCL), renamed over
 * path; on failure the new name is removed. */
static int write_file(ErlNifEnv *env, ERL_NIF_TERM path_term, const char *path, const contents *c, ERL_NIF_TERM *exc)
{
    char tmp[PATH_MAX + 64];
    static unsigned long serial;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        int e = errno;
        *exc = tb_raise_error(env, TB_WHY_SYSTEM, "path", "path: %T: cannot create a file beside it: %s", path_term,
                              strerror(e));
        return 0;
    }
    char why[300] = "";
    unsigned failed_at;
    int vanished;
    int ok = write_contents(fd, c, &failed_at, &vanished, why, sizeof why);
    if (close(fd) != 0 && ok) {
        ok = 0;
        snprintf(why, sizeof why, "%s", strerror(errno));
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        snprintf(why, sizeof why, "%s", strerror(errno));
    }
    if (ok)
        return 1;
    unlink(tmp);
    ERL_NIF_TERM name = failed_at < c->count ? tb_file_make_string(env, &c->entries[failed_at].name) : 0;
    if (vanished && !tb_file_map_check(env, &c->descs[failed_at], 1, "tensors", name, exc))
        return 0;
    if (failed_at < c->count)
        *exc = tb_raise_error(env, TB_WHY_SYSTEM, "path", "path: %T: writing tensor %T: %s", path_term, name, why);
    else
        *exc = tb_raise_error(env, TB_WHY_SYSTEM, "path", "path: %T: %s", path_term, why);
    return 0;
}

/* (Path, [{Name, Tensor}], [{Key, Value}] | nil) -> ok. In file order. */
ERL_NIF_TERM tb_nif_safetensors_write(TB_NIF_PARAMS)
{
    char path[PATH_MAX];
    ERL_NIF_TERM answer;
    contents c = {0};
    if (!tb_file_get_path(env, argv[0], path, &answer))
        return answer;
    if (!enif_get_list_length(env, argv[1], &c.count))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "tensors", "tensors: %T is not a list of {Name, Tensor}",
                               argv[1]);
    if (get_contents(env, argv, &c, &answer) && write_file(env, argv[0], path, &c, &answer))
        answer = tb_atoms.ok;
    release_contents(&c);
    return answer;
}
