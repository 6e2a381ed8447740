/* What every builtin of the Python door shares, and the builtins of one
 * tensor in a capsule (tb_python_builtin.h). */
#include "tb_python_builtin.h"

#include "tb_dlpack_export.h"
#include "tb_release.h"
#include "tb_slots.h"
#include "tb_state.h"

static tb_python_api_table *const py = &tb_python_api;

/* The capsule names, static: a capsule keeps the pointer to its name. */
static const char name_legacy[] = "dltensor";
static const char name_versioned[] = "dltensor_versioned";
static const char name_used_legacy[] = "used_dltensor";
static const char name_used_versioned[] = "used_dltensor_versioned";

/* A PyCapsule destructor (called with the GIL held): a capsule no consumer
 * took (its name unchanged) releases the managed tensor it holds; a used
 * one (renamed by its consumer, who now owes the deleter) nothing. */
static void python_capsule_destructor(void *capsule)
{
    if (!tb_python_api_bound())
        return;
    if (py->PyCapsule_IsValid(capsule, name_versioned))
        tb_dlpack_release(py->PyCapsule_GetPointer(capsule, name_versioned), 1);
    else if (py->PyCapsule_IsValid(capsule, name_legacy))
        tb_dlpack_release(py->PyCapsule_GetPointer(capsule, name_legacy), 0);
}

int tb_python_builtin_enter(void *const *args, ssize_t nargs, ssize_t expected, unsigned *k)
{
    tb_release_run_held();
    if (nargs != expected) {
        py->PyErr_SetString(py->PyExc_TypeError, "tensor_blob: a slot builtin was given the wrong number of arguments");
        return 0;
    }
    unsigned long number = py->PyLong_AsUnsignedLong(args[expected - 1]);
    if (number < TB_SLOTS) {
        *k = (unsigned)number;
        return 1;
    }
    if (!py->PyErr_Occurred())
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: no such slot");
    return 0;
}

void *tb_python_builtin_to_capsule(uintptr_t word)
{
    void *capsule = py->PyCapsule_New(tb_python_builtin_managed(word), word & 1 ? name_versioned : name_legacy,
                                      python_capsule_destructor);
    if (!capsule) /* Python's error is set (out of memory): ours again */
        tb_dlpack_release(tb_python_builtin_managed(word), (int)(word & 1));
    return capsule;
}

/* capsule_from_slot(k): a new capsule over the export in slot k, named
 * for what it holds, with our destructor. */
static void *python_capsule_from_slot(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    if (!tb_python_builtin_enter(args, nargs, 1, &k))
        return NULL;
    uintptr_t tagged = tb_slot_take(&tb_library_state->python_slots, k);
    if (!tagged) {
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: the slot holds no export (taken already, or closed)");
        return NULL;
    }
    return tb_python_builtin_to_capsule(tagged);
}

int tb_python_builtin_from_capsule(void *capsule, uintptr_t *word)
{
    int versioned = py->PyCapsule_IsValid(capsule, name_versioned);
    if (!versioned && !py->PyCapsule_IsValid(capsule, name_legacy))
        return TB_PYTHON_NOT_DLPACK;
    uintptr_t address = (uintptr_t)py->PyCapsule_GetPointer(capsule, versioned ? name_versioned : name_legacy);
    if (!address)
        return TB_PYTHON_HOLDS_NULL;
    if (address & 1)
        return TB_PYTHON_ODD_ADDRESS;
    /* Renamed first: a capsule left armed would free what the slot holds.
     * From here the tensor is the library's to release, on every path. */
    py->PyCapsule_SetName(capsule, versioned ? name_used_versioned : name_used_legacy);
    *word = address | (uintptr_t)versioned;
    return TB_PYTHON_TAKEN;
}

int tb_python_builtin_put(unsigned k, int taken, uintptr_t word)
{
    if (taken != TB_PYTHON_TAKEN || tb_slot_put(&tb_library_state->python_slots, k, word))
        return taken;
    tb_dlpack_release(tb_python_builtin_managed(word), (int)(word & 1));
    return TB_PYTHON_SLOT_REFUSED;
}

/* take_capsule(capsule, k): takes the managed tensor of an unused DLPack
 * capsule into slot k (tb_python_builtin_from_capsule). Answers one of
 * the codes of tb_python_builtin.h. */
static void *python_take_capsule(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    uintptr_t tagged = 0;
    if (!tb_python_builtin_enter(args, nargs, 2, &k))
        return NULL;
    int taken = tb_python_builtin_from_capsule(args[0], &tagged); /* before tagged is read */
    return py->PyLong_FromLong(tb_python_builtin_put(k, taken, tagged));
}

const tb_python_method_def tb_python_builtin_capsule_from_slot_def = {"capsule_from_slot", python_capsule_from_slot,
                                                                      TB_PYTHON_METH_FASTCALL, NULL};
const tb_python_method_def tb_python_builtin_take_capsule_def = {"take_capsule", python_take_capsule,
                                                                 TB_PYTHON_METH_FASTCALL, NULL};
