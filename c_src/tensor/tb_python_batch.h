/* Batches: many tensors that cross one evaluation in one slot
 * (tb_python_batch.c), and their builtins (capsules_from_batch,
 * objects_from_batch, take_many). The NIFs of nif/tb_python.c fill a
 * batch for Python and import the one Python fills; take_tree
 * (tb_python_walk) fills one with a container's tensors and its
 * description. */
#ifndef TB_PYTHON_BATCH_H
#define TB_PYTHON_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "tb_python_api.h"

/* A batch: the words of many managed tensors that cross one evaluation in
 * one slot, whose word is the batch's address (malloc's: even). */
typedef struct {
    size_t n;
    char *desc; /* a container's description (take_tree), or NULL */
    size_t desc_len;
    uintptr_t tagged[];
} tb_python_batch;

/* The most tensors one batch carries. */
#define TB_PYTHON_BATCH_MAX (1u << 20)

/* A batch of n empty words, or NULL. */
tb_python_batch *tb_python_batch_new(size_t n);

/* Releases what a batch still holds, then the batch: our exports
 * (to_python), or Python's tensors (their deleters take the GIL: at once
 * when it is held, else on the release thread). */
void tb_python_batch_free(tb_python_batch *b, int to_python, int held);

/* Sets Python's error about item i of a batch that was refused code
 * (HOLDS_NULL, ODD_ADDRESS or NOT_DLPACK: tb_python_builtin.h). */
void tb_python_batch_refuse(size_t i, int code);

/* capsules_from_batch(k), objects_from_batch(api, k), take_many(items,
 * apis, k). */
extern const tb_python_method_def tb_python_batch_capsules_from_batch_def;
extern const tb_python_method_def tb_python_batch_objects_from_batch_def;
extern const tb_python_method_def tb_python_batch_take_many_def;

#endif
