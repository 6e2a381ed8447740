/* Tensors to and from the Python of this VM (Pythonx, TensorBlob.Python).
 *
 * The library links no libpython: the interpreter's C functions it calls
 * (PyCapsule_*, PyLong_*, PyErr_*, PyGILState_*) are given to it by
 * address, from the interpreter's own ctypes.pythonapi, once per VM
 * (python_capsule_abi). In return it gives Python two builtin functions
 * (PyMethodDef, METH_FASTCALL: a call costs what a call of len() does, a
 * twentieth of a ctypes call) and a capsule destructor, all C functions of
 * this loaded image (never found again by path or by name), so nothing
 * depends on ctypes callbacks or on which copy of the library a second
 * dlopen would find.
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

#include <pthread.h>
#include <string.h>
#include <sys/types.h>

#include "tb_dlpack_export.h"
#include "tb_nifs.h"
#include "tb_raise.h"
#include "tb_release.h"
#include "tb_rtype.h"
#include "tb_slots.h"
#include "tb_state.h"
#include "tb_term.h"

/* ---- The interpreter's functions -------------------------------------------- */

/* Set once per VM (python_capsule_abi), read with the GIL held. PyObject *
 * is void * here, Py_ssize_t ssize_t. */
typedef struct {
    int (*is_valid)(void *capsule, const char *name);
    void *(*get_pointer)(void *capsule, const char *name);
    void *(*new_capsule)(void *pointer, const char *name, void (*destructor)(void *));
    int (*set_name)(void *capsule, const char *name);
    unsigned long (*as_unsigned_long)(void *number);
    void *(*from_long)(long value);
    void (*set_string)(void *type, const char *message);
    void *(*occurred)(void);
    void *buffer_error, *type_error; /* PyExc_BufferError, PyExc_TypeError */
} py_api;
static py_api py;
static atomic_int py_bound;

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
    if (py.is_valid(capsule, name_versioned))
        tb_dlpack_release(py.get_pointer(capsule, name_versioned), 1);
    else if (py.is_valid(capsule, name_legacy))
        tb_dlpack_release(py.get_pointer(capsule, name_legacy), 0);
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
        py.set_string(py.type_error, "tensor_blob: a slot builtin was given the wrong number of arguments");
        return 0;
    }
    unsigned long number = py.as_unsigned_long(args[expected - 1]);
    if (number < TB_SLOTS) {
        *k = (unsigned)number;
        return 1;
    }
    if (!py.occurred())
        py.set_string(py.buffer_error, "tensor_blob: no such slot");
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
    uintptr_t tagged = tb_slot_take(&tb_st->python_slots, k);
    if (!tagged) {
        py.set_string(py.buffer_error, "tensor_blob: the slot holds no export (taken already, or closed)");
        return NULL;
    }
    void *capsule =
        py.new_capsule(tagged_managed(tagged), tagged & 1 ? name_versioned : name_legacy, python_capsule_destructor);
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
    int versioned = py.is_valid(capsule, name_versioned);
    if (!versioned && !py.is_valid(capsule, name_legacy))
        return py.from_long(NOT_DLPACK);
    uintptr_t address = (uintptr_t)py.get_pointer(capsule, versioned ? name_versioned : name_legacy);
    if (!address)
        return py.from_long(HOLDS_NULL);
    if (address & 1)
        return py.from_long(ODD_ADDRESS);
    /* Renamed first: a capsule left armed would free what the slot holds;
     * a refused slot (never, for the library's own code) leaks instead. */
    py.set_name(capsule, versioned ? name_used_versioned : name_used_legacy);
    int put = tb_slot_put(&tb_st->python_slots, k, address | (uintptr_t)versioned);
    return py.from_long(put ? TAKEN : SLOT_REFUSED);
}

static const py_method_def capsule_from_slot_def = {"capsule_from_slot", python_capsule_from_slot, PY_METH_FASTCALL,
                                                    NULL};
static const py_method_def take_capsule_def = {"take_capsule", python_take_capsule, PY_METH_FASTCALL, NULL};

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
    uintptr_t left = tb_slot_take(&tb_st->python_slots, k);
    if (left && to_python)
        tb_dlpack_release(tagged_managed(left), (int)(left & 1));
    else if (left)
        tb_dlpack_release_later(tagged_managed(left), (int)(left & 1), 1);
    tb_slot_close(&tb_st->python_slots, k);
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
    int k = tb_slot_open(&tb_st->python_slots, tagged);
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

/* python_slot_export(Tensor, versioned | legacy) -> {K, Slot}: the
 * tensor exported as to_dlpack exports it (its checks, its errors), in a
 * slot for Python to take. */
ERL_NIF_TERM tb_nif_python_slot_export(TB_NIF_PARAMS)
{
    ERL_NIF_TERM args[4] = {argv[0], argv[1], tb_atoms.false_, tb_atoms.undefined};
    ERL_NIF_TERM made = tb_nif_to_dlpack(env, 4, args);
    /* A raised error is no term to look at: returned as it is. */
    if (enif_has_pending_exception(env, NULL))
        return made;
    tb_capsule *c = tb_capsule_get(env, made);
    ERL_NIF_TERM exc;
    void *m = tb_capsule_managed(env, c, 1, NULL, &exc);
    if (!m)
        return exc;
    return open_slot(env, (uintptr_t)m | (uintptr_t)(c->versioned != 0), 1);
}

/* python_slot_receive() -> {K, Slot}: an empty slot for Python to fill. */
ERL_NIF_TERM tb_nif_python_slot_receive(TB_NIF_PARAMS)
{
    return open_slot(env, 0, 0);
}

/* python_slot_close(Slot) -> ok for a slot to Python (what Python did not
 * take released); for a slot from Python, the tensor over what Python put
 * there (imported as from_dlpack imports, its deleter deferred), or
 * undefined when it put nothing. */
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
    uintptr_t got = tb_slot_take(&tb_st->python_slots, (unsigned)k);
    tb_slot_close(&tb_st->python_slots, (unsigned)k);
    if (!got)
        return tb_atoms.undefined;
    ERL_NIF_TERM args[5] = {
        enif_make_tuple2(env, tb_atoms.unsafe_address, enif_make_uint64(env, (uintptr_t)tagged_managed(got))),
        got & 1 ? tb_atoms.versioned : tb_atoms.legacy, tb_atoms.false_, tb_atoms.undefined, tb_atoms.python};
    return tb_nif_from_dlpack(env, 5, args);
}

/* python_capsule_abi(#{Name => Address}) -> #{dltensor, dltensor_versioned,
 * used_dltensor, used_dltensor_versioned, capsule_from_slot,
 * take_capsule}: binds the interpreter's functions and exception types
 * named in `interpreter` below, by address, and answers the addresses of
 * the capsule names and of the two builtins' PyMethodDefs, for the
 * library's Python code (TensorBlob.Python) to make them with
 * PyCFunction_NewEx. The release thread holds the GIL across a burst of
 * Python's deleters with PyGILState_Ensure/_Release (tb_release.h).
 *
 * Bound once per VM, before any builtin exists (there is one interpreter
 * per OS process): a second call must give the same addresses. */
ERL_NIF_TERM tb_nif_python_capsule_abi(TB_NIF_PARAMS)
{
    static const char *const interpreter[] = {"PyCapsule_IsValid", "PyCapsule_GetPointer",  "PyCapsule_New",
                                              "PyCapsule_SetName", "PyLong_AsUnsignedLong", "PyLong_FromLong",
                                              "PyErr_SetString",   "PyErr_Occurred",        "PyExc_BufferError",
                                              "PyExc_TypeError",   "PyGILState_Ensure",     "PyGILState_Release"};
    enum { GIVEN = sizeof interpreter / sizeof interpreter[0] };
    ErlNifUInt64 at[GIVEN];
    for (int i = 0; i < GIVEN; i++) {
        ERL_NIF_TERM value;
        if (!enif_get_map_value(env, argv[0], enif_make_atom(env, interpreter[i]), &value) ||
            !enif_get_uint64(env, value, &at[i]) || at[i] == 0)
            return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "interpreter",
                                   "interpreter: expected a map holding the address of %s, got %T", interpreter[i],
                                   argv[0]);
    }
    py_api given = {
        .is_valid = (int (*)(void *, const char *))(uintptr_t)at[0],
        .get_pointer = (void *(*)(void *, const char *))(uintptr_t)at[1],
        .new_capsule = (void *(*)(void *, const char *, void (*)(void *)))(uintptr_t)at[2],
        .set_name = (int (*)(void *, const char *))(uintptr_t)at[3],
        .as_unsigned_long = (unsigned long (*)(void *))(uintptr_t)at[4],
        .from_long = (void *(*)(long))(uintptr_t)at[5],
        .set_string = (void (*)(void *, const char *))(uintptr_t)at[6],
        .occurred = (void *(*)(void))(uintptr_t)at[7],
        .buffer_error = (void *)(uintptr_t)at[8],
        .type_error = (void *)(uintptr_t)at[9],
    };
    static pthread_mutex_t binding = PTHREAD_MUTEX_INITIALIZER;
    static ErlNifUInt64 bound_at[GIVEN];
    pthread_mutex_lock(&binding);
    int bound = atomic_load(&py_bound);
    if (!bound) {
        py = given;
        memcpy(bound_at, at, sizeof at);
        /* PyGILState_STATE is an enum: an int. */
        tb_release_set_hold((int (*)(void))(uintptr_t)at[10], (void (*)(int))(uintptr_t)at[11]);
        atomic_store(&py_bound, 1);
    }
    pthread_mutex_unlock(&binding);
    if (bound && memcmp(at, bound_at, sizeof at) != 0)
        return tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "interpreter",
                               "interpreter: bound already to another interpreter's functions (one per VM)");
    static const char *const keys[] = {name_legacy,         name_versioned,      name_used_legacy,
                                       name_used_versioned, "capsule_from_slot", "take_capsule"};
    const void *values[] = {name_legacy,         name_versioned,         name_used_legacy,
                            name_used_versioned, &capsule_from_slot_def, &take_capsule_def};
    ERL_NIF_TERM map = enif_make_new_map(env);
    for (unsigned i = 0; i < sizeof keys / sizeof keys[0]; i++)
        enif_make_map_put(env, map, enif_make_atom(env, keys[i]), enif_make_uint64(env, (uintptr_t)values[i]), &map);
    return map;
}
