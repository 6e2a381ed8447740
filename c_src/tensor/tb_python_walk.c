/* take_tree: a container walked once, described, its tensors taken
 * (tb_python_walk.h). */
#include "tb_python_walk.h"

#include <stdlib.h>
#include <string.h>

#include "tb_dlpack_export.h"
#include "tb_python_batch.h"
#include "tb_python_builtin.h"
#include "tb_python_exchange.h"
#include "tb_python_tree.h"
#include "tb_release.h"
#include "tb_slots.h"
#include "tb_state.h"

static tb_python_api_table *const py = &tb_python_api;

/* The type flags that say what a container or key is (stable across
 * Python 3). */
#define PY_TPFLAGS_LONG (1UL << 24)
#define PY_TPFLAGS_LIST (1UL << 25)
#define PY_TPFLAGS_TUPLE (1UL << 26)
#define PY_TPFLAGS_BYTES (1UL << 27)
#define PY_TPFLAGS_UNICODE (1UL << 28)
#define PY_TPFLAGS_DICT (1UL << 29)

/* A container being walked (take_tree): its description so far, the words
 * taken, and the callable that gives a leaf without a table its capsule. */
typedef struct {
    tb_python_desc desc;
    uintptr_t *words;
    size_t n, cap_n;
    void *capsule_of;
    /* The last leaf's type and its table's capsule (NULL: none), held for
     * the walk: a batch's tensors are mostly of one type, whose attribute
     * is looked up once. */
    void *type, *capsule;
} tree_walk;

/* Room for more items of size elem in *buf: 1, or 0 with Python's error
 * set. */
static int walk_room(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 1;
    size_t cap2 = *cap ? *cap * 2 : 256;
    while (cap2 < need)
        cap2 *= 2;
    void *grown = realloc(*buf, cap2 * elem);
    if (!grown) {
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: out of memory describing a container");
        return 0;
    }
    *buf = grown;
    *cap = cap2;
    return 1;
}

/* tb_python_desc_put, with Python's error set when it fails. */
static int walk_put(tree_walk *w, char letter, ssize_t n, const char *bytes, size_t size)
{
    if (tb_python_desc_put(&w->desc, letter, n, bytes, size))
        return 1;
    py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: out of memory describing a container");
    return 0;
}

static unsigned long type_flags(void *obj)
{
    void *type = py->PyObject_Type(obj);
    unsigned long flags = py->PyType_GetFlags(type);
    py->Py_DecRef(type);
    return flags;
}

/* A dict's key, described: str or bytes as "s", an int (not a bool) as
 * "i" in decimal. 1, or 0 with Python's error set. */
static int walk_key(tree_walk *w, void *key)
{
    unsigned long flags = type_flags(key);
    char *bytes;
    ssize_t size;
    if (flags & PY_TPFLAGS_UNICODE) {
        const char *text = py->PyUnicode_AsUTF8AndSize(key, &size);
        return text && walk_put(w, 's', size, text, (size_t)size);
    }
    if (flags & PY_TPFLAGS_BYTES)
        return py->PyBytes_AsStringAndSize(key, &bytes, &size) == 0 && walk_put(w, 's', size, bytes, (size_t)size);
    void *type = py->PyObject_Type(key);
    py->Py_DecRef(type);
    if (!(flags & PY_TPFLAGS_LONG) || type == py->PyBool_Type) {
        py->PyErr_SetString(py->PyExc_TypeError, "tensor_blob: a dict key that is no str, bytes or int: keys must be "
                                                 "str, bytes or int");
        return 0;
    }
    void *text = py->PyObject_Str(key);
    const char *digits = text ? py->PyUnicode_AsUTF8AndSize(text, &size) : NULL;
    int ok = digits && walk_put(w, 'i', -1, digits, (size_t)size) && walk_put(w, ':', -1, NULL, 0);
    if (text)
        py->Py_DecRef(text);
    return ok;
}

/* The capsule of the table of obj's type (the walk's cache: borrowed), or
 * NULL where the type has none (no attribute, or None). */
static void *walk_table(tree_walk *w, void *obj)
{
    void *type = py->PyObject_Type(obj);
    if (type == w->type) {
        py->Py_DecRef(type);
        return w->capsule;
    }
    void *capsule = py->PyObject_GetAttrString(type, TB_DLPACK_EXCHANGE_API_ATTR);
    if (!capsule)
        py->PyErr_Clear(); /* no attribute: no table */
    else if (capsule == py->_Py_NoneStruct) {
        py->Py_DecRef(capsule);
        capsule = NULL;
    }
    if (w->type)
        py->Py_DecRef(w->type);
    if (w->capsule)
        py->Py_DecRef(w->capsule);
    w->type = type;
    w->capsule = capsule;
    return capsule;
}

/* A leaf taken: through its type's table where it has one, else through
 * the capsule capsule_of gives. 1, or 0 with Python's error set, nothing
 * of it held. */
static int walk_leaf(tree_walk *w, void *obj)
{
    void *table = walk_table(w, obj), *capsule = NULL;
    uintptr_t word = 0;
    int code;
    if (table)
        code = tb_python_exchange_take(obj, table, &word);
    else if ((capsule = py->PyObject_CallFunctionObjArgs(w->capsule_of, obj, NULL)))
        code = tb_python_builtin_from_capsule(capsule, &word);
    else
        return 0;
    if (capsule)
        py->Py_DecRef(capsule);
    if (code != TB_PYTHON_TAKEN) {
        if (code != TB_PYTHON_RAISED)
            tb_python_batch_refuse(w->n, code);
        return 0;
    }
    if (!walk_room((void **)&w->words, &w->cap_n, w->n + 1, sizeof *w->words)) {
        tb_dlpack_release(tb_python_builtin_managed(word), (int)(word & 1));
        return 0;
    }
    w->words[w->n++] = word;
    return 1;
}

static int walk_node(tree_walk *w, void *obj, int depth);

/* A dict's entries, described in its order; 1, or 0 with Python's error
 * set (a dict that changes size under the walk, by a producer's code, is
 * refused). */
static int walk_dict(tree_walk *w, void *dict, int depth)
{
    ssize_t n = py->PyDict_Size(dict), pos = 0, seen = 0;
    void *key, *value;
    if (!walk_put(w, 'd', n, NULL, 0))
        return 0;
    while (py->PyDict_Next(dict, &pos, &key, &value)) {
        py->Py_IncRef(key);
        py->Py_IncRef(value);
        int ok = walk_key(w, key) && walk_node(w, value, depth + 1);
        py->Py_DecRef(key);
        py->Py_DecRef(value);
        if (!ok)
            return 0;
        seen++;
    }
    if (seen != n || py->PyDict_Size(dict) != n) {
        py->PyErr_SetString(py->PyExc_ValueError, "tensor_blob: a dict changed size while its tensors were taken");
        return 0;
    }
    return 1;
}

/* A list's or tuple's items, described; 1, or 0 with Python's error set. */
static int walk_sequence(tree_walk *w, void *seq, int tuple, int depth)
{
    ssize_t n = tuple ? py->PyTuple_Size(seq) : py->PyList_Size(seq);
    if (!walk_put(w, 'l', n, NULL, 0))
        return 0;
    for (ssize_t i = 0; i < n; i++) {
        void *item = tuple ? py->PyTuple_GetItem(seq, i) : py->PyList_GetItem(seq, i);
        if (!item) /* a list shortened under the walk: IndexError set */
            return 0;
        py->Py_IncRef(item);
        int ok = walk_node(w, item, depth + 1);
        py->Py_DecRef(item);
        if (!ok)
            return 0;
    }
    if (!tuple && py->PyList_Size(seq) != n) {
        py->PyErr_SetString(py->PyExc_ValueError, "tensor_blob: a list changed size while its tensors were taken");
        return 0;
    }
    return 1;
}

static int walk_node(tree_walk *w, void *obj, int depth)
{
    if (depth >= TB_PYTHON_TREE_DEPTH) {
        py->PyErr_SetString(py->PyExc_ValueError, "tensor_blob: containers nested deeper than 256");
        return 0;
    }
    unsigned long flags = type_flags(obj);
    if (flags & PY_TPFLAGS_DICT)
        return walk_dict(w, obj, depth);
    if (flags & (PY_TPFLAGS_LIST | PY_TPFLAGS_TUPLE))
        return walk_sequence(w, obj, (flags & PY_TPFLAGS_TUPLE) != 0, depth);
    return walk_put(w, 't', -1, NULL, 0) && walk_leaf(w, obj);
}

/* Puts b in the empty slot k: 1, or 0 with Python's error set and b
 * released (the GIL is held). */
static int put_batch(unsigned k, tb_python_batch *b)
{
    uintptr_t was = tb_slot_take(&tb_library_state->python_slots, k);
    if (was) { /* not a slot opened for a batch from Python: left as it was */
        tb_slot_put(&tb_library_state->python_slots, k, was);
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: the slot is not an empty one for a batch");
    } else if (tb_slot_put(&tb_library_state->python_slots, k, (uintptr_t)b))
        return 1;
    else
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: the batch's slot was closed");
    tb_python_batch_free(b, 0, 1);
    return 0;
}

/* How many of the release thread's runs of held jobs (TB_RELEASE_HOLD_RUN
 * each) take_tree runs at most. */
#define TAKE_TREE_HELD_RUNS 8

/* take_tree(obj, capsule_of, k): the tensors of obj (dicts, lists and
 * tuples of DLPack producers, nested) taken in one walk, each through its
 * type's table (checked once per capsule: tb_python_exchange_api caches it) or through the
 * capsule capsule_of(leaf) gives, into a batch that carries obj's
 * description, put in the empty slot k. None, or raises with nothing
 * taken. */
static void *python_take_tree(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    if (!tb_python_builtin_enter(args, nargs, 3, &k))
        return NULL;
    /* A batch from Python leaves a batch's deleters behind when it goes:
     * more of them run here, where the GIL is held already, than one
     * builtin's run (tb_python_builtin_enter), so that few wait for the release
     * thread to take the GIL from the evaluations that follow. */
    for (int run = 1; run < TAKE_TREE_HELD_RUNS && tb_release_pending() > 0; run++)
        tb_release_run_held();
    tree_walk w = {.capsule_of = args[1]};
    tb_python_batch *b = NULL;
    int ok = walk_node(&w, args[0], 0) && w.n <= TB_PYTHON_BATCH_MAX;
    if (w.type)
        py->Py_DecRef(w.type);
    if (w.capsule)
        py->Py_DecRef(w.capsule);
    if (ok && !(b = tb_python_batch_new(w.n)))
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: out of memory for a batch");
    if (!b) {
        if (!py->PyErr_Occurred())
            py->PyErr_SetString(py->PyExc_ValueError, "tensor_blob: too many tensors for one batch");
        for (size_t i = 0; i < w.n; i++)
            tb_dlpack_release(tb_python_builtin_managed(w.words[i]), (int)(w.words[i] & 1));
        free(w.words);
        free(w.desc.bytes);
        return NULL;
    }
    if (w.n)
        memcpy(b->tagged, w.words, w.n * sizeof *w.words);
    free(w.words);
    b->desc = w.desc.bytes;
    b->desc_len = w.desc.len;
    if (!put_batch(k, b))
        return NULL;
    void *none = py->_Py_NoneStruct;
    py->Py_IncRef(none);
    return none;
}

const tb_python_method_def tb_python_walk_take_tree_def = {"take_tree", python_take_tree, TB_PYTHON_METH_FASTCALL,
                                                           NULL};
