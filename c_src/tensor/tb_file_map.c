#define _GNU_SOURCE
#include "tb_file_map.h"

#include <errno.h>
#include <stdlib.h>

#include "tb_device.h"
#include "tb_dtype.h"

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
