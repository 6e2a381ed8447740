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
#include <pthread.h>
#include <stdio.h>
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
    X(int, PyGILState_Ensure, (void))                                                       \
    X(void, PyGILState_Release, (int state))
/* Its exception types: variables (PyObject *) of the library. */
#define PY_OBJECTS(X) X(PyExc_BufferError) X(PyExc_TypeError) X(PyExc_ValueError)

/* Set once per VM (python_capsule_abi), read with the GIL held. */
typedef struct {
#define PY_FUNCTION_FIELD(result, name, params) result(*name) params;
    PY_FUNCTIONS(PY_FUNCTION_FIELD)
#define PY_OBJECT_FIELD(name) void *name;
    PY_OBJECTS(PY_OBJECT_FIELD)
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

/* take_capsule(capsule, k): takes the managed tensor of an unused DLPack
 * capsule (versioned first) into slot k, and marks the capsule used, so
 * that neither it nor another consumer frees the tensor. Anything else is
 * left as it was. Answers one of the codes above. */
static void *python_take_capsule(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    if (!enter_builtin(args, nargs, 2, &k))
        return NULL;
    void *capsule = args[0];
    int versioned = py.PyCapsule_IsValid(capsule, name_versioned);
    if (!versioned && !py.PyCapsule_IsValid(capsule, name_legacy))
        return py.PyLong_FromLong(NOT_DLPACK);
    uintptr_t address = (uintptr_t)py.PyCapsule_GetPointer(capsule, versioned ? name_versioned : name_legacy);
    if (!address)
        return py.PyLong_FromLong(HOLDS_NULL);
    if (address & 1)
        return py.PyLong_FromLong(ODD_ADDRESS);
    /* Renamed first: a capsule left armed would free what the slot holds.
     * From here the tensor is the library's to release, on every path. */
    py.PyCapsule_SetName(capsule, versioned ? name_used_versioned : name_used_legacy);
    if (!tb_slot_put(&tb_library_state->python_slots, k, address | (uintptr_t)versioned)) {
        tb_dlpack_release((void *)address, versioned); /* the GIL is held here */
        return py.PyLong_FromLong(SLOT_REFUSED);
    }
    return py.PyLong_FromLong(TAKEN);
}

/* ---- DLPack 1.3's C exchange API ------------------------------------------ */

/* The table in a type's __dlpack_c_exchange_api__ capsule, searched and
 * checked (tb_dlpack_check.h); or NULL with Python's ValueError set, about
 * a capsule nothing of which is called. */
static const tb_DLPackExchangeAPI *exchange_api(void *capsule)
{
    if (!py.PyCapsule_IsValid(capsule, TB_DLPACK_EXCHANGE_API_NAME)) {
        py.PyErr_SetString(py.PyExc_ValueError, "tensor_blob: the type's " TB_DLPACK_EXCHANGE_API_ATTR
                                                " is no PyCapsule named \"" TB_DLPACK_EXCHANGE_API_NAME "\"");
        return NULL;
    }
    const tb_DLPackExchangeAPI *api;
    tb_xapi_status status =
        tb_dlpack_exchange_api_find(py.PyCapsule_GetPointer(capsule, TB_DLPACK_EXCHANGE_API_NAME), &api);
    if (status != TB_XAPI_OK) {
        char message[200];
        snprintf(message, sizeof message, "tensor_blob: the type's " TB_DLPACK_EXCHANGE_API_ATTR " holds %s",
                 tb_dlpack_xapi_text(status));
        py.PyErr_SetString(py.PyExc_ValueError, message);
        return NULL;
    }
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

/* take_api(obj, api, k): takes obj's managed tensor into slot k through
 * the table of api, its type's __dlpack_c_exchange_api__ capsule (checked
 * first: a bad one is refused, never called). Answers TAKEN, HOLDS_NULL,
 * ODD_ADDRESS or SLOT_REFUSED as take_capsule does, or raises. */
static void *python_take_api(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    if (!enter_builtin(args, nargs, 3, &k))
        return NULL;
    const tb_DLPackExchangeAPI *api = exchange_api(args[1]);
    if (!api)
        return NULL;
    tb_DLManagedTensorVersioned *m = NULL;
    if (!producer_succeeded(api->managed_tensor_from_py_object_no_sync(args[0], &m),
                            "managed_tensor_from_py_object_no_sync"))
        return NULL;
    if (!m)
        return py.PyLong_FromLong(HOLDS_NULL);
    if ((uintptr_t)m & 1) { /* no slot's word: the producer's all the same */
        tb_dlpack_release(m, 1);
        return py.PyLong_FromLong(ODD_ADDRESS);
    }
    if (!tb_slot_put(&tb_library_state->python_slots, k, (uintptr_t)m | 1)) {
        tb_dlpack_release(m, 1); /* the GIL is held here */
        return py.PyLong_FromLong(SLOT_REFUSED);
    }
    return py.PyLong_FromLong(TAKEN);
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

static const py_method_def capsule_from_slot_def = {"capsule_from_slot", python_capsule_from_slot, PY_METH_FASTCALL,
                                                    NULL};
static const py_method_def take_capsule_def = {"take_capsule", python_take_capsule, PY_METH_FASTCALL, NULL};
static const py_method_def take_api_def = {"take_api", python_take_api, PY_METH_FASTCALL, NULL};
static const py_method_def object_from_api_def = {"object_from_api", python_object_from_api, PY_METH_FASTCALL, NULL};

/* The Elixir side's hold on a slot: its number while open (-1 once
 * closed), and which way it carries. */
typedef struct {
    _Atomic int k;
    int to_python;
} python_slot;

static tb_rtype slot_type;

/* What a slot still holds when it closes is released: our export that
 * Python never took (no GIL needed), or Python's tensor that was never
 * imported (its deleter takes the GIL: on the release thread). */
static void release_left(unsigned k, int to_python)
{
    uintptr_t left = tb_slot_take(&tb_library_state->python_slots, k);
    if (left && to_python)
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
        release_left((unsigned)k, s->to_python);
}

int tb_python_open_type(ErlNifEnv *env, ErlNifResourceFlags flags)
{
    ErlNifResourceTypeInit init = {.dtor = slot_dtor, .members = 1};
    return tb_rtype_open(env, "tensor_blob_python_slot", &init, flags, &slot_type);
}

/* {K, Slot}, the slot open and holding tagged (0: empty); or the error,
 * tagged released. */
static ERL_NIF_TERM open_slot(ErlNifEnv *env, uintptr_t tagged, int to_python)
{
    int k = tb_slot_open(&tb_library_state->python_slots, tagged);
    if (k < 0) {
        if (tagged)
            tb_dlpack_release(tagged_managed(tagged), (int)(tagged & 1));
        return tb_raise_error(
            env, TB_WHY_NO_MEMORY, NULL,
            "too many exchanges with Python at once: %d are under way in this VM, the most there can be", TB_SLOTS);
    }
    python_slot *s = tb_rtype_alloc(&slot_type, sizeof *s);
    atomic_init(&s->k, k);
    s->to_python = to_python;
    ERL_NIF_TERM term = enif_make_resource(env, s);
    enif_release_resource(s);
    return enif_make_tuple2(env, enif_make_int(env, k), term);
}

/* python_slot_export(Tensor, versioned | legacy | writable) -> {K, Slot}: the
 * tensor exported as to_dlpack exports it (its checks, its errors), in a
 * slot for Python to take. */
ERL_NIF_TERM tb_nif_python_slot_export(TB_NIF_PARAMS)
{
    tb_tensor_desc d;
    ERL_NIF_TERM exc;
    if (!tb_tensor_arg(env, argv[0], "tensor", &d, &exc))
        return exc;
    if (argv[1] != tb_atoms.versioned && argv[1] != tb_atoms.legacy && argv[1] != tb_atoms.writable)
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "version",
                               "version: expected versioned, legacy or writable, got %T", argv[1]);
    /* writable: versioned, for a consumer with no read-only tensors (PyTorch),
     * so a read-only tensor is refused as a legacy export refuses it. */
    int versioned = argv[1] != tb_atoms.legacy, read_only = 0;
    if (!tb_dlpack_export_checks(env, &d, argv[1] == tb_atoms.versioned, &read_only, tb_atoms.undefined, &exc))
        return exc;
    void *m = tb_dlpack_export(d.tensor->handle, versioned, read_only);
    if (!m)
        return tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "out of memory exporting a tensor to Python");
    return open_slot(env, (uintptr_t)m | (uintptr_t)versioned, 1);
}

/* python_slot_receive() -> {K, Slot}: an empty slot for Python to fill. */
ERL_NIF_TERM tb_nif_python_slot_receive(TB_NIF_PARAMS)
{
    return open_slot(env, 0, 0);
}

/* python_slot_close(Slot) -> ok for a slot to Python (what Python did not
 * take released); for a slot from Python, the tensor over what Python put
 * there (imported as from_dlpack imports, its deleter deferred into the
 * release thread's hold of the GIL), or undefined when it put nothing.
 * The library took the capsule: a refused import calls the producer's
 * deleter as an accepted one does. */
ERL_NIF_TERM tb_nif_python_slot_close(TB_NIF_PARAMS)
{
    python_slot *s;
    if (!tb_rtype_get(env, argv[0], &slot_type, (void **)&s))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "slot", "slot: expected a Python slot, got %T", argv[0]);
    int k = atomic_exchange(&s->k, -1);
    if (k < 0)
        return tb_raise_badarg(env, TB_WHY_GONE, "slot", "slot: closed already");
    if (s->to_python) {
        release_left((unsigned)k, 1);
        return tb_atoms.ok;
    }
    uintptr_t got = tb_slot_take(&tb_library_state->python_slots, (unsigned)k);
    tb_slot_close(&tb_library_state->python_slots, (unsigned)k);
    if (!got)
        return tb_atoms.undefined;
    tb_dlpack_stream none;
    tb_dlpack_stream_decode(env, tb_atoms.undefined, &none);
    tb_dlpack_import_how how = {
        .read_only = 0, .deferred = TB_DEFER_PYTHON, .owned = 1, .claimed = TB_HANDED_NO, .stream = &none};
    return tb_dlpack_import(env, tagged_managed(got), (int)(got & 1), &how);
}

/* The builtins' PyMethodDefs, by name, as the module makes them. */
static ERL_NIF_TERM builtins_map(ErlNifEnv *env)
{
    static const py_method_def *const defs[] = {&capsule_from_slot_def, &take_capsule_def, &take_api_def,
                                                &object_from_api_def};
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
