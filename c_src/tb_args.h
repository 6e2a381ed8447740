/* Decoding and encoding of NIF arguments: shapes, strides, dtypes, devices.
 * Each tb_get_* returns 1 on success; on bad input it returns 0 and sets *exc
 * to the raised exception, naming the field and the value. */
#ifndef TB_ARGS_H
#define TB_ARGS_H

#include <erl_nif.h>

#include "tb_dtype.h"
#include "tb_spec.h"

typedef struct {
    int type; /* TB_DEVICE_* */
    int index;
} tb_device;

int tb_get_shape(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int *ndim, int64_t *shape,
                 ERL_NIF_TERM *exc);
int tb_get_strides(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int ndim, int64_t *strides,
                   ERL_NIF_TERM *exc);
/* Also refuses dtypes the linked libtorch lacks (a tensor_blob error). */
int tb_get_dtype(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, tb_dtype_id *out,
                 ERL_NIF_TERM *exc);
int tb_get_device(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, tb_device *out,
                  ERL_NIF_TERM *exc);
/* A dimension index in [0, ndim). */
int tb_get_dim(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int ndim, int *out,
               ERL_NIF_TERM *exc);

ERL_NIF_TERM tb_make_shape(ErlNifEnv *env, int ndim, const int64_t *shape);
ERL_NIF_TERM tb_make_strides(ErlNifEnv *env, int ndim, const int64_t *strides);
ERL_NIF_TERM tb_make_device(ErlNifEnv *env, int type, int index);
/* The canonical dtype atom of a c10::ScalarType; 0 when it has none. */
int tb_dtype_of_scalar_type(int scalar_type, tb_dtype_id *out);

#endif
