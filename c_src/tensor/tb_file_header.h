/* A safetensors file opened for reading, its header decoded, and the
 * errors that name it (tb_file_header.c). */
#ifndef TB_FILE_HEADER_H
#define TB_FILE_HEADER_H

#include <erl_nif.h>
#include <stdint.h>
#include <sys/stat.h>

#include "tb_safetensors.h"

/* A file's header as read: its prefix, its length, the file's size, and
 * the header decoded (h.error says why not). */
typedef struct {
    unsigned char prefix[8];
    uint64_t file_size, header_len;
    tb_safetensors_header h;
} tb_file_header;

/* The file named path_term (path), open and its header read into f: the
 * file, or -1 with *exc. Either way f->h holds what was decoded
 * (tb_safetensors_free). */
int tb_file_header_open(ErlNifEnv *env, ERL_NIF_TERM path_term, const char *path, struct stat *st, tb_file_header *f,
                        ERL_NIF_TERM *exc);

/* 1 when the linked libtorch holds the entry's values: the format's dtype
 * has a dtype of the table, and libtorch has that one. */
int tb_file_header_held(const tb_safetensors_entry *e);

/* An entry's name, its format's dtype, its shape as the file gives it and
 * its dtype of the table (or nil), into t[0..3]. */
void tb_file_header_entry_terms(ErlNifEnv *env, const tb_safetensors_entry *e, ERL_NIF_TERM t[4]);

/* The header's metadata as [{Key, Value}], or nil. */
ERL_NIF_TERM tb_file_header_metadata(ErlNifEnv *env, const tb_safetensors_header *h);

#endif
