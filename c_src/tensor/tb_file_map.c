#define _GNU_SOURCE
#include "tb_file_map.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "tb_device.h"
#include "tb_dtype.h"
#include "tb_raise.h"
#include "tb_term.h"

tb_file_identity tb_file_identity_of(const struct stat *st)
{
    return (tb_file_identity){(uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
                              (int64_t)st->st_mtim.tv_sec, (int64_t)st->st_mtim.tv_nsec};
}

int tb_file_same_identity(const tb_file_identity *a, const tb_file_identity *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_sec == b->mtime_sec &&
           a->mtime_nsec == b->mtime_nsec;
}

static void release_map(tb_storage *s)
{
    tb_file_map *m = (tb_file_map *)s;
    tb_storage_unmap_file(&m->mapping);
    free(m->path);
    free(m);
}

tb_file_map *tb_file_map_open(int fd, const struct stat *st, const char *path, uint64_t at, size_t length, void **data,
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
    m->id = tb_file_identity_of(st);
    m->path = realpath(path, NULL); /* none: the tensors are copied to other nodes */
    return m;
}

const tb_file_map *tb_file_map_of(const tb_storage *s)
{
    if (!s || s->kind != TB_MEMORY_FILE || s->free != release_map)
        return NULL;
    return (const tb_file_map *)s;
}

int tb_file_map_bytes(tb_file_map *m, void *data, size_t length, tb_shim_tensor **out, tb_shim_error *err)
{
    int64_t size = (int64_t)length, one = 1;
    return tb_shim_from_blob(data, 1, &size, &one, tb_dtypes[TB_DT_UINT8].torch_scalar_type, TB_DEVICE_CPU, 0,
                             &m->header, tb_storage_release, out, err);
}

/* What became of the file under m: whether its name still holds it, its
 * size now, and the file offset a tensor's bytes reach (its span's end). */
typedef struct {
    int same;
    uint64_t has, needs;
} file_cut;

static file_cut cut_of(const tb_file_map *m, uintptr_t hi)
{
    file_cut c = {0, 0, m->file_at + (uint64_t)(hi - m->mapping.lo)};
    struct stat st;
    if (m->path && stat(m->path, &st) == 0 && (uint64_t)st.st_dev == m->id.dev && (uint64_t)st.st_ino == m->id.ino) {
        c.same = 1;
        c.has = (uint64_t)st.st_size;
    }
    return c;
}

/* The refusal of a tensor over m, whose file is as c says (a touch
 * faulted, or its file is shorter than it needs). */
static ERL_NIF_TERM raise_cut(ErlNifEnv *env, const tb_file_map *m, const file_cut *c, const char *argument,
                              ERL_NIF_TERM name)
{
    ERL_NIF_TERM path = m->path ? tb_make_string(env, m->path) : tb_atoms.nil;
    char why[160];
    const char *what = "was truncated while mapped";
    if (!c->same)
        snprintf(why, sizeof why, "its name holds another file now, or none; the tensor needs up to %llu bytes of it",
                 (unsigned long long)c->needs);
    else if (c->has < c->needs)
        snprintf(why, sizeof why, "it has %llu bytes; the tensor needs up to %llu", (unsigned long long)c->has,
                 (unsigned long long)c->needs);
    else {
        what = "could not supply a page under the mapping";
        snprintf(why, sizeof why, "SIGBUS: it has %llu bytes, as the tensor needs; a read error?",
                 (unsigned long long)c->has);
    }
    if (name)
        return tb_raise_error(env, TB_WHY_GONE, argument, "%s: tensor %T: its file %T %s (%s)", argument, name, path,
                              what, why);
    return tb_raise_error(env, TB_WHY_GONE, argument, "%s: its file %T %s (%s)", argument, path, what, why);
}

int tb_file_map_check(ErlNifEnv *env, const tb_tensor_desc *d, int after_fault, const char *argument, ERL_NIF_TERM name,
                      ERL_NIF_TERM *exc)
{
    const tb_file_map *m = tb_file_map_of(tb_storage_of(&d->info));
    tb_range span;
    if (!m || !tb_storage_span(&d->info, tb_dtypes[d->dtype].element_size, &span))
        return 1;
    file_cut c = cut_of(m, span.hi);
    if (c.same ? c.has >= c.needs && !after_fault : !after_fault)
        return 1;
    *exc = raise_cut(env, m, &c, argument, name);
    return 0;
}
