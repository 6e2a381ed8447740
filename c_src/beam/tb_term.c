#include "tb_term.h"

#include <stdio.h>
#include <string.h>

#include "torch_shim.h"

static tb_dtype_index dtype_index;

/* The device terms tb_get_device takes, as each language writes them
 * ("cpu or {cuda, Index}", ":cpu or {:cuda, index}"): made from the table
 * at load. */
static char device_forms_erl[256], device_forms_ex[256];

static void device_forms(void)
{
    size_t e = 0, x = 0;
    device_forms_erl[0] = device_forms_ex[0] = 0;
    for (int t = 0; t < TB_DEVICE_COUNT; t++) {
        const char *sep = t == 0 ? "" : t == TB_DEVICE_COUNT - 1 ? " or " : ", ";
        const char *n = tb_devices[t].name;
        if (tb_devices[t].indexed) {
            e += snprintf(device_forms_erl + e, sizeof device_forms_erl - e, "%s{%s, Index}", sep, n);
            x += snprintf(device_forms_ex + x, sizeof device_forms_ex - x, "%s{:%s, index}", sep, n);
        } else {
            e += snprintf(device_forms_erl + e, sizeof device_forms_erl - e, "%s%s", sep, n);
            x += snprintf(device_forms_ex + x, sizeof device_forms_ex - x, "%s:%s", sep, n);
        }
    }
}

static tb_dtype_key intern_atom(const char *name, void *env)
{
    return (tb_dtype_key)enif_make_atom(env, name);
}

void tb_term_load(ErlNifEnv *env)
{
    tb_raise_load(env);
    tb_atom_load(env);
    device_forms();
    tb_dtype_index_build(&dtype_index, intern_atom, env);
}

int tb_dtype_of_term(ErlNifEnv *env, ERL_NIF_TERM term, tb_dtype_id *out)
{
    if (enif_is_atom(env, term))
        return tb_dtype_find_name(&dtype_index, (tb_dtype_key)term, out);
    int arity;
    const ERL_NIF_TERM *elems;
    unsigned long bits;
    return enif_get_tuple(env, term, &arity, &elems) && arity == 2 && enif_is_atom(env, elems[0]) &&
           enif_get_ulong(env, elems[1], &bits) && tb_dtype_find_nx(&dtype_index, (tb_dtype_key)elems[0], bits, out);
}

ERL_NIF_TERM tb_raise_layout(ErlNifEnv *env, const char *ptr_field, const tb_layout *l, tb_layout_result r,
                             const char *dtype_name, const char *suffix)
{
    const char *text = tb_layout_status_text(r.status);
    switch (r.status) {
    case TB_LAYOUT_NULL_POINTER:
    case TB_LAYOUT_MISALIGNED:
        return tb_raise_badarg(env, r.status == TB_LAYOUT_MISALIGNED ? TB_WHY_MISALIGNED : TB_WHY_BAD_VALUE, ptr_field,
                               "%s: %s (%s %lu, dtype %s, element size %u)%s", ptr_field, text, ptr_field,
                               (unsigned long)l->ptr, dtype_name, (unsigned)l->element_size, suffix);
    case TB_LAYOUT_PTR_OVERFLOW:
        return tb_raise_badarg(env, TB_WHY_OUT_OF_EXTENT, ptr_field,
                               "%s: %s (%s %lu + %lu bytes, shape %T, strides %T)%s", ptr_field, text, ptr_field,
                               (unsigned long)l->ptr, (unsigned long)r.byte_size, tb_make_shape(env, l->ndim, l->shape),
                               tb_make_strides(env, l->ndim, l->strides), suffix);
    case TB_LAYOUT_NEGATIVE_STRIDE:
    case TB_LAYOUT_EXTENT_OVERFLOW:
        return tb_raise_badarg(env, TB_WHY_BAD_STRIDES, "strides", "strides: %s for shape %T and strides %T%s", text,
                               tb_make_shape(env, l->ndim, l->shape), tb_make_strides(env, l->ndim, l->strides),
                               suffix);
    default:
        return tb_raise_badarg(env, TB_WHY_BAD_SHAPE, "shape", "shape: %s in %T%s", text,
                               tb_make_shape(env, l->ndim, l->shape), suffix);
    }
}

int tb_get_shape(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int *ndim, int64_t *shape, ERL_NIF_TERM *exc)
{
    int arity;
    const ERL_NIF_TERM *elems;
    if (!enif_get_tuple(env, term, &arity, &elems)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_SHAPE, field, "%s: expected a tuple of non-negative integers, got %T",
                               field, term);
        return 0;
    }
    if (arity > TB_MAX_DIMS) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_SHAPE, field, "%s: at most %d dimensions, got %d in %T", field,
                               TB_MAX_DIMS, arity, term);
        return 0;
    }
    for (int i = 0; i < arity; i++) {
        ErlNifSInt64 n;
        if (!enif_get_int64(env, elems[i], &n) || n < 0) {
            *exc = tb_raise_badarg(env, TB_WHY_BAD_SHAPE, field,
                                   "%s: dimension %d must be a non-negative 64-bit integer, got %T in %T", field, i,
                                   elems[i], term);
            return 0;
        }
        shape[i] = n;
    }
    *ndim = arity;
    return 1;
}

int tb_get_strides(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int ndim, int64_t *strides, ERL_NIF_TERM *exc)
{
    unsigned len;
    if (!enif_get_list_length(env, term, &len)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_STRIDES, field, "%s: expected a list of non-negative integers, got %T",
                               field, term);
        return 0;
    }
    if (len != (unsigned)ndim) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_STRIDES, field,
                               "%s: expected %d strides (one per dimension), got %u in %T; strides left from "
                               "another shape (a blob's, reshaped) can be dropped for row-major ones: %C",
                               field, ndim, len, term, "Blob#{strides => undefined}", "%{blob | strides: nil}");
        return 0;
    }
    ERL_NIF_TERM head, tail = term;
    for (int i = 0; enif_get_list_cell(env, tail, &head, &tail); i++) {
        ErlNifSInt64 s;
        if (!enif_get_int64(env, head, &s) || s < 0) {
            *exc = tb_raise_badarg(env, TB_WHY_BAD_STRIDES, field,
                                   "%s: stride %d must be a non-negative 64-bit integer, got %T in %T", field, i, head,
                                   term);
            return 0;
        }
        strides[i] = s;
    }
    return 1;
}

int tb_get_dtype(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, tb_dtype_id *out, ERL_NIF_TERM *exc)
{
    if (!tb_dtype_of_term(env, term, out)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_DTYPE, field, "%s: unknown dtype %T", field, term);
        return 0;
    }
    if (!tb_shim_has_scalar_type(tb_dtypes[*out].torch_scalar_type)) {
        *exc = tb_raise_error(env, TB_WHY_UNSUPPORTED, field, "%s: dtype %s is not supported by the linked libtorch %s",
                              field, tb_dtypes[*out].name, tb_shim_torch_version());
        return 0;
    }
    return 1;
}

int tb_get_device(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, tb_device *out, ERL_NIF_TERM *exc)
{
    /* A device type that is not indexed is its atom; an indexed one {Type, Index}. */
    int arity;
    const ERL_NIF_TERM *elems;
    int index;
    for (int type = 0; type < TB_DEVICE_COUNT; type++)
        if (term == tb_atoms.devices[type] && !tb_devices[type].indexed) {
            *out = (tb_device){type, 0};
            return 1;
        }
    if (enif_get_tuple(env, term, &arity, &elems) && arity == 2 && enif_get_int(env, elems[1], &index) && index >= 0 &&
        index < 1024) {
        for (int type = 0; type < TB_DEVICE_COUNT; type++)
            if (tb_devices[type].indexed && elems[0] == tb_atoms.devices[type]) {
                *out = (tb_device){type, index};
                return 1;
            }
    }
    *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, field, "%s: expected %C, got %T", field, device_forms_erl,
                           device_forms_ex, term);
    return 0;
}

int tb_get_dim(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int ndim, int *out, ERL_NIF_TERM *exc)
{
    if (ndim == 0) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, field,
                               "%s: the tensor has no dimensions (it is a scalar), got %T", field, term);
        return 0;
    }
    if (!enif_get_int(env, term, out) || *out < 0 || *out >= ndim) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, field, "%s: expected a dimension in 0..%d, got %T", field,
                               ndim - 1, term);
        return 0;
    }
    return 1;
}

int tb_get_boolean(ERL_NIF_TERM term, int *out)
{
    if (term == tb_atoms.true_ || term == tb_atoms.false_) {
        *out = term == tb_atoms.true_;
        return 1;
    }
    return 0;
}

/* An optional key's value: nil and undefined mean "use the default". */
static int overrides_default(ERL_NIF_TERM value)
{
    return value != tb_atoms.nil && value != tb_atoms.undefined;
}

/* A required key of a spec map; `name` is the key's, which leads the
 * message as every field name does (as text, never as an atom term). */
static int get_key(ErlNifEnv *env, ERL_NIF_TERM spec, ERL_NIF_TERM key, const char *name, ERL_NIF_TERM *value,
                   ERL_NIF_TERM *exc)
{
    if (enif_get_map_value(env, spec, key, value))
        return 1;
    *exc = tb_raise_badarg(env, TB_WHY_MISSING, name, "%s: missing key in blob spec %T", name, spec);
    return 0;
}

int tb_get_spec_map(ErlNifEnv *env, ERL_NIF_TERM map, tb_spec *out, ERL_NIF_TERM *exc)
{
    tb_spec_terms t;
    if (!enif_is_map(env, map)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "spec", "spec: expected a map with ptr, shape and dtype, got %T",
                               map);
        return 0;
    }
    if (!get_key(env, map, tb_atoms.ptr, "ptr", &t.ptr, exc) ||
        !get_key(env, map, tb_atoms.shape, "shape", &t.shape, exc) ||
        !get_key(env, map, tb_atoms.dtype, "dtype", &t.dtype, exc))
        return 0;
    if (!enif_get_map_value(env, map, tb_atoms.strides, &t.strides))
        t.strides = tb_atoms.undefined;
    if (!enif_get_map_value(env, map, tb_atoms.device, &t.device))
        t.device = tb_atoms.undefined;
    return tb_get_spec(env, &t, out, exc);
}

int tb_get_spec(ErlNifEnv *env, const tb_spec_terms *t, tb_spec *out, ERL_NIF_TERM *exc)
{
    tb_layout *l = &out->l;
    ErlNifUInt64 ptr;
    if (!enif_get_uint64(env, t->ptr, &ptr)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "ptr", "ptr: expected a non-negative integer address, got %T",
                               t->ptr);
        return 0;
    }
    l->ptr = ptr;
    if (!tb_get_shape(env, t->shape, "shape", &l->ndim, l->shape, exc) ||
        !tb_get_dtype(env, t->dtype, "dtype", &out->dtype, exc))
        return 0;
    l->element_size = tb_dtypes[out->dtype].element_size;
    if (overrides_default(t->strides)) {
        if (!tb_get_strides(env, t->strides, "strides", l->ndim, l->strides, exc))
            return 0;
    } else if (!tb_row_major_strides(l->ndim, l->shape, l->strides)) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_SHAPE, "shape", "shape: the number of elements overflows 64 bits in %T",
                               tb_make_shape(env, l->ndim, l->shape));
        return 0;
    }
    out->device = (tb_device){TB_DEVICE_CPU, 0}; /* the default of an absent device */
    if (overrides_default(t->device) && !tb_get_device(env, t->device, "device", &out->device, exc))
        return 0;
    out->r = tb_layout_check(l);
    if (out->r.status != TB_LAYOUT_OK) {
        *exc = tb_raise_layout(env, "ptr", l, out->r, tb_dtypes[out->dtype].name, "");
        return 0;
    }
    /* The host's memory needs nothing of libtorch: no call into the shim
     * for it, on every decode. */
    if (tb_device_runtime(out->device.type) != TB_RUNTIME_HOST && !tb_shim_device_built(out->device.type)) {
        const char *name = tb_devices[out->device.type].c10_name;
        *exc = tb_raise_error(env, TB_WHY_UNSUPPORTED, "device",
                              "device %T: this libtorch was built without %s, so %s memory cannot be viewed "
                              "(never as CPU memory); %C",
                              tb_make_device(env, out->device.type, out->device.index), name, name,
                              "the blob's keys hold its metadata", "TensorBlob.CUDA.info/1 reads its metadata");
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
    /* Never another: tb_tensor_describe refuses a tensor on a device type
     * the table lacks, and every other device here was read from it. */
    if (!tb_device_valid(type))
        return tb_atoms.unknown;
    if (!tb_devices[type].indexed)
        return tb_atoms.devices[type];
    return enif_make_tuple2(env, tb_atoms.devices[type], enif_make_int(env, index));
}

ERL_NIF_TERM tb_make_string(ErlNifEnv *env, const char *s)
{
    ERL_NIF_TERM bin;
    size_t n = strlen(s);
    memcpy(enif_make_new_binary(env, n, &bin), s, n);
    return bin;
}
