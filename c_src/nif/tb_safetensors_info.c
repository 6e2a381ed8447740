/* safetensors_info: a file's header alone, read, decoded and checked as
 * safetensors_open does it (tb_file_header.h); the data are neither
 * mapped nor read. */
#define _GNU_SOURCE
#include <limits.h>
#include <unistd.h>

#include "tb_file_header.h"
#include "tb_file_terms.h"
#include "tb_nifs.h"
#include "tb_safetensors_decode.h"
#include "tb_term.h"

/* {Name, FormatDtype, Shape, Begin, End, Dtype | nil, Held}: an entry as
 * info answers it (offsets in the data buffer). */
static ERL_NIF_TERM info_entry(ErlNifEnv *env, const tb_safetensors_entry *e)
{
    ERL_NIF_TERM t[7];
    tb_file_header_entry_terms(env, e, t);
    t[5] = t[3];
    t[3] = enif_make_uint64(env, (ErlNifUInt64)e->begin);
    t[4] = enif_make_uint64(env, (ErlNifUInt64)e->end);
    t[6] = tb_file_header_held(e) ? tb_atoms.true_ : tb_atoms.false_;
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
    tb_file_header f;
    int fd = tb_file_header_open(env, argv[0], path, &st, &f, &answer);
    if (fd >= 0) {
        close(fd);
        ERL_NIF_TERM entries = enif_make_list(env, 0);
        for (size_t i = f.h.count; i-- > 0;)
            entries = enif_make_list_cell(env, info_entry(env, &f.h.entries[i]), entries);
        answer = enif_make_tuple4(env, entries, tb_file_header_metadata(env, &f.h),
                                  enif_make_uint64(env, 8 + f.header_len), enif_make_uint64(env, f.file_size));
    }
    tb_safetensors_free(&f.h);
    return answer;
}
