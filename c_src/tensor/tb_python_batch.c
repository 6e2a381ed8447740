/* Batches: many tensors in one slot, and their builtins
 * (tb_python_batch.h). */
#include "tb_python_batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tb_dlpack_export.h"
#include "tb_python_builtin.h"
#include "tb_python_exchange.h"
#include "tb_slots.h"
#include "tb_state.h"

static tb_python_api_table *const py = &tb_python_api;

tb_python_batch *tb_python_batch_new(size_t n)
{
    tb_python_batch *b = calloc(1, sizeof *b + n * sizeof b->tagged[0]);
    if (b)
        b->n = n;
    return b;
}

void tb_python_batch_free(tb_python_batch *b, int to_python, int held)
{
    for (size_t i = 0; i < b->n; i++) {
        uintptr_t t = b->tagged[i];
        if (t && (to_python || held))
            tb_dlpack_release(tb_python_builtin_managed(t), (int)(t & 1));
        else if (t)
            tb_dlpack_release_later(tb_python_builtin_managed(t), (int)(t & 1), 1);
    }
    free(b->desc);
    free(b);
}

/* The batch in slot k, taken out of it; NULL with Python's error set. */
static tb_python_batch *take_batch(unsigned k)
{
    tb_python_batch *b = (tb_python_batch *)tb_slot_take(&tb_library_state->python_slots, k);
    if (!b)
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: the slot holds no batch (taken already, or closed)");
    return b;
}

/* A Python list of what make(b's i-th word, api) makes of each word of a
 * batch to Python, which takes the word over (on failure too); the batch
 * freed. NULL with Python's error set. */
static void *batch_to_list(tb_python_batch *b, const tb_DLPackExchangeAPI *api,
                           void *(*make)(uintptr_t, const tb_DLPackExchangeAPI *))
{
    void *list = py->PyList_New((ssize_t)b->n);
    for (size_t i = 0; list && i < b->n; i++) {
        uintptr_t t = b->tagged[i];
        b->tagged[i] = 0;
        void *item = make(t, api);
        if (!item) {
            py->Py_DecRef(list); /* the items made release theirs */
            list = NULL;
        } else
            py->PyList_SetItem(list, (ssize_t)i, item);
    }
    tb_python_batch_free(b, 1, 1);
    return list;
}

static void *capsule_of_word(uintptr_t t, const tb_DLPackExchangeAPI *api)
{
    (void)api;
    return tb_python_builtin_to_capsule(t);
}

static void *object_of_word(uintptr_t t, const tb_DLPackExchangeAPI *api)
{
    void *object = NULL;
    if (!(t & 1)) {
        tb_dlpack_release(tb_python_builtin_managed(t), 0);
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: the batch holds a legacy export");
        return NULL;
    }
    if (!tb_python_exchange_succeeded(api->managed_tensor_to_py_object_no_sync(tb_python_builtin_managed(t), &object),
                                      "managed_tensor_to_py_object_no_sync"))
        return NULL;
    if (!object)
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: the producer made no object and set no error");
    return object;
}

/* capsules_from_batch(k): a list of capsules over the exports of the
 * batch in slot k, named for what each holds, with our destructor. */
static void *python_capsules_from_batch(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    tb_python_batch *b;
    if (!tb_python_builtin_enter(args, nargs, 1, &k) || !(b = take_batch(k)))
        return NULL;
    return batch_to_list(b, NULL, capsule_of_word);
}

/* objects_from_batch(api, k): a list of the producer's objects over the
 * versioned exports of the batch in slot k, made by the table of api
 * (checked first). */
static void *python_objects_from_batch(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    tb_python_batch *b;
    if (!tb_python_builtin_enter(args, nargs, 2, &k))
        return NULL;
    const tb_DLPackExchangeAPI *api = tb_python_exchange_api(args[0]);
    if (!api || !(b = take_batch(k)))
        return NULL;
    return batch_to_list(b, api, object_of_word);
}

void tb_python_batch_refuse(size_t i, int code)
{
    char message[240];
    const char *what = code == TB_PYTHON_HOLDS_NULL ? "a managed tensor at NULL"
                       : code == TB_PYTHON_ODD_ADDRESS
                           ? "a managed tensor at an odd address"
                           : "neither an unused DLPack capsule nor an object whose type's " TB_DLPACK_EXCHANGE_API_ATTR
                             " is a PyCapsule named \"" TB_DLPACK_EXCHANGE_API_NAME "\"";
    snprintf(message, sizeof message, "tensor_blob: item %zu of the batch: %s", i, what);
    py->PyErr_SetString(py->PyExc_ValueError, message);
}

/* Fills b from the lists items and apis: each item an unused DLPack
 * capsule, or an object whose type's table is the api beside it. 1, or 0
 * with Python's error set, what was taken released (the GIL is held). */
static int fill_batch(tb_python_batch *b, void *items, void *apis)
{
    if (py->PyList_Size(items) != (ssize_t)b->n || py->PyList_Size(apis) != (ssize_t)b->n) {
        if (!py->PyErr_Occurred())
            py->PyErr_SetString(py->PyExc_TypeError, "tensor_blob: take_many wants two lists as long as the batch");
        return 0;
    }
    for (size_t i = 0; i < b->n; i++) {
        void *item = py->PyList_GetItem(items, (ssize_t)i);
        int code = tb_python_builtin_from_capsule(item, &b->tagged[i]);
        if (code == TB_PYTHON_NOT_DLPACK &&
            py->PyCapsule_IsValid(py->PyList_GetItem(apis, (ssize_t)i), TB_DLPACK_EXCHANGE_API_NAME))
            code = tb_python_exchange_take(item, py->PyList_GetItem(apis, (ssize_t)i), &b->tagged[i]);
        if (code != TB_PYTHON_TAKEN) {
            if (code != TB_PYTHON_RAISED)
                tb_python_batch_refuse(i, code);
            for (size_t j = 0; j <= i; j++)
                if (b->tagged[j])
                    tb_dlpack_release(tb_python_builtin_managed(b->tagged[j]), (int)(b->tagged[j] & 1));
            memset(b->tagged, 0, b->n * sizeof b->tagged[0]);
            return 0;
        }
    }
    return 1;
}

/* take_many(items, apis, k): a batch filled from the lists (fill_batch),
 * put in the empty slot k. TAKEN, or raises with nothing taken. */
static void *python_take_many(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    if (!tb_python_builtin_enter(args, nargs, 3, &k))
        return NULL;
    /* The slot holds an empty word: the batch is made here, as long as the
     * list of items. */
    ssize_t n = py->PyList_Size(args[0]);
    if (n < 0 || n > (ssize_t)TB_PYTHON_BATCH_MAX) {
        if (!py->PyErr_Occurred())
            py->PyErr_SetString(py->PyExc_ValueError, "tensor_blob: too many tensors for one batch");
        return NULL;
    }
    tb_python_batch *b = tb_python_batch_new((size_t)n);
    if (!b)
        return NULL;
    uintptr_t was = tb_slot_take(&tb_library_state->python_slots, k);
    if (was) { /* not a slot opened for a batch from Python: left as it was */
        free(b);
        tb_slot_put(&tb_library_state->python_slots, k, was);
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: the slot is not an empty one for a batch");
        return NULL;
    }
    int filled = fill_batch(b, args[0], args[1]);
    if (!tb_slot_put(&tb_library_state->python_slots, k, (uintptr_t)b)) {
        tb_python_batch_free(b, 0, 1);
        if (filled)
            py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: the batch's slot was closed");
        return NULL;
    }
    return filled ? py->PyLong_FromLong(TB_PYTHON_TAKEN) : NULL;
}

const tb_python_method_def tb_python_batch_capsules_from_batch_def = {"capsules_from_batch", python_capsules_from_batch,
                                                                      TB_PYTHON_METH_FASTCALL, NULL};
const tb_python_method_def tb_python_batch_objects_from_batch_def = {"objects_from_batch", python_objects_from_batch,
                                                                     TB_PYTHON_METH_FASTCALL, NULL};
const tb_python_method_def tb_python_batch_take_many_def = {"take_many", python_take_many, TB_PYTHON_METH_FASTCALL,
                                                            NULL};
