/* A resource type striped over threads. The VM counts the live resources
 * of a type in one shared word, updated on every allocation and release:
 * with one type, busy schedulers making resources take turns on that cache
 * line. A striped type is TB_RTYPE_STRIPES types of the same layout and
 * destructor ("name", "name_1", ...), each thread allocating from its own;
 * a term of any of them is accepted wherever the type is. */
#ifndef TB_RTYPE_H
#define TB_RTYPE_H

#include <erl_nif.h>

#define TB_RTYPE_STRIPES 8 /* TENSOR_BLOB_TENSOR_TYPES of priv/include/tensor_blob.h */

typedef struct {
    ErlNifResourceType *types[TB_RTYPE_STRIPES];
} tb_rtype;

/* Opens (or takes over) every stripe; 0 when one cannot be. */
int tb_rtype_open(ErlNifEnv *env, const char *name, const ErlNifResourceTypeInit *init, ErlNifResourceFlags flags,
                  tb_rtype *out);
/* enif_alloc_resource from this thread's stripe. */
void *tb_rtype_alloc(const tb_rtype *t, size_t size);
/* enif_get_resource accepting any stripe, this thread's first. */
int tb_rtype_get(ErlNifEnv *env, ERL_NIF_TERM term, const tb_rtype *t, void **obj);

#endif
