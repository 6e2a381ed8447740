#include "tb_args.h"

#include "tb_nif.h"
#include "torch_shim.h"

int tb_get_shape(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int *ndim, int64_t *shape,
                 ERL_NIF_TERM *exc)
{
    int arity;
    const ERL_NIF_TERM *elems;
    if (!enif_get_tuple(env, term, &arity, &elems)) {
        *exc = tb_raise_badarg(env, "%s: expected a tuple of non-negative integers, got %T", field, term);
        return 0;
    }
    if (arity > TB_MAX_DIMS) {
        *exc = tb_raise_badarg(env, "%s: at most %d dimensions, got %d in %T", field, TB_MAX_DIMS, arity, term);
        return 0;
    }
    for (int i = 0; i < arity; i++) {
        ErlNifSInt64 n;
        if (!enif_get_int64(env, elems[i], &n) || n < 0) {
            *exc = tb_raise_badarg(env, "%s: dimension %d must be a non-negative 64-bit integer, got %T in %T",
                                   field, i, elems[i], term);
            return 0;
        }
        shape[i] = n;
    }
    *ndim = arity;
    return 1;
}

int tb_get_strides(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int ndim, int64_t *strides,
                   ERL_NIF_TERM *exc)
{
    unsigned len;
    if (!enif_get_list_length(env, term, &len)) {
        *exc = tb_raise_badarg(env, "%s: expected a list of non-negative integers, got %T", field, term);
        return 0;
    }
    if (len != (unsigned)ndim) {
        *exc = tb_raise_badarg(env, "%s: expected %d strides (one per dimension), got %u in %T", field, ndim,
                               len, term);
        return 0;
    }
    ERL_NIF_TERM head, tail = term;
    for (int i = 0; enif_get_list_cell(env, tail, &head, &tail); i++) {
        ErlNifSInt64 s;
        if (!enif_get_int64(env, head, &s) || s < 0) {
            *exc = tb_raise_badarg(env, "%s: stride %d must be a non-negative 64-bit integer, got %T in %T",
                                   field, i, head, term);
            return 0;
        }
        strides[i] = s;
    }
    return 1;
}

int tb_get_dtype(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, tb_dtype_id *out, ERL_NIF_TERM *exc)
{
    if (!tb_dtype_of_term(env, term, out)) {
        *exc = tb_raise_badarg(env, "%s: unknown dtype %T", field, term);
        return 0;
    }
    if (!tb_shim_has_scalar_type(tb_dtypes[*out].torch_scalar_type)) {
        *exc = tb_raise_error(env, "%s: dtype %s is not supported by the linked libtorch %s", field,
                              tb_dtypes[*out].name, tb_shim_torch_version());
        return 0;
    }
    return 1;
}

int tb_get_device(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, tb_device *out, ERL_NIF_TERM *exc)
{
    if (term == tb_atoms.cpu) {
        out->type = TB_DEVICE_CPU;
        out->index = 0;
        return 1;
    }
    int arity;
    const ERL_NIF_TERM *elems;
    int index;
    if (enif_get_tuple(env, term, &arity, &elems) && arity == 2 && elems[0] == tb_atoms.cuda &&
        enif_get_int(env, elems[1], &index) && index >= 0 && index < 1024) {
        out->type = TB_DEVICE_CUDA;
        out->index = index;
        return 1;
    }
    *exc = tb_raise_badarg(env, "%s: expected cpu or {cuda, Index}, got %T", field, term);
    return 0;
}

int tb_get_dim(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int ndim, int *out, ERL_NIF_TERM *exc)
{
    if (ndim == 0) {
        *exc = tb_raise_badarg(env, "%s: the tensor has no dimensions (it is a scalar), got %T", field, term);
        return 0;
    }
    if (!enif_get_int(env, term, out) || *out < 0 || *out >= ndim) {
        *exc = tb_raise_badarg(env, "%s: expected a dimension in 0..%d, got %T", field, ndim - 1, term);
        return 0;
    }
    return 1;
}

ERL_NIF_TERM tb_make_shape(ErlNifEnv *env, int ndim, const int64_t *shape)
{
    ERL_NIF_TERM elems[TB_MAX_DIMS];
    for (int i = 0; i < ndim && i < TB_MAX_DIMS; i++)
        elems[i] = enif_make_int64(env, shape[i]);
    return enif_make_tuple_from_array(env, elems, (unsigned)ndim);
}

ERL_NIF_TERM tb_make_strides(ErlNifEnv *env, int ndim, const int64_t *strides)
{
    ERL_NIF_TERM elems[TB_MAX_DIMS];
    for (int i = 0; i < ndim && i < TB_MAX_DIMS; i++)
        elems[i] = enif_make_int64(env, strides[i]);
    return enif_make_list_from_array(env, elems, (unsigned)ndim);
}

ERL_NIF_TERM tb_make_device(ErlNifEnv *env, int type, int index)
{
    if (type == TB_DEVICE_CUDA)
        return enif_make_tuple2(env, tb_atoms.cuda, enif_make_int(env, index));
    return tb_atoms.cpu;
}

int tb_dtype_of_scalar_type(int scalar_type, tb_dtype_id *out)
{
    for (int i = 0; i < TB_DT_COUNT; i++) {
        if (tb_dtypes[i].torch_scalar_type == scalar_type) {
            *out = (tb_dtype_id)i;
            return 1;
        }
    }
    return 0;
}
