/* A file mapped privately (its pages copied on write: the file is never
 * written through a mapping) as one storage, TB_MEMORY_FILE, that
 * remembers which version of which file it is: what safetensors_open's
 * tensors share, and what file_view maps again on another node of this
 * host (which refuses a file that changed). */
#ifndef TB_FILE_MAP_H
#define TB_FILE_MAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <erl_nif.h>

#include "tb_storage.h"
#include "tb_tensor.h"
#include "torch_shim.h"

/* Which version of a file was mapped. */
typedef struct {
    uint64_t dev, ino, size;
    int64_t mtime_sec, mtime_nsec;
} tb_file_identity;

tb_file_identity tb_file_identity_of(const struct stat *st);
int tb_file_same_identity(const tb_file_identity *a, const tb_file_identity *b);

/* One private mapping of a file: the storage of every tensor over it. */
typedef struct {
    tb_storage header;   /* TB_MEMORY_FILE */
    tb_range mapping;    /* registered while mapped */
    uint64_t file_at;    /* the file offset the mapping starts at */
    tb_file_identity id; /* the file, as it was when mapped */
    char *path;          /* its absolute name then, or NULL */
} tb_file_map;

/* Maps length bytes of fd (whose fstat is st, named path) from at
 * (page-aligned) privately, as a storage that remembers which file it is;
 * *data is where. NULL with *error (an errno). */
tb_file_map *tb_file_map_open(int fd, const struct stat *st, const char *path, uint64_t at, size_t length, void **data,
                              int *error);

/* The map s is, when this build made it (a hot upgrade keeps an older
 * build's tensors, whose storage has other fields), else NULL. */
const tb_file_map *tb_file_map_of(const tb_storage *s);

/* The length bytes of m at data, as a flat byte tensor that owns m: m is
 * released with the tensor's storage, or at once if this fails. */
int tb_file_map_bytes(tb_file_map *m, void *data, size_t length, tb_shim_tensor **out, tb_shim_error *err);

/* A tensor over a mapped file whose file was truncated under the mapping
 * (a touch of a page past its new end raises SIGBUS, which the guard of
 * every copy turns into an error). after_fault: a touch of d's memory
 * faulted already, so any file map under it is reported (its size now
 * where its name still holds it); else only a file its name still holds
 * and that is now shorter than d needs (a DLPack export, whose consumer
 * reads without our guard). 0 with *exc, "Argument: [tensor Name: ]its
 * file Path was truncated while mapped (it has N bytes; the tensor needs
 * up to M)" (gone, about argument; name 0 for none); 1 when d's memory is
 * no file map, or its file is whole. */
int tb_file_map_check(ErlNifEnv *env, const tb_tensor_desc *d, int after_fault, const char *argument, ERL_NIF_TERM name,
                      ERL_NIF_TERM *exc);

#endif
