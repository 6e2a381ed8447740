/* What every builtin of the Python door shares (tb_python_builtin.c): a
 * slot's word, the DLPack capsules that carry one, what each builtin does
 * first, and the two builtins of one tensor in a capsule (capsule_from_slot,
 * take_capsule).
 *
 * A managed tensor crosses one evaluation in a slot (tb_slots.h, the slot
 * resource of nif/tb_python.c) whose number the evaluated code names, so
 * that the code's text is one of a few, compiled once each, and no address
 * is ever decoded from or encoded into a Python object. Python holds our
 * exports in PyCapsules named as the DLPack protocol says, with the
 * destructor here. The builtins are C functions of this loaded image
 * (PyMethodDef, METH_FASTCALL: a call costs what a call of len() does, a
 * twentieth of a ctypes call), called with the GIL held; each first runs
 * Python's deleters waiting on the release thread (tb_python_builtin_enter):
 * here the GIL is held already, and no thread hands it over. Below the
 * other builtins' units (tb_python_exchange, tb_python_batch, ...), which
 * all take and put words as these do. */
#ifndef TB_PYTHON_BUILTIN_H
#define TB_PYTHON_BUILTIN_H

#include <stdint.h>

#include "tb_python_api.h"

/* A slot's word: a managed tensor's address (even), its low bit set when
 * the tensor is versioned; this is the managed tensor. */
static inline void *tb_python_builtin_managed(uintptr_t word)
{
    return (void *)(word & ~(uintptr_t)1);
}

/* What taking a tensor from Python answers (take_capsule's answers, to
 * Python), and RAISED: Python's error is set. */
enum {
    TB_PYTHON_TAKEN = 1,
    TB_PYTHON_NOT_DLPACK = 0,
    TB_PYTHON_HOLDS_NULL = -1,
    TB_PYTHON_ODD_ADDRESS = -2,
    TB_PYTHON_SLOT_REFUSED = -3,
    TB_PYTHON_RAISED = -100
};

/* What each builtin does first: runs Python's deleters waiting in line
 * (the GIL is held here already), then reads the slot number, the last of
 * nargs arguments (1, or 0 when refused, Python's error set). */
int tb_python_builtin_enter(void *const *args, ssize_t nargs, ssize_t expected, unsigned *k);

/* A new capsule over a slot's word, named for what it holds, with our
 * destructor, which takes the word over; NULL with Python's error set (out
 * of memory), the word released. */
void *tb_python_builtin_to_capsule(uintptr_t word);

/* The managed tensor of an unused DLPack capsule (versioned first), taken:
 * the capsule is marked used, so that neither it nor another consumer
 * frees the tensor, and *word is the slot's word for it (TAKEN); or
 * NOT_DLPACK, HOLDS_NULL or ODD_ADDRESS, the capsule left as it was. */
int tb_python_builtin_from_capsule(void *capsule, uintptr_t *word);

/* Puts a word taken (TAKEN) in slot k: TAKEN, or SLOT_REFUSED with what it
 * holds released (the GIL is held here); any other code as it came. */
int tb_python_builtin_put(unsigned k, int taken, uintptr_t word);

/* capsule_from_slot(k) and take_capsule(capsule, k). */
extern const tb_python_method_def tb_python_builtin_capsule_from_slot_def;
extern const tb_python_method_def tb_python_builtin_take_capsule_def;

#endif
