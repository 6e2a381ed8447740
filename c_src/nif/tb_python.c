/* Tensors to and from the Python of this VM (Pythonx, TensorBlob.Python).
 *
 * The library links no libpython: it binds the interpreter's C functions
 * it calls (PyCapsule_*, PyLong_*, PyErr_*, PyGILState_*) by name, once per
 * VM (python_capsule_abi), from the libpython already loaded in this OS
 * process, whose path the interpreter tells it: dlopen(RTLD_NOLOAD) loads
 * nothing, and nothing an Erlang caller passes becomes a call target. In
 * return it gives Python two builtin functions (PyMethodDef,
 * METH_FASTCALL: a call costs what a call of len() does, a twentieth of a
 * ctypes call) and a capsule destructor, all C functions of this loaded
 * image, so nothing depends on ctypes callbacks or on which copy of the
 * library a second dlopen would find.
 *
 * Capsules: Python holds our exports in PyCapsules named as the DLPack
 * protocol says, with the destructor below.
 *
 * Slots: a managed tensor crosses one evaluation in a slot (tb_slots.h)
 * whose number the evaluated code names, so that the code's text is one of
 * a few, compiled once each, and no address is ever decoded from or encoded
 * into a Python object. The slot is a resource of the calling process: if
 * the process dies, whatever is left in it is released with it. */
#include "tb_python.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "tb_dlpack_check.h"
#include "tb_dlpack_exchange.h"
#include "tb_dlpack_export.h"
#include "tb_nifs.h"
#include "tb_raise.h"
#include "tb_release.h"
#include "tb_rtype.h"
#include "tb_slots.h"
#include "tb_state.h"
#include "tb_term.h"

/* ---- The interpreter's functions -------------------------------------------- */

/* The one list of the interpreter's C API the library calls: each is looked
 * up by this name. PyObject * is void * here, Py_ssize_t ssize_t,
 * PyGILState_STATE (an enum) int. */
#define PY_FUNCTIONS(X)                                                                     \
    X(int, PyCapsule_IsValid, (void *capsule, const char *name))                            \
    X(void *, PyCapsule_GetPointer, (void *capsule, const char *name))                      \
    X(void *, PyCapsule_New, (void *pointer, const char *name, void (*destructor)(void *))) \
    X(int, PyCapsule_SetName, (void *capsule, const char *name))                            \
    X(unsigned long, PyLong_AsUnsignedLong, (void *number))                                 \
    X(void *, PyLong_FromLong, (long value))                                                \
    X(void, PyErr_SetString, (void *type, const char *message))                             \
    X(void *, PyErr_Occurred, (void))                                                       \
    X(void *, PyList_New, (ssize_t size))                                                   \
    X(int, PyList_SetItem, (void *list, ssize_t index, void *item))                         \
    X(void *, PyList_GetItem, (void *list, ssize_t index))                                  \
    X(ssize_t, PyList_Size, (void *list))                                                   \
    X(void, Py_DecRef, (void *object))                                                      \
    X(void, Py_IncRef, (void *object))                                                      \
    X(void *, PyBytes_FromStringAndSize, (const char *bytes, ssize_t size))                 \
    X(int, PyBytes_AsStringAndSize, (void *bytes, char **buffer, ssize_t *size))            \
    X(void *, PyUnicode_DecodeUTF8, (const char *text, ssize_t size, const char *errors))   \
    X(const char *, PyUnicode_AsUTF8AndSize, (void *text, ssize_t *size))                   \
    X(void *, PyLong_FromString, (const char *text, char **end, int base))                  \
    X(void *, PyDict_New, (void))                                                           \
    X(int, PyDict_SetItem, (void *dict, void *key, void *value))                            \
    X(int, PyDict_Next, (void *dict, ssize_t *pos, void **key, void **value))               \
    X(ssize_t, PyDict_Size, (void *dict))                                                   \
    X(void *, PyTuple_GetItem, (void *tuple, ssize_t index))                                \
    X(ssize_t, PyTuple_Size, (void *tuple))                                                 \
    X(void *, PyObject_Type, (void *object))                                                \
    X(unsigned long, PyType_GetFlags, (void *type))                                         \
    X(void *, PyObject_GetAttrString, (void *object, const char *name))                     \
    X(void *, PyObject_Str, (void *object))                                                 \
    X(void *, PyObject_CallFunctionObjArgs, (void *callable, ...))                          \
    X(void, PyErr_Clear, (void))                                                            \
    X(int, PyGILState_Ensure, (void))                                                       \
    X(void, PyGILState_Release, (int state))
/* Its exception types: variables (PyObject *) of the library. */
#define PY_OBJECTS(X) X(PyExc_BufferError) X(PyExc_TypeError) X(PyExc_ValueError)
/* Its static objects, whose addresses are the objects: bool's type, None. */
#define PY_STATICS(X) X(PyBool_Type) X(_Py_NoneStruct)

/* Set once per VM (python_capsule_abi), read with the GIL held. */
typedef struct {
#define PY_FUNCTION_FIELD(result, name, params) result(*name) params;
    PY_FUNCTIONS(PY_FUNCTION_FIELD)
#define PY_OBJECT_FIELD(name) void *name;
    PY_OBJECTS(PY_OBJECT_FIELD)
    PY_STATICS(PY_OBJECT_FIELD)
} py_api;
static py_api py;
static atomic_int py_bound;

/* Looks up every name of the list in the library `handle`: 1, or 0 with
 * *missing the first name it lacks. */
static int py_lookup(void *handle, py_api *api, const char **missing)
{
    void *found;
#define PY_LOOKUP(name)                    \
    if (!(found = dlsym(handle, #name))) { \
        *missing = #name;                  \
        return 0;                          \
    }
    /* POSIX: a function's address, as dlsym gives it, fits a void *. */
#define PY_FUNCTION_LOOKUP(result, name, params) PY_LOOKUP(name) memcpy(&api->name, &found, sizeof found);
    PY_FUNCTIONS(PY_FUNCTION_LOOKUP)
#define PY_OBJECT_LOOKUP(name) PY_LOOKUP(name) api->name = *(void **)found;
    PY_OBJECTS(PY_OBJECT_LOOKUP)
#define PY_STATIC_LOOKUP(name) PY_LOOKUP(name) api->name = found;
    PY_STATICS(PY_STATIC_LOOKUP)
    return 1;
}

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
    if (!atomic_load(&py_bound))
        return;
    if (py.PyCapsule_IsValid(capsule, name_versioned))
        tb_dlpack_release(py.PyCapsule_GetPointer(capsule, name_versioned), 1);
    else if (py.PyCapsule_IsValid(capsule, name_legacy))
        tb_dlpack_release(py.PyCapsule_GetPointer(capsule, name_legacy), 0);
}

/* ---- Slots ------------------------------------------------------------------ */

/* A slot's word: a managed tensor's address (even), its low bit set when
 * the tensor is versioned. */
static void *tagged_managed(uintptr_t tagged)
{
    return (void *)(tagged & ~(uintptr_t)1);
}

/* Python's side: two builtins, called with the GIL held. Each first runs
 * Python's deleters waiting on the release thread (enter_builtin): here
 * the GIL is held already, and no thread hands it over. */

/* A PyMethodDef, as the stable ABI lays it out. */
typedef void *(*py_fastcall)(void *self, void *const *args, ssize_t nargs);
typedef struct {
    const char *name;
    py_fastcall function;
    int flags;
    const char *doc;
} py_method_def;
enum { PY_METH_FASTCALL = 0x0080 };

/* What each builtin does first: runs Python's deleters waiting in line
 * (the GIL is held here already), then reads the slot number, the last of
 * nargs arguments (1, or 0 when refused, Python's error set). */
static int enter_builtin(void *const *args, ssize_t nargs, ssize_t expected, unsigned *k)
{
    tb_release_run_held();
    if (nargs != expected) {
        py.PyErr_SetString(py.PyExc_TypeError, "tensor_blob: a slot builtin was given the wrong number of arguments");
        return 0;
    }
    unsigned long number = py.PyLong_AsUnsignedLong(args[expected - 1]);
    if (number < TB_SLOTS) {
        *k = (unsigned)number;
        return 1;
    }
    if (!py.PyErr_Occurred())
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: no such slot");
    return 0;
}

/* capsule_from_slot(k): a new capsule over the export in slot k, named
 * for what it holds, with our destructor. */
static void *python_capsule_from_slot(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    if (!enter_builtin(args, nargs, 1, &k))
        return NULL;
    uintptr_t tagged = tb_slot_take(&tb_library_state->python_slots, k);
    if (!tagged) {
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: the slot holds no export (taken already, or closed)");
        return NULL;
    }
    void *capsule =
        py.PyCapsule_New(tagged_managed(tagged), tagged & 1 ? name_versioned : name_legacy, python_capsule_destructor);
    if (!capsule) /* Python's error is set (out of memory): ours again */
        tb_dlpack_release(tagged_managed(tagged), (int)(tagged & 1));
    return capsule;
}

/* What take_capsule answers. */
enum { TAKEN = 1, NOT_DLPACK = 0, HOLDS_NULL = -1, ODD_ADDRESS = -2, SLOT_REFUSED = -3 };

/* The managed tensor of an unused DLPack capsule (versioned first), taken:
 * the capsule is marked used, so that neither it nor another consumer
 * frees the tensor, and *tagged is the slot's word for it (TAKEN); or one
 * of the codes above, the capsule left as it was. */
static int take_from_capsule(void *capsule, uintptr_t *tagged)
{
    int versioned = py.PyCapsule_IsValid(capsule, name_versioned);
    if (!versioned && !py.PyCapsule_IsValid(capsule, name_legacy))
        return NOT_DLPACK;
    uintptr_t address = (uintptr_t)py.PyCapsule_GetPointer(capsule, versioned ? name_versioned : name_legacy);
    if (!address)
        return HOLDS_NULL;
    if (address & 1)
        return ODD_ADDRESS;
    /* Renamed first: a capsule left armed would free what the slot holds.
     * From here the tensor is the library's to release, on every path. */
    py.PyCapsule_SetName(capsule, versioned ? name_used_versioned : name_used_legacy);
    *tagged = address | (uintptr_t)versioned;
    return TAKEN;
}

/* Puts a word taken (TAKEN) in slot k: TAKEN, or SLOT_REFUSED with what it
 * holds released (the GIL is held here). */
static int put_taken(unsigned k, int taken, uintptr_t tagged)
{
    if (taken != TAKEN || tb_slot_put(&tb_library_state->python_slots, k, tagged))
        return taken;
    tb_dlpack_release(tagged_managed(tagged), (int)(tagged & 1));
    return SLOT_REFUSED;
}

/* take_capsule(capsule, k): takes the managed tensor of an unused DLPack
 * capsule into slot k (take_from_capsule). Answers one of the codes above. */
static void *python_take_capsule(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    uintptr_t tagged = 0;
    if (!enter_builtin(args, nargs, 2, &k))
        return NULL;
    int taken = take_from_capsule(args[0], &tagged); /* before tagged is read */
    return py.PyLong_FromLong(put_taken(k, taken, tagged));
}

/* ---- DLPack 1.3's C exchange API ------------------------------------------ */

/* The last table found and checked, by its capsule: the capsule held (a
 * strong reference, so its address names no other object while cached)
 * and the table's address it held then. A capsule whose pointer is the
 * same again holds the same checked table; a type whose attribute now
 * names another capsule, or a capsule set to another pointer, is checked
 * anew and replaces it. Read and written with the GIL held. */
static struct {
    void *capsule;
    const void *raw;
    const tb_DLPackExchangeAPI *api;
} api_cache;

/* The table in a type's __dlpack_c_exchange_api__ capsule, searched and
 * checked (tb_dlpack_check.h), or the cached one; or NULL with Python's
 * ValueError set, about a capsule nothing of which is called. */
static const tb_DLPackExchangeAPI *exchange_api(void *capsule)
{
    if (!py.PyCapsule_IsValid(capsule, TB_DLPACK_EXCHANGE_API_NAME)) {
        py.PyErr_SetString(py.PyExc_ValueError, "tensor_blob: the type's " TB_DLPACK_EXCHANGE_API_ATTR
                                                " is no PyCapsule named \"" TB_DLPACK_EXCHANGE_API_NAME "\"");
        return NULL;
    }
    const void *raw = py.PyCapsule_GetPointer(capsule, TB_DLPACK_EXCHANGE_API_NAME);
    if (capsule == api_cache.capsule && raw == api_cache.raw)
        return api_cache.api;
    const tb_DLPackExchangeAPI *api;
    tb_xapi_status status = tb_dlpack_exchange_api_find(raw, &api);
    if (status != TB_XAPI_OK) {
        char message[200];
        snprintf(message, sizeof message, "tensor_blob: the type's " TB_DLPACK_EXCHANGE_API_ATTR " holds %s",
                 tb_dlpack_xapi_text(status));
        py.PyErr_SetString(py.PyExc_ValueError, message);
        return NULL;
    }
    py.Py_IncRef(capsule);
    if (api_cache.capsule)
        py.Py_DecRef(api_cache.capsule);
    api_cache.capsule = capsule;
    api_cache.raw = raw;
    api_cache.api = api;
    return api;
}

/* A producer's entry answered rc: 1 when it succeeded, else 0 with Python's
 * error set (by the producer, as DLPack asks, or here when it set none). */
static int producer_succeeded(int rc, const char *entry)
{
    if (rc == 0)
        return 1;
    if (!py.PyErr_Occurred()) {
        char message[160];
        snprintf(message, sizeof message, "tensor_blob: the producer's %s failed and set no Python error", entry);
        py.PyErr_SetString(py.PyExc_BufferError, message);
    }
    return 0;
}

/* What take_through_api answers when Python's error is set. */
enum { RAISED = -100 };

/* obj's managed tensor, through the table of api, its type's
 * __dlpack_c_exchange_api__ capsule (checked first: a bad one is refused,
 * never called): TAKEN with *tagged, HOLDS_NULL, ODD_ADDRESS, or RAISED. */
static int take_through_api(void *obj, void *capsule, uintptr_t *tagged)
{
    const tb_DLPackExchangeAPI *api = exchange_api(capsule);
    if (!api)
        return RAISED;
    tb_DLManagedTensorVersioned *m = NULL;
    if (!producer_succeeded(api->managed_tensor_from_py_object_no_sync(obj, &m),
                            "managed_tensor_from_py_object_no_sync"))
        return RAISED;
    if (!m)
        return HOLDS_NULL;
    if ((uintptr_t)m & 1) { /* no slot's word: the producer's all the same */
        tb_dlpack_release(m, 1);
        return ODD_ADDRESS;
    }
    *tagged = (uintptr_t)m | 1;
    return TAKEN;
}

/* take_api(obj, api, k): takes obj's managed tensor into slot k through
 * its type's table (take_through_api). Answers TAKEN, HOLDS_NULL,
 * ODD_ADDRESS or SLOT_REFUSED as take_capsule does, or raises. */
static void *python_take_api(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    uintptr_t tagged = 0;
    if (!enter_builtin(args, nargs, 3, &k))
        return NULL;
    int taken = take_through_api(args[0], args[1], &tagged);
    return taken == RAISED ? NULL : py.PyLong_FromLong(put_taken(k, taken, tagged));
}

/* object_from_api(api, k): the producer's object over the versioned export
 * in slot k, made by the table of api (checked first), which takes the
 * export over, on failure too. */
static void *python_object_from_api(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    if (!enter_builtin(args, nargs, 2, &k))
        return NULL;
    const tb_DLPackExchangeAPI *api = exchange_api(args[0]);
    if (!api)
        return NULL;
    uintptr_t tagged = tb_slot_take(&tb_library_state->python_slots, k);
    if (!tagged || !(tagged & 1)) {
        if (tagged)
            tb_dlpack_release(tagged_managed(tagged), 0);
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: the slot holds no versioned export");
        return NULL;
    }
    void *object = NULL;
    if (!producer_succeeded(api->managed_tensor_to_py_object_no_sync(tagged_managed(tagged), &object),
                            "managed_tensor_to_py_object_no_sync"))
        return NULL;
    if (!object)
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: the producer made no object and set no error");
    return object;
}

/* ---- Batches: many tensors in one slot ------------------------------------ */

/* A batch: the words of many managed tensors that cross one evaluation in
 * one slot, whose word is the batch's address (malloc's: even). */
typedef struct {
    size_t n;
    char *desc; /* a container's description (take_tree), or NULL */
    size_t desc_len;
    uintptr_t tagged[];
} python_batch;

/* The most tensors one batch carries. */
#define PYTHON_BATCH_MAX (1u << 20)

static python_batch *batch_new(size_t n)
{
    python_batch *b = calloc(1, sizeof *b + n * sizeof b->tagged[0]);
    if (b)
        b->n = n;
    return b;
}

/* Releases what a batch still holds, then the batch: our exports, or
 * Python's tensors (their deleters take the GIL: at once when it is held,
 * else on the release thread). */
static void batch_free(python_batch *b, int to_python, int held)
{
    for (size_t i = 0; i < b->n; i++) {
        uintptr_t t = b->tagged[i];
        if (t && (to_python || held))
            tb_dlpack_release(tagged_managed(t), (int)(t & 1));
        else if (t)
            tb_dlpack_release_later(tagged_managed(t), (int)(t & 1), 1);
    }
    free(b->desc);
    free(b);
}

/* The batch in slot k, taken out of it; NULL with Python's error set. */
static python_batch *take_batch(unsigned k)
{
    python_batch *b = (python_batch *)tb_slot_take(&tb_library_state->python_slots, k);
    if (!b)
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: the slot holds no batch (taken already, or closed)");
    return b;
}

/* A Python list of what make(b's i-th word, api) makes of each word of a
 * batch to Python, which takes the word over (on failure too); the batch
 * freed. NULL with Python's error set. */
static void *batch_to_list(python_batch *b, const tb_DLPackExchangeAPI *api,
                           void *(*make)(uintptr_t, const tb_DLPackExchangeAPI *))
{
    void *list = py.PyList_New((ssize_t)b->n);
    for (size_t i = 0; list && i < b->n; i++) {
        uintptr_t t = b->tagged[i];
        b->tagged[i] = 0;
        void *item = make(t, api);
        if (!item) {
            py.Py_DecRef(list); /* the items made release theirs */
            list = NULL;
        } else
            py.PyList_SetItem(list, (ssize_t)i, item);
    }
    batch_free(b, 1, 1);
    return list;
}

static void *capsule_of_word(uintptr_t t, const tb_DLPackExchangeAPI *api)
{
    (void)api;
    void *capsule =
        py.PyCapsule_New(tagged_managed(t), t & 1 ? name_versioned : name_legacy, python_capsule_destructor);
    if (!capsule)
        tb_dlpack_release(tagged_managed(t), (int)(t & 1));
    return capsule;
}

static void *object_of_word(uintptr_t t, const tb_DLPackExchangeAPI *api)
{
    void *object = NULL;
    if (!(t & 1)) {
        tb_dlpack_release(tagged_managed(t), 0);
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: the batch holds a legacy export");
        return NULL;
    }
    if (!producer_succeeded(api->managed_tensor_to_py_object_no_sync(tagged_managed(t), &object),
                            "managed_tensor_to_py_object_no_sync"))
        return NULL;
    if (!object)
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: the producer made no object and set no error");
    return object;
}

/* capsules_from_batch(k): a list of capsules over the exports of the
 * batch in slot k, named for what each holds, with our destructor. */
static void *python_capsules_from_batch(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    python_batch *b;
    if (!enter_builtin(args, nargs, 1, &k) || !(b = take_batch(k)))
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
    python_batch *b;
    if (!enter_builtin(args, nargs, 2, &k))
        return NULL;
    const tb_DLPackExchangeAPI *api = exchange_api(args[0]);
    if (!api || !(b = take_batch(k)))
        return NULL;
    return batch_to_list(b, api, object_of_word);
}

/* Sets Python's error about item i of a batch that was refused code. */
static void refuse_item(size_t i, int code)
{
    char message[240];
    const char *what = code == HOLDS_NULL ? "a managed tensor at NULL"
                       : code == ODD_ADDRESS
                           ? "a managed tensor at an odd address"
                           : "neither an unused DLPack capsule nor an object whose type's " TB_DLPACK_EXCHANGE_API_ATTR
                             " is a PyCapsule named \"" TB_DLPACK_EXCHANGE_API_NAME "\"";
    snprintf(message, sizeof message, "tensor_blob: item %zu of the batch: %s", i, what);
    py.PyErr_SetString(py.PyExc_ValueError, message);
}

/* Fills b from the lists items and apis: each item an unused DLPack
 * capsule, or an object whose type's table is the api beside it. 1, or 0
 * with Python's error set, what was taken released (the GIL is held). */
static int fill_batch(python_batch *b, void *items, void *apis)
{
    if (py.PyList_Size(items) != (ssize_t)b->n || py.PyList_Size(apis) != (ssize_t)b->n) {
        if (!py.PyErr_Occurred())
            py.PyErr_SetString(py.PyExc_TypeError, "tensor_blob: take_many wants two lists as long as the batch");
        return 0;
    }
    for (size_t i = 0; i < b->n; i++) {
        void *item = py.PyList_GetItem(items, (ssize_t)i);
        int code = take_from_capsule(item, &b->tagged[i]);
        if (code == NOT_DLPACK &&
            py.PyCapsule_IsValid(py.PyList_GetItem(apis, (ssize_t)i), TB_DLPACK_EXCHANGE_API_NAME))
            code = take_through_api(item, py.PyList_GetItem(apis, (ssize_t)i), &b->tagged[i]);
        if (code != TAKEN) {
            if (code != RAISED)
                refuse_item(i, code);
            for (size_t j = 0; j <= i; j++)
                if (b->tagged[j])
                    tb_dlpack_release(tagged_managed(b->tagged[j]), (int)(b->tagged[j] & 1));
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
    if (!enter_builtin(args, nargs, 3, &k))
        return NULL;
    /* The slot holds an empty word: the batch is made here, as long as the
     * list of items. */
    ssize_t n = py.PyList_Size(args[0]);
    if (n < 0 || n > (ssize_t)PYTHON_BATCH_MAX) {
        if (!py.PyErr_Occurred())
            py.PyErr_SetString(py.PyExc_ValueError, "tensor_blob: too many tensors for one batch");
        return NULL;
    }
    python_batch *b = batch_new((size_t)n);
    if (!b)
        return NULL;
    uintptr_t was = tb_slot_take(&tb_library_state->python_slots, k);
    if (was) { /* not a slot opened for a batch from Python: left as it was */
        free(b);
        tb_slot_put(&tb_library_state->python_slots, k, was);
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: the slot is not an empty one for a batch");
        return NULL;
    }
    int filled = fill_batch(b, args[0], args[1]);
    if (!tb_slot_put(&tb_library_state->python_slots, k, (uintptr_t)b)) {
        batch_free(b, 0, 1);
        if (filled)
            py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: the batch's slot was closed");
        return NULL;
    }
    return filled ? py.PyLong_FromLong(TAKEN) : NULL;
}

/* ---- Containers: a batch's shape, described ------------------------------- */

/* A container's shape crosses as its description, bytes (the Elixir side
 * writes and reads it, priv/python/tensor_blob_pythonx.py holds its
 * reference in Python):
 *   node := "t" (a tensor: the next one, in order)
 *         | "l" N ":" node*N | "d" N ":" (key node)*N
 *   key  := "s" LEN ":" BYTES (str: UTF-8; bytes where it is not)
 *         | "a" LEN ":" BYTES (an atom's name: str) | "i" INT ":"
 * Containers nest at most this deep. */
#define TREE_DEPTH 256

/* A description being read: what is left of it, and the leaves. */
typedef struct {
    const char *at, *end;
    void *items; /* a Python list */
    ssize_t next, n;
} tree_reader;

/* The count (or length) after a node's or key's letter, up to its ':'; 1,
 * or 0 with Python's error set. */
static int tree_count(tree_reader *r, ssize_t *n)
{
    ssize_t v = 0;
    const char *p = r->at;
    while (p < r->end && *p >= '0' && *p <= '9' && v <= (ssize_t)PYTHON_BATCH_MAX * 64)
        v = v * 10 + (*p++ - '0');
    if (p == r->at || p >= r->end || *p != ':') {
        py.PyErr_SetString(py.PyExc_ValueError, "tensor_blob: a bad container description");
        return 0;
    }
    r->at = p + 1;
    *n = v;
    return 1;
}

/* A dict's key, read: a new reference, or NULL with Python's error set. */
static void *tree_key(tree_reader *r)
{
    char c = r->at < r->end ? *r->at++ : 0;
    const char *start = r->at;
    if (c == 'i') {
        char digits[64];
        const char *colon = memchr(start, ':', (size_t)(r->end - start));
        size_t len = colon ? (size_t)(colon - start) : sizeof digits;
        if (len == 0 || len >= sizeof digits) {
            py.PyErr_SetString(py.PyExc_ValueError, "tensor_blob: a bad integer key in a container description");
            return NULL;
        }
        memcpy(digits, start, len);
        digits[len] = 0;
        r->at = colon + 1;
        return py.PyLong_FromString(digits, NULL, 10);
    }
    ssize_t n;
    if ((c != 's' && c != 'a') || !tree_count(r, &n) || n > r->end - r->at) {
        if (!py.PyErr_Occurred())
            py.PyErr_SetString(py.PyExc_ValueError, "tensor_blob: a bad key in a container description");
        return NULL;
    }
    const char *bytes = r->at;
    r->at += n;
    void *key = py.PyUnicode_DecodeUTF8(bytes, n, "strict");
    if (key || c == 'a')
        return key;
    py.PyErr_Clear(); /* not UTF-8: a bytes key */
    return py.PyBytes_FromStringAndSize(bytes, n);
}

static void *tree_node(tree_reader *r, int depth);

/* The n entries of a list (dict 0) or a dict (1): a new reference, or
 * NULL with Python's error set. */
static void *tree_container(tree_reader *r, ssize_t n, int dict, int depth)
{
    void *out = dict ? py.PyDict_New() : py.PyList_New(n);
    for (ssize_t i = 0; out && i < n; i++) {
        void *key = dict ? tree_key(r) : NULL;
        void *value = dict && !key ? NULL : tree_node(r, depth + 1);
        int ok = value != NULL;
        if (ok && dict)
            ok = py.PyDict_SetItem(out, key, value) == 0;
        if (dict) {
            if (value)
                py.Py_DecRef(value);
            if (key)
                py.Py_DecRef(key);
        } else if (ok)
            py.PyList_SetItem(out, i, value);
        if (!ok) {
            py.Py_DecRef(out);
            out = NULL;
        }
    }
    return out;
}

/* The next node: a new reference, or NULL with Python's error set. */
static void *tree_node(tree_reader *r, int depth)
{
    char c = r->at < r->end ? *r->at++ : 0;
    ssize_t n;
    if (c == 't' && r->next < r->n) {
        void *item = py.PyList_GetItem(r->items, r->next++);
        py.Py_IncRef(item);
        return item;
    }
    /* Each node takes a byte at least: no count past what is left. */
    if ((c == 'l' || c == 'd') && depth < TREE_DEPTH && tree_count(r, &n) && n <= r->end - r->at)
        return tree_container(r, n, c == 'd', depth);
    if (!py.PyErr_Occurred())
        py.PyErr_SetString(py.PyExc_ValueError, c == 't' ? "tensor_blob: a container description with more "
                                                           "tensors than the batch"
                                                         : "tensor_blob: a bad container description (or nested "
                                                           "deeper than 256)");
    return NULL;
}

/* tree(desc, items): the container desc describes (bytes), its tensors
 * the list items in order, all of them; made in one pass. */
static void *python_tree(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    char *bytes;
    ssize_t size;
    tb_release_run_held();
    if (nargs != 2 || py.PyBytes_AsStringAndSize(args[0], &bytes, &size) != 0) {
        if (!py.PyErr_Occurred())
            py.PyErr_SetString(py.PyExc_TypeError, "tensor_blob: tree wants a description (bytes) and a list");
        return NULL;
    }
    tree_reader r = {.at = bytes, .end = bytes + size, .items = args[1], .next = 0, .n = py.PyList_Size(args[1])};
    if (r.n < 0)
        return NULL;
    void *tree = tree_node(&r, 0);
    if (tree && (r.at != r.end || r.next != r.n)) {
        py.Py_DecRef(tree);
        py.PyErr_SetString(py.PyExc_ValueError, "tensor_blob: a container description that does not match its "
                                                "tensors");
        return NULL;
    }
    return tree;
}

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
    char *desc;
    size_t len, cap;
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
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: out of memory describing a container");
        return 0;
    }
    *buf = grown;
    *cap = cap2;
    return 1;
}

/* Appends letter, the count n in decimal and ':' (when n >= 0), then size
 * bytes. */
static int walk_put(tree_walk *w, char letter, ssize_t n, const char *bytes, size_t size)
{
    char head[24], digits[20];
    size_t h = 0, d = 0;
    head[h++] = letter;
    if (n >= 0) {
        do
            digits[d++] = (char)('0' + n % 10);
        while ((n /= 10) > 0);
        while (d)
            head[h++] = digits[--d];
        head[h++] = ':';
    }
    if (!walk_room((void **)&w->desc, &w->cap, w->len + h + size, 1))
        return 0;
    memcpy(w->desc + w->len, head, h);
    if (size)
        memcpy(w->desc + w->len + h, bytes, size);
    w->len += h + size;
    return 1;
}

static unsigned long type_flags(void *obj)
{
    void *type = py.PyObject_Type(obj);
    unsigned long flags = py.PyType_GetFlags(type);
    py.Py_DecRef(type);
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
        const char *text = py.PyUnicode_AsUTF8AndSize(key, &size);
        return text && walk_put(w, 's', size, text, (size_t)size);
    }
    if (flags & PY_TPFLAGS_BYTES)
        return py.PyBytes_AsStringAndSize(key, &bytes, &size) == 0 && walk_put(w, 's', size, bytes, (size_t)size);
    void *type = py.PyObject_Type(key);
    py.Py_DecRef(type);
    if (!(flags & PY_TPFLAGS_LONG) || type == py.PyBool_Type) {
        py.PyErr_SetString(py.PyExc_TypeError, "tensor_blob: a dict key that is no str, bytes or int: keys must be "
                                               "str, bytes or int");
        return 0;
    }
    void *text = py.PyObject_Str(key);
    const char *digits = text ? py.PyUnicode_AsUTF8AndSize(text, &size) : NULL;
    int ok = digits && walk_put(w, 'i', -1, digits, (size_t)size) && walk_put(w, ':', -1, NULL, 0);
    if (text)
        py.Py_DecRef(text);
    return ok;
}

/* The capsule of the table of obj's type (the walk's cache: borrowed), or
 * NULL where the type has none (no attribute, or None). */
static void *walk_table(tree_walk *w, void *obj)
{
    void *type = py.PyObject_Type(obj);
    if (type == w->type) {
        py.Py_DecRef(type);
        return w->capsule;
    }
    void *capsule = py.PyObject_GetAttrString(type, TB_DLPACK_EXCHANGE_API_ATTR);
    if (!capsule)
        py.PyErr_Clear(); /* no attribute: no table */
    else if (capsule == py._Py_NoneStruct) {
        py.Py_DecRef(capsule);
        capsule = NULL;
    }
    if (w->type)
        py.Py_DecRef(w->type);
    if (w->capsule)
        py.Py_DecRef(w->capsule);
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
        code = take_through_api(obj, table, &word);
    else if ((capsule = py.PyObject_CallFunctionObjArgs(w->capsule_of, obj, NULL)))
        code = take_from_capsule(capsule, &word);
    else
        return 0;
    if (capsule)
        py.Py_DecRef(capsule);
    if (code != TAKEN) {
        if (code != RAISED)
            refuse_item(w->n, code);
        return 0;
    }
    if (!walk_room((void **)&w->words, &w->cap_n, w->n + 1, sizeof *w->words)) {
        tb_dlpack_release(tagged_managed(word), (int)(word & 1));
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
    ssize_t n = py.PyDict_Size(dict), pos = 0, seen = 0;
    void *key, *value;
    if (!walk_put(w, 'd', n, NULL, 0))
        return 0;
    while (py.PyDict_Next(dict, &pos, &key, &value)) {
        py.Py_IncRef(key);
        py.Py_IncRef(value);
        int ok = walk_key(w, key) && walk_node(w, value, depth + 1);
        py.Py_DecRef(key);
        py.Py_DecRef(value);
        if (!ok)
            return 0;
        seen++;
    }
    if (seen != n || py.PyDict_Size(dict) != n) {
        py.PyErr_SetString(py.PyExc_ValueError, "tensor_blob: a dict changed size while its tensors were taken");
        return 0;
    }
    return 1;
}

/* A list's or tuple's items, described; 1, or 0 with Python's error set. */
static int walk_sequence(tree_walk *w, void *seq, int tuple, int depth)
{
    ssize_t n = tuple ? py.PyTuple_Size(seq) : py.PyList_Size(seq);
    if (!walk_put(w, 'l', n, NULL, 0))
        return 0;
    for (ssize_t i = 0; i < n; i++) {
        void *item = tuple ? py.PyTuple_GetItem(seq, i) : py.PyList_GetItem(seq, i);
        if (!item) /* a list shortened under the walk: IndexError set */
            return 0;
        py.Py_IncRef(item);
        int ok = walk_node(w, item, depth + 1);
        py.Py_DecRef(item);
        if (!ok)
            return 0;
    }
    if (!tuple && py.PyList_Size(seq) != n) {
        py.PyErr_SetString(py.PyExc_ValueError, "tensor_blob: a list changed size while its tensors were taken");
        return 0;
    }
    return 1;
}

static int walk_node(tree_walk *w, void *obj, int depth)
{
    if (depth >= TREE_DEPTH) {
        py.PyErr_SetString(py.PyExc_ValueError, "tensor_blob: containers nested deeper than 256");
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
static int put_batch(unsigned k, python_batch *b)
{
    uintptr_t was = tb_slot_take(&tb_library_state->python_slots, k);
    if (was) { /* not a slot opened for a batch from Python: left as it was */
        tb_slot_put(&tb_library_state->python_slots, k, was);
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: the slot is not an empty one for a batch");
    } else if (tb_slot_put(&tb_library_state->python_slots, k, (uintptr_t)b))
        return 1;
    else
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: the batch's slot was closed");
    batch_free(b, 0, 1);
    return 0;
}

/* How many of the release thread's runs of held jobs (TB_RELEASE_HOLD_RUN
 * each) take_tree runs at most. */
#define TAKE_TREE_HELD_RUNS 8

/* take_tree(obj, capsule_of, k): the tensors of obj (dicts, lists and
 * tuples of DLPack producers, nested) taken in one walk, each through its
 * type's table (checked once per capsule, api_cache) or through the
 * capsule capsule_of(leaf) gives, into a batch that carries obj's
 * description, put in the empty slot k. None, or raises with nothing
 * taken. */
static void *python_take_tree(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    if (!enter_builtin(args, nargs, 3, &k))
        return NULL;
    /* A batch from Python leaves a batch's deleters behind when it goes:
     * more of them run here, where the GIL is held already, than one
     * builtin's run (enter_builtin), so that few wait for the release
     * thread to take the GIL from the evaluations that follow. */
    for (int run = 1; run < TAKE_TREE_HELD_RUNS && tb_release_pending() > 0; run++)
        tb_release_run_held();
    tree_walk w = {.capsule_of = args[1]};
    python_batch *b = NULL;
    int ok = walk_node(&w, args[0], 0) && w.n <= PYTHON_BATCH_MAX;
    if (w.type)
        py.Py_DecRef(w.type);
    if (w.capsule)
        py.Py_DecRef(w.capsule);
    if (ok && !(b = batch_new(w.n)))
        py.PyErr_SetString(py.PyExc_BufferError, "tensor_blob: out of memory for a batch");
    if (!b) {
        if (!py.PyErr_Occurred())
            py.PyErr_SetString(py.PyExc_ValueError, "tensor_blob: too many tensors for one batch");
        for (size_t i = 0; i < w.n; i++)
            tb_dlpack_release(tagged_managed(w.words[i]), (int)(w.words[i] & 1));
        free(w.words);
        free(w.desc);
        return NULL;
    }
    if (w.n)
        memcpy(b->tagged, w.words, w.n * sizeof *w.words);
    free(w.words);
    b->desc = w.desc;
    b->desc_len = w.len;
    if (!put_batch(k, b))
        return NULL;
    void *none = py._Py_NoneStruct;
    py.Py_IncRef(none);
    return none;
}

static const py_method_def capsule_from_slot_def = {"capsule_from_slot", python_capsule_from_slot, PY_METH_FASTCALL,
                                                    NULL};
static const py_method_def take_capsule_def = {"take_capsule", python_take_capsule, PY_METH_FASTCALL, NULL};
static const py_method_def take_api_def = {"take_api", python_take_api, PY_METH_FASTCALL, NULL};
static const py_method_def object_from_api_def = {"object_from_api", python_object_from_api, PY_METH_FASTCALL, NULL};
static const py_method_def capsules_from_batch_def = {"capsules_from_batch", python_capsules_from_batch,
                                                      PY_METH_FASTCALL, NULL};
static const py_method_def objects_from_batch_def = {"objects_from_batch", python_objects_from_batch, PY_METH_FASTCALL,
                                                     NULL};
static const py_method_def take_many_def = {"take_many", python_take_many, PY_METH_FASTCALL, NULL};
static const py_method_def tree_def = {"tree", python_tree, PY_METH_FASTCALL, NULL};
static const py_method_def take_tree_def = {"take_tree", python_take_tree, PY_METH_FASTCALL, NULL};

/* The Elixir side's hold on a slot: its number while open (-1 once
 * closed), which way it carries, and whether it carries a batch. */
typedef struct {
    _Atomic int k;
    int to_python;
    int batch;
    unsigned n; /* a batch's length */
} python_slot;

static tb_rtype slot_type;

/* What a slot still holds when it closes is released: our exports that
 * Python never took (no GIL needed), or Python's tensors that were never
 * imported (their deleters take the GIL: on the release thread). */
static void release_left(unsigned k, int to_python, int batch)
{
    uintptr_t left = tb_slot_take(&tb_library_state->python_slots, k);
    if (left && batch)
        batch_free((python_batch *)left, to_python, 0);
    else if (left && to_python)
        tb_dlpack_release(tagged_managed(left), (int)(left & 1));
    else if (left)
        tb_dlpack_release_later(tagged_managed(left), (int)(left & 1), 1);
    tb_slot_close(&tb_library_state->python_slots, k);
}

static void slot_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    python_slot *s = obj;
    int k = atomic_exchange(&s->k, -1);
    if (k >= 0)
        release_left((unsigned)k, s->to_python, s->batch);
}

int tb_python_open_type(ErlNifEnv *env, ErlNifResourceFlags flags)
{
    ErlNifResourceTypeInit init = {.dtor = slot_dtor, .members = 1};
    return tb_rtype_open(env, "tensor_blob_python_slot", &init, flags, &slot_type);
}

/* {K, Slot}, the slot open and holding word (0: empty; a batch's address
 * when batch); or the error, what word holds released. */
static ERL_NIF_TERM open_slot(ErlNifEnv *env, uintptr_t word, int to_python, int batch)
{
    /* A batch from Python: its length is Python's to say; taken as long. */
    unsigned n = !batch ? 0 : word ? (unsigned)((python_batch *)word)->n : UINT_MAX;
    int k = tb_slot_open(&tb_library_state->python_slots, word);
    if (k < 0) {
        if (word && batch)
            batch_free((python_batch *)word, to_python, 0);
        else if (word)
            tb_dlpack_release(tagged_managed(word), (int)(word & 1));
        return tb_raise_error(
            env, TB_WHY_NO_MEMORY, NULL,
            "too many exchanges with Python at once: %d are under way in this VM, the most there can be", TB_SLOTS);
    }
    python_slot *s = tb_rtype_alloc(&slot_type, sizeof *s);
    atomic_init(&s->k, k);
    s->to_python = to_python;
    s->batch = batch;
    s->n = n;
    ERL_NIF_TERM term = enif_make_resource(env, s);
    enif_release_resource(s);
    return enif_make_tuple2(env, enif_make_int(env, k), term);
}

/* The tensor term exported for Python as version (versioned, legacy, or
 * writable: versioned, for a consumer with no read-only tensors, PyTorch,
 * so that a read-only tensor is refused as a legacy export refuses it),
 * with to_dlpack's checks and errors: 1 with *word the slot's word, or 0
 * with *exc set. */
static int export_one(ErlNifEnv *env, ERL_NIF_TERM tensor, ERL_NIF_TERM version, uintptr_t *word, ERL_NIF_TERM *exc)
{
    tb_tensor_desc d;
    if (!tb_tensor_arg(env, tensor, "tensor", &d, exc))
        return 0;
    if (version != tb_atoms.versioned && version != tb_atoms.legacy && version != tb_atoms.writable) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "version",
                               "version: expected versioned, legacy or writable, got %T", version);
        return 0;
    }
    int versioned = version != tb_atoms.legacy, read_only = 0;
    if (!tb_dlpack_export_checks(env, &d, version == tb_atoms.versioned, &read_only, tb_atoms.undefined, exc))
        return 0;
    void *m = tb_dlpack_export(d.tensor->handle, versioned, read_only);
    if (!m) {
        *exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "out of memory exporting a tensor to Python");
        return 0;
    }
    *word = (uintptr_t)m | (uintptr_t)versioned;
    return 1;
}

/* python_slot_export(Tensor, versioned | legacy | writable) -> {K, Slot}:
 * the tensor exported (export_one) in a slot for Python to take. */
ERL_NIF_TERM tb_nif_python_slot_export(TB_NIF_PARAMS)
{
    uintptr_t word;
    ERL_NIF_TERM exc;
    if (!export_one(env, argv[0], argv[1], &word, &exc))
        return exc;
    return open_slot(env, word, 1, 0);
}

/* A batch as long as the list term (at most PYTHON_BATCH_MAX): 1, or 0
 * with *exc set. */
static int new_batch(ErlNifEnv *env, ERL_NIF_TERM term, python_batch **b, ERL_NIF_TERM *exc)
{
    unsigned n;
    if (!enif_get_list_length(env, term, &n) || n > PYTHON_BATCH_MAX) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "tensors",
                               "tensors: expected a list of at most %u tensors, got %T", PYTHON_BATCH_MAX, term);
        return 0;
    }
    if (!(*b = batch_new(n))) {
        *exc = tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "out of memory for a batch of %u tensors", n);
        return 0;
    }
    return 1;
}

/* Batches longer than this are made and imported on a dirty CPU
 * scheduler: a microsecond or so a tensor. */
#define PYTHON_BATCH_ON_SCHEDULER 64

/* 1 with *out set when the NIF self, for a batch of n, moved itself to a
 * dirty CPU scheduler (enif_schedule_nif); 0 to go on where it is. */
static int batch_go_dirty(ErlNifEnv *env, size_t n, const char *name, tb_nif_fun *self, int argc,
                          const ERL_NIF_TERM argv[], ERL_NIF_TERM *out)
{
    if (n <= PYTHON_BATCH_ON_SCHEDULER || enif_thread_type() == ERL_NIF_THR_DIRTY_CPU_SCHEDULER)
        return 0;
    *out = enif_schedule_nif(env, name, ERL_NIF_DIRTY_JOB_CPU_BOUND, self, argc, argv);
    return 1;
}

/* python_slot_export_many([Tensor], Version) -> {K, Slot}: each tensor
 * exported (export_one), in one batch in one slot; the first refusal
 * raised, what was exported released. */
ERL_NIF_TERM tb_nif_python_slot_export_many(TB_NIF_PARAMS)
{
    python_batch *b;
    unsigned n;
    ERL_NIF_TERM exc, head, list = argv[0];
    if (enif_get_list_length(env, argv[0], &n) &&
        batch_go_dirty(env, n, "python_slot_export_many", tb_nif_python_slot_export_many, argc, argv, &exc))
        return exc;
    if (!new_batch(env, argv[0], &b, &exc))
        return exc;
    for (size_t i = 0; enif_get_list_cell(env, list, &head, &list); i++)
        if (!export_one(env, head, argv[1], &b->tagged[i], &exc)) {
            batch_free(b, 1, 0);
            return exc;
        }
    return open_slot(env, (uintptr_t)b, 1, 1);
}

/* python_slot_receive() -> {K, Slot}: an empty slot for Python to fill. */
ERL_NIF_TERM tb_nif_python_slot_receive(TB_NIF_PARAMS)
{
    return open_slot(env, 0, 0, 0);
}

/* python_slot_receive_many() -> {K, Slot}: an empty slot for Python to
 * put a batch in (take_many). */
ERL_NIF_TERM tb_nif_python_slot_receive_many(TB_NIF_PARAMS)
{
    return open_slot(env, 0, 0, 1);
}

/* The tensor over a word Python put in a slot, imported as from_dlpack
 * imports (its deleter deferred into the release thread's hold of the
 * GIL); the library took it: a refused import calls the producer's deleter
 * as an accepted one does. */
static ERL_NIF_TERM import_word(ErlNifEnv *env, uintptr_t word)
{
    tb_dlpack_stream none;
    tb_dlpack_stream_decode(env, tb_atoms.undefined, &none);
    tb_dlpack_import_how how = {
        .read_only = 0, .deferred = TB_DEFER_PYTHON, .owned = 1, .claimed = TB_HANDED_NO, .stream = &none};
    return tb_dlpack_import(env, tagged_managed(word), (int)(word & 1), &how);
}

/* ---- Containers from Python, as terms ------------------------------------- */

/* A batch's description being read into terms (import_batch). */
typedef struct {
    ErlNifEnv *env;
    const char *at, *end;
    const ERL_NIF_TERM *terms;
    size_t next, n;
} term_reader;

/* The decimal digits at r, up to a ':' after them, at most max: 1, or 0. */
static int term_number(term_reader *r, uint64_t max, uint64_t *n)
{
    uint64_t v = 0;
    const char *p = r->at;
    for (; p < r->end && *p >= '0' && *p <= '9'; p++) {
        if (v > (max - (uint64_t)(*p - '0')) / 10)
            return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (p == r->at || p >= r->end || *p != ':')
        return 0;
    r->at = p + 1;
    *n = v;
    return 1;
}

/* A dict's key: a binary (str, bytes), or an integer of 64 bits (a larger
 * one is refused). 1, or 0. */
static int term_key(term_reader *r, ERL_NIF_TERM *key)
{
    char c = r->at < r->end ? *r->at++ : 0;
    uint64_t n;
    if (c == 'i') {
        int neg = r->at < r->end && *r->at == '-';
        r->at += neg;
        if (!term_number(r, neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, &n))
            return 0;
        *key = enif_make_int64(r->env, neg ? (ErlNifSInt64)(0 - n) : (ErlNifSInt64)n);
        return 1;
    }
    if (c != 's' || !term_number(r, (uint64_t)(r->end - r->at), &n) || n > (uint64_t)(r->end - r->at))
        return 0;
    memcpy(enif_make_new_binary(r->env, (size_t)n, key), r->at, (size_t)n);
    r->at += n;
    return 1;
}

static int term_node(term_reader *r, int depth, ERL_NIF_TERM *out);

/* The n entries of a list (map 0) or a map (1), into *out: 1, or 0 (a map
 * with two keys alike, a str and a bytes key of the same bytes, too). */
static int term_container(term_reader *r, size_t n, int map, int depth, ERL_NIF_TERM *out)
{
    ERL_NIF_TERM *values = enif_alloc((n ? n : 1) * (map ? 2 : 1) * sizeof *values), *keys = values + n;
    int ok = values != NULL;
    for (size_t i = 0; ok && i < n; i++)
        ok = (!map || term_key(r, &keys[i])) && term_node(r, depth + 1, &values[i]);
    if (ok && map)
        ok = enif_make_map_from_arrays(r->env, keys, values, n, out);
    else if (ok)
        *out = enif_make_list_from_array(r->env, values, (unsigned)n);
    enif_free(values);
    return ok;
}

/* The next node into *out: 1, or 0. */
static int term_node(term_reader *r, int depth, ERL_NIF_TERM *out)
{
    char c = r->at < r->end ? *r->at++ : 0;
    uint64_t n;
    if (c == 't' && r->next < r->n) {
        *out = r->terms[r->next++];
        return 1;
    }
    /* Each node takes a byte at least: no count past what is left. */
    return (c == 'l' || c == 'd') && depth < TREE_DEPTH && term_number(r, (uint64_t)(r->end - r->at), &n) &&
           term_container(r, (size_t)n, c == 'd', depth, out);
}

/* The container a batch's description gives, its tensors terms, into
 * *out: 1, or 0 when the description does not fit them. */
static int term_tree(ErlNifEnv *env, const python_batch *b, const ERL_NIF_TERM *terms, ERL_NIF_TERM *out)
{
    term_reader r = {.env = env, .at = b->desc, .end = b->desc + b->desc_len, .terms = terms, .next = 0, .n = b->n};
    return term_node(&r, 0, out) && r.at == r.end && r.next == r.n;
}

/* The list of the tensors over a batch's words (undefined where Python put
 * none), or the container its description gives (take_tree), the batch
 * freed; or the first import's error, raised, the words after it
 * released. */
static ERL_NIF_TERM import_batch(ErlNifEnv *env, python_batch *b)
{
    ERL_NIF_TERM *terms = enif_alloc((b->n ? b->n : 1) * sizeof *terms), result, reason;
    size_t i = 0;
    for (; i < b->n; i++) {
        uintptr_t word = b->tagged[i];
        b->tagged[i] = 0;
        terms[i] = word ? import_word(env, word) : tb_atoms.undefined;
        if (enif_has_pending_exception(env, &reason))
            break;
    }
    if (i < b->n)
        result = terms[i];
    else if (!b->desc)
        result = enif_make_list_from_array(env, terms, (unsigned)b->n);
    else if (!term_tree(env, b, terms, &result))
        result = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "object",
                                 "object: its container has two keys alike (a str and a bytes key of the same "
                                 "bytes), or an integer key beyond 64 bits");
    enif_free(terms);
    batch_free(b, 0, 0);
    return result;
}

/* python_slot_close(Slot) -> ok for a slot to Python (what Python did not
 * take released); for a slot from Python, the tensor over what Python put
 * there (import_word), or undefined when it put nothing; for a batch from
 * Python, the list of them (import_batch). */
ERL_NIF_TERM tb_nif_python_slot_close(TB_NIF_PARAMS)
{
    python_slot *s;
    ERL_NIF_TERM moved;
    if (!tb_rtype_get(env, argv[0], &slot_type, (void **)&s))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "slot", "slot: expected a Python slot, got %T", argv[0]);
    if (!s->to_python && batch_go_dirty(env, s->n, "python_slot_close", tb_nif_python_slot_close, argc, argv, &moved))
        return moved;
    int k = atomic_exchange(&s->k, -1);
    if (k < 0)
        return tb_raise_badarg(env, TB_WHY_GONE, "slot", "slot: closed already");
    if (s->to_python) {
        release_left((unsigned)k, 1, s->batch);
        return tb_atoms.ok;
    }
    uintptr_t got = tb_slot_take(&tb_library_state->python_slots, (unsigned)k);
    tb_slot_close(&tb_library_state->python_slots, (unsigned)k);
    if (!got)
        return tb_atoms.undefined;
    return s->batch ? import_batch(env, (python_batch *)got) : import_word(env, got);
}

/* The builtins' PyMethodDefs, by name, as the module makes them. */
static ERL_NIF_TERM builtins_map(ErlNifEnv *env)
{
    static const py_method_def *const defs[] = {
        &capsule_from_slot_def,  &take_capsule_def, &take_api_def, &object_from_api_def, &capsules_from_batch_def,
        &objects_from_batch_def, &take_many_def,    &tree_def,     &take_tree_def};
    enum { N = sizeof defs / sizeof defs[0] };
    ERL_NIF_TERM keys[N], values[N], map;
    for (int i = 0; i < N; i++) {
        keys[i] = enif_make_atom(env, defs[i]->name);
        values[i] = enif_make_uint64(env, (uintptr_t)defs[i]);
    }
    enif_make_map_from_arrays(env, keys, values, N, &map);
    return map;
}

/* python_capsule_abi(Library) -> #{capsule_from_slot, take_capsule, take_api, object_from_api}: binds
 * the interpreter's functions and exception types (PY_FUNCTIONS,
 * PY_OBJECTS) by name, from the libpython at the path Library (a binary)
 * that is loaded in this OS process already, and answers the addresses of
 * the two builtins' PyMethodDefs, for the library's Python code
 * (priv/python/tensor_blob_pythonx.py) to make them with
 * PyCFunction_NewEx. The release thread holds the GIL across a burst of
 * Python's deleters with PyGILState_Ensure/_Release (tb_release.h).
 *
 * Bound once per VM, before any builtin exists (there is one interpreter
 * per OS process): a second call must find the same functions. */
ERL_NIF_TERM tb_nif_python_capsule_abi(TB_NIF_PARAMS)
{
    ErlNifBinary path;
    char file[4096];
    if (!enif_inspect_binary(env, argv[0], &path) || path.size == 0 || path.size >= sizeof file ||
        memchr(path.data, 0, path.size))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "library",
                               "library: expected the path of the interpreter's libpython, as a binary, got %T",
                               argv[0]);
    memcpy(file, path.data, path.size);
    file[path.size] = 0;
    /* RTLD_NOLOAD: only a library this process has loaded already; the
     * handle, kept, keeps it loaded while the functions are bound. */
    void *handle = dlopen(file, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) {
        /* glibc sets no error when RTLD_NOLOAD finds nothing loaded. */
        const char *why = dlerror();
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "library",
                               "library: %s is not loaded in this OS process, so it is not this VM's Python (%s)", file,
                               why ? why : "no library loaded from that path");
    }
    py_api found;
    const char *missing = NULL;
    if (!py_lookup(handle, &found, &missing)) {
        dlclose(handle);
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "library",
                               "library: %s has no %s, so it is not a Python interpreter's C API", file, missing);
    }
    static pthread_mutex_t binding = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&binding);
    int bound = atomic_load(&py_bound);
    if (!bound) {
        py = found;
        tb_release_set_hold(py.PyGILState_Ensure, py.PyGILState_Release);
        atomic_store(&py_bound, 1);
    }
    pthread_mutex_unlock(&binding);
    int same = !bound || memcmp(&found, &py, sizeof found) == 0;
    if (bound)
        dlclose(handle); /* the first binding's handle is the one kept */
    if (!same)
        return tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "library",
                               "library: bound already to another interpreter's functions (one per VM), not %s's",
                               file);
    return builtins_map(env);
}
