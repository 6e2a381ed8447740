/* Tensors to and from the Python of this VM (Pythonx, TensorBlob.Python).
 *
 * Capsules: Python holds our exports in PyCapsules named as the DLPack
 * protocol says, made by the library's own Python code with the destructor
 * below: a C function of this library, given to Python as an address of
 * this loaded image (never found again by path or by name), so the
 * capsule's release does not depend on ctypes callbacks or on which copy of
 * the library a second dlopen would find. The interpreter's
 * PyCapsule_IsValid and PyCapsule_GetPointer are given to us the same way,
 * from its own ctypes.pythonapi: the library links no libpython.
 *
 * Slots: a managed tensor crosses one evaluation in a slot (tb_slots.h)
 * whose number the evaluated code names, so that the code's text is one of
 * a few, compiled once each, and no address is ever decoded from or encoded
 * into a Python object. The slot is a resource of the calling process: if
 * the process dies, whatever is left in it is released with it. */
#include "tb_python.h"

#include "tb_dlpack_export.h"
#include "tb_nifs.h"
#include "tb_raise.h"
#include "tb_release.h"
#include "tb_rtype.h"
#include "tb_slots.h"
#include "tb_state.h"
#include "tb_term.h"

/* ---- Capsules ------------------------------------------------------------ */

typedef int (*py_is_valid_fn)(void *capsule, const char *name);
typedef void *(*py_get_pointer_fn)(void *capsule, const char *name);
typedef void *(*py_new_fn)(void *pointer, const char *name, void (*destructor)(void *));
typedef int (*py_set_name_fn)(void *capsule, const char *name);
static _Atomic(py_is_valid_fn) py_is_valid;
static _Atomic(py_get_pointer_fn) py_get_pointer;
static _Atomic(py_new_fn) py_new;
static _Atomic(py_set_name_fn) py_set_name;

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
    py_is_valid_fn valid = atomic_load(&py_is_valid);
    py_get_pointer_fn get = atomic_load(&py_get_pointer);
    if (!valid || !get)
        return;
    if (valid(capsule, name_versioned))
        tb_dlpack_release(get(capsule, name_versioned), 1);
    else if (valid(capsule, name_legacy))
        tb_dlpack_release(get(capsule, name_legacy), 0);
}

/* ---- Slots ------------------------------------------------------------------ */

/* A slot's word: a managed tensor's address (even), its low bit set when
 * the tensor is versioned. */
static void *tagged_managed(uintptr_t tagged)
{
    return (void *)(tagged & ~(uintptr_t)1);
}

/* Python's side, called by its ctypes with the GIL held (one call each
 * way: a ctypes call costs about what the rest of the exchange does). */

/* A new capsule over the export in slot k (a new reference), named for
 * what it holds, with our destructor; NULL when the slot is empty. */
static void *python_capsule_from_slot(unsigned k)
{
    py_new_fn new_capsule = atomic_load(&py_new);
    if (!new_capsule) /* not configured: the slot keeps its export */
        return NULL;
    uintptr_t tagged = tb_slot_take(&tb_st->python_slots, k);
    if (!tagged)
        return NULL;
    void *capsule =
        new_capsule(tagged_managed(tagged), tagged & 1 ? name_versioned : name_legacy, python_capsule_destructor);
    if (!capsule) /* Python's error is set (out of memory): ours again */
        tb_dlpack_release(tagged_managed(tagged), (int)(tagged & 1));
    return capsule;
}

/* What python_take_capsule answers. */
enum { TAKEN = 1, NOT_DLPACK = 0, HOLDS_NULL = -1, ODD_ADDRESS = -2, SLOT_REFUSED = -3 };

/* Takes the managed tensor of an unused DLPack capsule (versioned first)
 * into slot k, and marks the capsule used, so that neither it nor another
 * consumer frees the tensor. Anything else is left as it was. */
static int python_take_capsule(void *capsule, unsigned k)
{
    py_is_valid_fn valid = atomic_load(&py_is_valid);
    py_get_pointer_fn get = atomic_load(&py_get_pointer);
    py_set_name_fn rename = atomic_load(&py_set_name);
    if (!valid || !get || !rename)
        return NOT_DLPACK;
    int versioned = valid(capsule, name_versioned);
    if (!versioned && !valid(capsule, name_legacy))
        return NOT_DLPACK;
    uintptr_t address = (uintptr_t)get(capsule, versioned ? name_versioned : name_legacy);
    if (!address)
        return HOLDS_NULL;
    if (address & 1)
        return ODD_ADDRESS;
    /* Renamed first: a capsule left armed would free what the slot holds;
     * a refused slot (never, for the library's own code) leaks instead. */
    rename(capsule, versioned ? name_used_versioned : name_used_legacy);
    return tb_slot_put(&tb_st->python_slots, k, address | (uintptr_t)versioned) ? TAKEN : SLOT_REFUSED;
}

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

/* python_capsule_abi(#{is_valid, get_pointer, new, set_name, gil_ensure,
 * gil_release}) -> #{destructor, dltensor, dltensor_versioned,
 * used_dltensor, used_dltensor_versioned, capsule_from_slot,
 * take_capsule}: addresses for the library's Python code
 * (TensorBlob.Python), after binding the interpreter's functions given
 * (PyCapsule_IsValid, _GetPointer, _New, _SetName, PyGILState_Ensure,
 * _Release: the release thread holds the GIL across a burst of Python's
 * deleters, tb_release.h). */
ERL_NIF_TERM tb_nif_python_capsule_abi(TB_NIF_PARAMS)
{
    static const char *const arguments[] = {"is_valid", "get_pointer", "new", "set_name", "gil_ensure", "gil_release"};
    enum { FUNCTIONS = sizeof arguments / sizeof arguments[0] };
    ErlNifUInt64 functions[FUNCTIONS];
    for (int i = 0; i < FUNCTIONS; i++) {
        ERL_NIF_TERM value;
        if (!enif_get_map_value(env, argv[0], enif_make_atom(env, arguments[i]), &value) ||
            !enif_get_uint64(env, value, &functions[i]) || functions[i] == 0)
            return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "functions",
                                   "functions: expected a map holding the address of %s, got %T", arguments[i],
                                   argv[0]);
    }
    atomic_store(&py_is_valid, (py_is_valid_fn)(uintptr_t)functions[0]);
    atomic_store(&py_get_pointer, (py_get_pointer_fn)(uintptr_t)functions[1]);
    atomic_store(&py_new, (py_new_fn)(uintptr_t)functions[2]);
    atomic_store(&py_set_name, (py_set_name_fn)(uintptr_t)functions[3]);
    /* PyGILState_STATE is an enum: an int. */
    tb_release_set_hold((int (*)(void))(uintptr_t)functions[4], (void (*)(int))(uintptr_t)functions[5]);
    static const char *const keys[] = {"destructor",        name_legacy,         name_versioned, name_used_legacy,
                                       name_used_versioned, "capsule_from_slot", "take_capsule"};
    const void *values[] = {(const void *)(uintptr_t)python_capsule_destructor,
                            name_legacy,
                            name_versioned,
                            name_used_legacy,
                            name_used_versioned,
                            (const void *)(uintptr_t)python_capsule_from_slot,
                            (const void *)(uintptr_t)python_take_capsule};
    ERL_NIF_TERM map = enif_make_new_map(env);
    for (unsigned i = 0; i < sizeof keys / sizeof keys[0]; i++)
        enif_make_map_put(env, map, enif_make_atom(env, keys[i]), enif_make_uint64(env, (uintptr_t)values[i]), &map);
    return map;
}
