/* The tensor resource: one strong libtorch reference, dropped by its
 * destructor; the helpers that read a tensor argument and describe it,
 * read a shape and dtype, move a long copy to a dirty scheduler, and make
 * a NIF's result. The NIFs on tensors that use them are
 * nif/tb_tensors.c. */
#ifndef TB_TENSOR_H
#define TB_TENSOR_H

#include <erl_nif.h>

#include "tb_dtype.h"
#include "tb_layout.h"
#include "tb_once.h"
#include "tb_storage.h"
#include "tb_term.h"
#include "torch_shim.h"

/* What an export of a tensor is made of (tb_tensor_exported). */
typedef struct {
    void *data;                     /* the first element */
    const int64_t *sizes, *strides; /* the TensorImpl's own: valid while it lives */
    int ndim;
    tb_dtype_id dtype;
    int device_type; /* a tb_device_type */
    int device_index;
    int read_only; /* its storage's */
} tb_tensor_exported;

typedef struct {
    tb_shim_tensor *handle;
    /* The storage headers of the views that pin this tensor (from_blob
     * with this tensor as owner). Shared by all such views; each view
     * holds a reference to this resource. */
    struct {
        tb_storage writable, read_only;
    } as_owner;
    /* Its description for exports, made once (by the first export to
     * claim it) and read without a lock after. A tensor's sizes, strides,
     * dtype, device and storage never change once it is made (no code here
     * changes a TensorImpl in place: views, slices and transposes are new
     * ones), so it holds for the tensor's life. */
    tb_once exported_once;
    tb_tensor_exported exported;
} tb_tensor;

/* A tensor argument and what it is. */
typedef struct {
    tb_tensor *tensor;
    tb_shim_info info;
    tb_dtype_id dtype;
    uint64_t dense_bytes; /* row-major byte count of the elements */
} tb_tensor_desc;

int tb_tensor_open_type(ErlNifEnv *env, ErlNifResourceFlags flags, ErlNifResourceDynCall *dyncall);

/* Wraps a handle in a new resource term, taking the handle's reference.
 * On failure the handle is released and *exc set. */
int tb_tensor_make(ErlNifEnv *env, tb_shim_tensor *handle, ERL_NIF_TERM *out, ERL_NIF_TERM *exc);
/* The same, for a NIF's return: the term, or the raised exception. */
ERL_NIF_TERM tb_tensor_return(ErlNifEnv *env, tb_shim_tensor *handle);

/* What a shim call that makes a tensor gives back. */
typedef struct {
    tb_shim_tensor *handle;
    tb_shim_error err;
} tb_shim_out;
/* A NIF's return after such a call: the new tensor when `ok`, else it
 * raises "what: the shim's message" (a tensor_blob error). */
ERL_NIF_TERM tb_tensor_result(ErlNifEnv *env, const char *what, int ok, const tb_shim_out *out);
/* The same after a call that allocates a tensor of that shape, dtype and
 * byte count: when the allocation failed, it raises no_memory about the
 * shape, saying what was asked for (libtorch's own text names its source). */
ERL_NIF_TERM tb_tensor_alloc_result(ErlNifEnv *env, const char *what, int ok, const tb_shim_out *out, int ndim,
                                    const int64_t *shape, tb_dtype_id dtype, uint64_t bytes);

/* from_blob's last step: a tensor over the memory a decoded spec
 * describes, whose storage is `storage` (owned from the call on). Unless
 * `proven` (an owner whose extent is known placed it) or empty, the
 * runtime of the spec's device checks the pointer first. */
ERL_NIF_TERM tb_tensor_view(ErlNifEnv *env, const tb_spec *s, tb_storage *storage, int proven);

/* The tensor behind a resource term, a %TensorBlob.Tensor{} or a
 * %TensorBlob.BlobView{}, or NULL. */
tb_tensor *tb_tensor_get(ErlNifEnv *env, ERL_NIF_TERM term);

/* The description of t for an export: its own, made once, or, while
 * another thread makes that, *scratch. NULL when tb_tensor_describe
 * refuses the tensor. */
const tb_tensor_exported *tb_tensor_exported_of(tb_tensor *t, tb_tensor_exported *scratch);

/* The same from a description (scratch filled, and returned). */
const tb_tensor_exported *tb_tensor_exported_from(const tb_tensor_desc *d, tb_tensor_exported *scratch);

/* Describes a handle; 0 when libtorch holds a scalar type the dtype
 * table lacks, or is on a device type the device table lacks (never
 * silently another one). */
int tb_tensor_describe(tb_shim_tensor *handle, tb_tensor_desc *d);

/* Reads argument `term` as a tensor and describes it; otherwise 0 with
 * *exc naming `field`. */
int tb_tensor_arg(ErlNifEnv *env, ERL_NIF_TERM term, const char *field, tb_tensor_desc *d, ERL_NIF_TERM *exc);

/* A row-major shape of a dtype, as zeros, from_binary and ipc take them. */
typedef struct {
    tb_layout layout; /* row-major strides; ptr a stand-in */
    tb_dtype_id dtype;
    tb_layout_result check; /* numel and byte_size */
} tb_dense;

/* Parses a shape and a dtype, and checks that the element count fits;
 * otherwise sets *exc. */
int tb_tensor_get_dense(ErlNifEnv *env, ERL_NIF_TERM shape_term, ERL_NIF_TERM dtype_term, tb_dense *out,
                        ERL_NIF_TERM *exc);

/* The arguments (Binary, Dtype, Shape) of from_binary and its view: a
 * binary whose size is that of Shape of Dtype; otherwise sets *exc. */
int tb_tensor_get_binary_args(ErlNifEnv *env, const ERL_NIF_TERM argv[], ErlNifBinary *bin, tb_dense *out,
                              ERL_NIF_TERM *exc);

/* A bool tensor's bytes are each 0 (false) or 1 (true), as libtorch
 * stores them (any other byte reads as neither, and comparisons with it
 * go wrong): 1 when dtype is not bool or every byte of data is 0 or 1,
 * otherwise sets *exc naming the first other byte. It reads every byte:
 * call it where the NIF would copy them (after tb_reschedule_copy). */
int tb_tensor_check_bool_bytes(ErlNifEnv *env, const char *field, tb_dtype_id dtype, const unsigned char *data,
                               size_t size, ERL_NIF_TERM *exc);

/* Every NIF that copies data runs where its copy belongs: on a dirty CPU
 * scheduler when it copies more than TB_DIRTY_BYTES, on a dirty I/O
 * scheduler whatever the size when a device is involved (the copy waits
 * for the GPU), else at once. The NIF calls this once its arguments are
 * read: 1 with *out set when it rescheduled itself (`self`, with the same
 * arguments) to run there, 0 to go on where it is. */
#define TB_DIRTY_BYTES (256 * 1024)
typedef ERL_NIF_TERM tb_nif_fun(ErlNifEnv *, int, const ERL_NIF_TERM[]);
int tb_reschedule_copy(ErlNifEnv *env, const char *name, uint64_t bytes, int device, tb_nif_fun *self, int argc,
                       const ERL_NIF_TERM argv[], ERL_NIF_TERM *out);

long tb_tensor_live(void);

#endif
