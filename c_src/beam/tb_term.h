/* The bottom of the NIF: the helpers that read and make terms (shapes,
 * strides, dtypes, devices), over the atoms (tb_atom.h, made once, at
 * load). Every concern includes it; it includes no concern but tb_raise
 * (how errors are raised) and tb_atom.
 *
 * How errors travel: a helper that can fail returns 0 (or NULL) and sets an
 * out-parameter `*exc` to the exception term; the NIF returns that term at
 * once. The term that enif_raise_exception returns is never tested: in a
 * normal emulator it is 0. (scripts/check_c.sh fails CI if code tests one.) */
#ifndef TB_TERM_H
#define TB_TERM_H

#include <erl_nif.h>

#include "tb_atom.h"
#include "tb_device.h"
#include "tb_dtype.h"
#include "tb_layout.h"
#include "tb_raise.h"

/* Makes the atoms (tb_atom.h, tb_raise's too) and the dtype index; called
 * by load and upgrade. */
void tb_term_load(ErlNifEnv *env);

/* The one message for a refused layout: names the pointer (`ptr_field`),
 * strides or shape by the status, and ends with `suffix` (may be ""). */
ERL_NIF_TERM tb_raise_layout(ErlNifEnv *env, const char *ptr_field, const tb_layout *l, tb_layout_result r,
                             const char *dtype_name, const char *suffix);

/* A dtype term: a canonical atom, an alias atom, or an Nx {Kind, Bits}.
 * The lookup is tb_dtype.h's index, keyed by atoms. */
int tb_dtype_of_term(ErlNifEnv *env, ERL_NIF_TERM term, tb_dtype_id *out);

/* Argument decoding. Each returns 1 on success; on bad input 0, with *exc
 * set to the raised exception naming the field and the value. */
int tb_get_shape(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int *ndim, int64_t *shape, ERL_NIF_TERM *exc);
int tb_get_strides(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int ndim, int64_t *strides, ERL_NIF_TERM *exc);
/* Also refuses dtypes the linked libtorch lacks (a tensor_blob error). */
int tb_get_dtype(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, tb_dtype_id *out, ERL_NIF_TERM *exc);
int tb_get_device(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, tb_device *out, ERL_NIF_TERM *exc);
/* A dimension index in [0, ndim). */
int tb_get_dim(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, int ndim, int *out, ERL_NIF_TERM *exc);
int tb_get_boolean(ERL_NIF_TERM term, int *out);

/* A blob spec, decoded: the memory's layout (pointer, shape, strides,
 * element size), its dtype and device, and what tb_layout_check says of it
 * (its byte size). */
typedef struct {
    tb_layout l;
    tb_dtype_id dtype;
    tb_device device;
    tb_layout_result r;
} tb_spec;

/* The terms of a spec, one per field; strides and device may be nil or
 * undefined (their defaults: row-major, the first device type). */
typedef struct {
    ERL_NIF_TERM ptr, shape, dtype, strides, device;
} tb_spec_terms;

/* A spec, decoded in one pass: from a map with ptr, shape and dtype (and
 * optional strides and device; other keys ignored), or from its terms.
 * Refuses, by field, a bad value, a layout tb_layout_check refuses, and a
 * dtype or device the linked libtorch cannot hold. */
int tb_get_spec_map(ErlNifEnv *env, ERL_NIF_TERM map, tb_spec *out, ERL_NIF_TERM *exc);
int tb_get_spec(ErlNifEnv *env, const tb_spec_terms *t, tb_spec *out, ERL_NIF_TERM *exc);

ERL_NIF_TERM tb_make_shape(ErlNifEnv *env, int ndim, const int64_t *shape);
ERL_NIF_TERM tb_make_strides(ErlNifEnv *env, int ndim, const int64_t *strides);
ERL_NIF_TERM tb_make_device(ErlNifEnv *env, int type, int index);
ERL_NIF_TERM tb_make_string(ErlNifEnv *env, const char *s);

#endif
