/* The atoms: one list, made once at load (and at upgrade) into tb_atoms.
 * An atom is spelled once, in TB_ATOMS (its field is its name) or in
 * TB_ATOMS_SPELLED (a field for a name that is no C identifier); adding
 * one is its line here. The tables' atoms (dtypes, device types, DLPack
 * devices) are made from those tables. */
#ifndef TB_ATOM_H
#define TB_ATOM_H

#include <erl_nif.h>

#include "tb_device.h"
#include "tb_dtype.h"

#define TB_ATOMS(X)                                                                         \
    X(ok) /* answers */                                                                     \
    X(nil)                                                                                  \
    X(all)                                                                                  \
    X(refuse) /* safetensors_open's answers to a dtype the linked libtorch lacks */         \
    X(skip)                                                                                 \
    X(bytes)                                                                                \
    X(copy) /* and to a tensor whose offset does not fit its element size (or refuse) */    \
    X(undefined)                                                                            \
    X(ptr) /* blob keys */                                                                  \
    X(shape)                                                                                \
    X(strides)                                                                              \
    X(dtype)                                                                                \
    X(device)                                                                               \
    X(ref)                                                                                  \
    X(read_only) /* options and devices */                                                  \
    X(cpu)                                                                                  \
    X(cuda)                                                                                 \
    X(cuda_host) /* what a runtime says memory is */                                        \
    X(cuda_managed)                                                                         \
    X(device_type)                                                                          \
    X(unknown)                                                                              \
    X(tensors) /* stats/0's keys */                                                         \
    X(pins)                                                                                 \
    X(capsules)                                                                             \
    X(binaries)                                                                             \
    X(deferred)                                                                             \
    X(versioned) /* DLPack kinds */                                                         \
    X(legacy)                                                                               \
    X(writable)                                                                             \
    X(unsafe_address)                                                                       \
    X(tensor)         /* the BlobView struct's key */                                       \
    X(not_contiguous) /* why to_binary_view made no view */                                 \
    X(shared_memory)                                                                        \
    X(to_binary) /* who asks to_binary_view for a binary (tb_storage.h's makers) */         \
    X(node_pack)                                                                            \
    X(to_nx)                                                                                \
    X(frozen)   /* why writable/1 says no */                                                \
    X(not_file) /* why a file's tensor cannot travel as its file (file_source) */           \
    X(written)                                                                              \
    X(changed)                                                                              \
    X(badarg) /* an error: {Kind, #{reason, argument, message => Segments}} (tb_raise.h) */ \
    X(tensor_blob)                                                                          \
    X(reason)                                                                               \
    X(argument)                                                                             \
    X(none)                                                                                 \
    X(other) /* what python_slot_export_tree does not describe */                           \
    X(message)                                                                              \
    X(term)                                                                                 \
    X(code)

#define TB_ATOMS_SPELLED(X)                      \
    X(true_, "true")                             \
    X(false_, "false")                           \
    X(struct_, "__struct__")                     \
    X(tensor_struct, "Elixir.TensorBlob.Tensor") \
    X(blob_view_struct, "Elixir.TensorBlob.BlobView")

typedef struct {
#define TB_ATOM_FIELD(name) ERL_NIF_TERM name;
#define TB_ATOM_SPELLED_FIELD(field, text) ERL_NIF_TERM field;
    TB_ATOMS(TB_ATOM_FIELD)
    TB_ATOMS_SPELLED(TB_ATOM_SPELLED_FIELD)
#undef TB_ATOM_FIELD
#undef TB_ATOM_SPELLED_FIELD
    ERL_NIF_TERM dtypes[TB_DT_COUNT];
    ERL_NIF_TERM devices[TB_DEVICE_COUNT];               /* the device table's atoms */
    ERL_NIF_TERM dlpack_devices[TB_DLPACK_DEVICE_COUNT]; /* the names of the DLPack devices an import takes */
} tb_atom_table;

extern tb_atom_table tb_atoms;

/* Makes every atom above; called by load and upgrade. */
void tb_atom_load(ErlNifEnv *env);

#endif
