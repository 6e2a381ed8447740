/* The tensor resource: one strong libtorch reference, dropped by its destructor. */
#ifndef TB_TENSOR_H
#define TB_TENSOR_H

#include <erl_nif.h>

#include "tb_dtype.h"
#include "tb_spec.h"
#include "torch_shim.h"

typedef struct {
    tb_shim_tensor *handle;
} tb_tensor;

int tb_tensor_open_type(ErlNifEnv *env, ErlNifResourceFlags flags);

/* Wraps a handle in a new resource term, taking the handle's reference.
 * On failure the handle is released and an exception is returned. */
ERL_NIF_TERM tb_tensor_make(ErlNifEnv *env, tb_shim_tensor *handle);

/* The tensor behind a resource term, or NULL. */
tb_tensor *tb_tensor_get(ErlNifEnv *env, ERL_NIF_TERM term);

/* The tensor behind a term that is a resource or a %TensorBlob.Tensor{}. */
tb_tensor *tb_tensor_get_any(ErlNifEnv *env, ERL_NIF_TERM term);

long tb_tensor_live(void);

/* Row-major byte count of a tensor's elements. */
uint64_t tb_tensor_dense_bytes(const tb_shim_info *info);

/* Parses a shape and a dtype, and checks that the element count fits;
 * otherwise sets *exc. */
int tb_tensor_get_shape_dtype(ErlNifEnv *env, ERL_NIF_TERM shape_term, ERL_NIF_TERM dtype_term, tb_layout *l,
                              tb_dtype_id *dtype, tb_spec_result *r, ERL_NIF_TERM *exc);

/* The arguments (Binary, Dtype, Shape) of from_binary and its view: a
 * binary whose size is that of Shape of Dtype; otherwise sets *exc. */
int tb_tensor_get_binary_args(ErlNifEnv *env, const ERL_NIF_TERM argv[], ErlNifBinary *bin, tb_layout *l,
                              tb_dtype_id *dtype, tb_spec_result *r, ERL_NIF_TERM *exc);

/* 1 when the memory must not be written through this tensor (a read-only
 * DLPack import, a view of a binary or of a read-only tensor); the reason,
 * for messages. */
int tb_tensor_info_read_only(const tb_shim_info *info);
const char *tb_tensor_read_only_reason(const tb_shim_info *info);

ERL_NIF_TERM tb_nif_zeros(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_from_binary(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_to_binary(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_write(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_narrow(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_transpose(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_shape(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_strides(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_dtype(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_device(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM tb_nif_memory(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
