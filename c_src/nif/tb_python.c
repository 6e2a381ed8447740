/* Tensors to and from the Python of this VM (Pythonx, TensorBlob.Python):
 * the slot resource a tensor or a batch crosses one evaluation in, and the
 * NIFs of the Python door.
 *
 * The library links no libpython: python_capsule_abi binds the
 * interpreter's C API by name (tb_python_api.h) from the libpython loaded
 * in this OS process, and in return answers the builtins Python's side
 * calls, all C functions of this loaded image, so nothing depends on
 * ctypes callbacks or on which copy of the library a second dlopen would
 * find: a tensor in a capsule (tb_python_builtin), through DLPack 1.3's C
 * exchange API (tb_python_exchange), many in a batch (tb_python_batch), a
 * container's description read (tb_python_tree) and walked (tb_python_walk).
 *
 * Slots: a managed tensor crosses one evaluation in a slot (tb_slots.h)
 * whose number the evaluated code names, so that the code's text is one of
 * a few, compiled once each, and no address is ever decoded from or encoded
 * into a Python object. The slot is a resource of the calling process: if
 * the process dies, whatever is left in it is released with it. */
#include "tb_python.h"

#include <limits.h>
#include <string.h>

#include "tb_dlpack_exchange.h"
#include "tb_dlpack_export.h"
#include "tb_nifs.h"
#include "tb_python_api.h"
#include "tb_python_batch.h"
#include "tb_python_builtin.h"
#include "tb_python_describe.h"
#include "tb_python_exchange.h"
#include "tb_python_tree.h"
#include "tb_python_walk.h"
#include "tb_raise.h"
#include "tb_rtype.h"
#include "tb_slots.h"
#include "tb_state.h"
#include "tb_term.h"

/* ---- Slots ------------------------------------------------------------------ */

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
        tb_python_batch_free((tb_python_batch *)left, to_python, 0);
    else if (left && to_python)
        tb_dlpack_release(tb_python_builtin_managed(left), (int)(left & 1));
    else if (left)
        tb_dlpack_release_later(tb_python_builtin_managed(left), (int)(left & 1), 1);
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
    unsigned n = !batch ? 0 : word ? (unsigned)((tb_python_batch *)word)->n : UINT_MAX;
    int k = tb_slot_open(&tb_library_state->python_slots, word);
    if (k < 0) {
        if (word && batch)
            tb_python_batch_free((tb_python_batch *)word, to_python, 0);
        else if (word)
            tb_dlpack_release(tb_python_builtin_managed(word), (int)(word & 1));
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

/* 1 where version is versioned, legacy or writable; else 0 with *exc
 * set. */
static int version_ok(ErlNifEnv *env, ERL_NIF_TERM version, ERL_NIF_TERM *exc)
{
    if (version == tb_atoms.versioned || version == tb_atoms.legacy || version == tb_atoms.writable)
        return 1;
    *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "version", "version: expected versioned, legacy or writable, got %T",
                           version);
    return 0;
}

/* The tensor term exported for Python as version (versioned, legacy, or
 * writable: versioned, for a consumer with no read-only tensors, PyTorch,
 * so that a read-only tensor is refused as a legacy export refuses it),
 * with to_dlpack's checks and errors: 1 with *word the slot's word, or 0
 * with *exc set. */
static int export_one(ErlNifEnv *env, ERL_NIF_TERM tensor, const char *field, ERL_NIF_TERM version, uintptr_t *word,
                      ERL_NIF_TERM *exc)
{
    tb_tensor_desc d;
    if (!tb_tensor_arg(env, tensor, field, &d, exc) || !version_ok(env, version, exc))
        return 0;
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
    if (!export_one(env, argv[0], "tensor", argv[1], &word, &exc))
        return exc;
    return open_slot(env, word, 1, 0);
}

/* A batch as long as the list term (at most TB_PYTHON_BATCH_MAX): 1, or 0
 * with *exc set. */
static int new_batch(ErlNifEnv *env, ERL_NIF_TERM term, tb_python_batch **b, ERL_NIF_TERM *exc)
{
    unsigned n;
    if (!enif_get_list_length(env, term, &n) || n > TB_PYTHON_BATCH_MAX) {
        *exc = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "tensors",
                               "tensors: expected a list of at most %u tensors, got %T", TB_PYTHON_BATCH_MAX, term);
        return 0;
    }
    if (!(*b = tb_python_batch_new(n))) {
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
    tb_python_batch *b;
    unsigned n;
    ERL_NIF_TERM exc, head, list = argv[0];
    if (enif_get_list_length(env, argv[0], &n) &&
        batch_go_dirty(env, n, "python_slot_export_many", tb_nif_python_slot_export_many, argc, argv, &exc))
        return exc;
    if (!new_batch(env, argv[0], &b, &exc))
        return exc;
    for (size_t i = 0; enif_get_list_cell(env, list, &head, &list); i++)
        if (!export_one(env, head, "tensor", argv[1], &b->tagged[i], &exc)) {
            tb_python_batch_free(b, 1, 0);
            return exc;
        }
    return open_slot(env, (uintptr_t)b, 1, 1);
}

/* python_slot_export_tree(Container, Version) -> {K, Slot, Desc} | other:
 * a container of tensors (nested maps and lists) described for Python
 * (tb_python_describe) and its tensors exported as
 * python_slot_export_many/2 exports them; other where it holds anything
 * the description does not take, for the caller's own walk to describe or
 * refuse. */
ERL_NIF_TERM tb_nif_python_slot_export_tree(TB_NIF_PARAMS)
{
    tb_python_described got;
    tb_python_batch *b = NULL;
    ERL_NIF_TERM exc, desc, slot;
    if (!tb_python_is_container(env, argv[0]))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "tensors", "tensors: expected a map or a list of tensors, got %T",
                               argv[0]);
    if (!version_ok(env, argv[1], &exc))
        return exc;
    int code = tb_python_describe(env, argv[0], &got);
    if (code != TB_DESCRIBED) {
        tb_python_described_free(&got);
        return code == TB_DESCRIBE_OTHER
                   ? tb_atoms.other
                   : tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "out of memory describing a container of tensors");
    }
    if (got.n > TB_PYTHON_BATCH_MAX) {
        tb_python_described_free(&got);
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "tensors", "tensors: more than %u tensors in one container",
                               TB_PYTHON_BATCH_MAX);
    }
    int moved = batch_go_dirty(env, got.n, "python_slot_export_tree", tb_nif_python_slot_export_tree, argc, argv, &exc);
    if (moved || !(b = tb_python_batch_new(got.n))) {
        unsigned n = (unsigned)got.n;
        tb_python_described_free(&got);
        return moved ? exc : tb_raise_error(env, TB_WHY_NO_MEMORY, NULL, "out of memory for a batch of %u tensors", n);
    }
    for (size_t i = 0; i < got.n; i++)
        if (!export_one(env, got.leaves[i], "tensors", argv[1], &b->tagged[i], &exc)) {
            tb_python_batch_free(b, 1, 0);
            tb_python_described_free(&got);
            return exc;
        }
    memcpy(enif_make_new_binary(env, got.desc.len, &desc), got.desc.bytes, got.desc.len);
    tb_python_described_free(&got);
    slot = open_slot(env, (uintptr_t)b, 1, 1);
    const ERL_NIF_TERM *k_slot;
    int arity;
    if (enif_has_pending_exception(env, NULL) || !enif_get_tuple(env, slot, &arity, &k_slot))
        return slot;
    return enif_make_tuple3(env, k_slot[0], k_slot[1], desc);
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
 * GIL), as the struct of module unless module is none; the library took
 * it: a refused import calls the producer's deleter as an accepted one
 * does. */
static ERL_NIF_TERM import_word(ErlNifEnv *env, uintptr_t word, ERL_NIF_TERM module)
{
    tb_dlpack_stream none;
    tb_dlpack_stream_decode(env, tb_atoms.undefined, &none);
    tb_dlpack_import_how how = {
        .read_only = 0, .deferred = TB_DEFER_PYTHON, .owned = 1, .claimed = TB_HANDED_NO, .stream = &none};
    ERL_NIF_TERM tensor = tb_dlpack_import(env, tb_python_builtin_managed(word), (int)(word & 1), &how), reason;
    if (module == tb_atoms.none || enif_has_pending_exception(env, &reason))
        return tensor;
    /* An Elixir struct is a map with __struct__: made here, a batch's
     * tensors need no second walk over the container to wrap them. */
    ERL_NIF_TERM keys[2] = {tb_atoms.struct_, tb_atoms.ref}, values[2] = {module, tensor}, wrapped;
    enif_make_map_from_arrays(env, keys, values, 2, &wrapped);
    return wrapped;
}

/* The list of the tensors over a batch's words (undefined where Python put
 * none), or the container its description gives (take_tree), the batch
 * freed; or the first import's error, raised, the words after it
 * released. */
static ERL_NIF_TERM import_batch(ErlNifEnv *env, tb_python_batch *b, ERL_NIF_TERM module)
{
    ERL_NIF_TERM *terms = enif_alloc((b->n ? b->n : 1) * sizeof *terms), result, reason;
    size_t i = 0;
    for (; i < b->n; i++) {
        uintptr_t word = b->tagged[i];
        b->tagged[i] = 0;
        terms[i] = word ? import_word(env, word, module) : tb_atoms.undefined;
        if (enif_has_pending_exception(env, &reason))
            break;
    }
    if (i < b->n)
        result = terms[i];
    else if (!b->desc)
        result = enif_make_list_from_array(env, terms, (unsigned)b->n);
    else if (!tb_python_tree_terms(env, b, terms, &result))
        result = tb_raise_badarg(env, TB_WHY_BAD_VALUE, "object",
                                 "object: its container has two keys alike (a str and a bytes key of the same "
                                 "bytes), or an integer key beyond 64 bits");
    enif_free(terms);
    tb_python_batch_free(b, 0, 0);
    return result;
}

/* python_slot_close(Slot, Module) -> ok for a slot to Python (what Python
 * did not take released); for a slot from Python, the tensor over what
 * Python put there (import_word; as Module's struct unless Module is
 * none), or undefined when it put nothing; for a batch from Python, the
 * list of them or their container (import_batch). */
ERL_NIF_TERM tb_nif_python_slot_close(TB_NIF_PARAMS)
{
    python_slot *s;
    ERL_NIF_TERM moved;
    if (!tb_rtype_get(env, argv[0], &slot_type, (void **)&s))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "slot", "slot: expected a Python slot, got %T", argv[0]);
    if (!enif_is_atom(env, argv[1]))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "module", "module: expected none or a module's name, got %T",
                               argv[1]);
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
    return s->batch ? import_batch(env, (tb_python_batch *)got, argv[1]) : import_word(env, got, argv[1]);
}

/* The builtins' PyMethodDefs, by name, as the module makes them. */
static ERL_NIF_TERM builtins_map(ErlNifEnv *env)
{
    static const tb_python_method_def *const defs[] = {&tb_python_builtin_capsule_from_slot_def,
                                                       &tb_python_builtin_take_capsule_def,
                                                       &tb_python_exchange_take_api_def,
                                                       &tb_python_exchange_object_from_api_def,
                                                       &tb_python_batch_capsules_from_batch_def,
                                                       &tb_python_batch_objects_from_batch_def,
                                                       &tb_python_batch_take_many_def,
                                                       &tb_python_tree_def,
                                                       &tb_python_walk_take_tree_def};
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
 * the interpreter's functions and exception types (TB_PYTHON_FUNCTIONS,
 * TB_PYTHON_OBJECTS) by name, from the libpython at the path Library (a
 * binary) that is loaded in this OS process already (tb_python_api_bind),
 * and answers the addresses of the two builtins' PyMethodDefs, for the
 * library's Python code (priv/python/tensor_blob_pythonx.py) to make them
 * with PyCFunction_NewEx. The release thread holds the GIL across a burst
 * of Python's deleters with PyGILState_Ensure/_Release (tb_release.h).
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
    const char *detail = NULL;
    switch (tb_python_api_bind(file, &detail)) {
    case TB_PYTHON_API_BOUND: return builtins_map(env);
    case TB_PYTHON_API_NOT_LOADED:
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "library",
                               "library: %s is not loaded in this OS process, so it is not this VM's Python (%s)", file,
                               detail ? detail : "no library loaded from that path");
    case TB_PYTHON_API_MISSING:
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "library",
                               "library: %s has no %s, so it is not a Python interpreter's C API", file, detail);
    default:
        return tb_raise_badarg(env, TB_WHY_UNSUPPORTED, "library",
                               "library: bound already to another interpreter's functions (one per VM), not %s's",
                               file);
    }
}
