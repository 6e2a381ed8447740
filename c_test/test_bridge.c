/* The bridge header (priv/include/tensor_blob.h) as a consumer compiles it,
 * over a stand-in VM defined here: the lookup by name is made once and its
 * table serves every later call; a table that retires (its build's code
 * purged after an upgrade) sends the next call to the new build; a build
 * from before the table is asked in the first layout; threads calling at
 * once while a build retires always get an export, and every deleter runs
 * once. make tsan-test runs it under ThreadSanitizer. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tensor_blob.h"

/* ---- The stand-in VM: atoms, terms and enif_dynamic_resource_call ---- */

enum { ATOM_MODULE = 1, ATOM_OTHER = 2, ATOM_STRIPE = 100, TERM_TENSOR = 1000, TERM_NOT_A_TENSOR = 7 };

ERL_NIF_TERM enif_make_atom(ErlNifEnv *env, const char *name)
{
    (void)env;
    if (strcmp(name, "tensor_blob_nif") == 0)
        return ATOM_MODULE;
    if (strcmp(name, "tensor_blob_tensor") == 0)
        return ATOM_STRIPE;
    if (strncmp(name, "tensor_blob_tensor_", 19) == 0)
        return ATOM_STRIPE + (ERL_NIF_TERM)atoi(name + 19);
    return ATOM_OTHER;
}

int enif_is_map(ErlNifEnv *env, ERL_NIF_TERM term)
{
    (void)env;
    (void)term;
    return 0;
}

int enif_get_map_value(ErlNifEnv *env, ERL_NIF_TERM map, ERL_NIF_TERM key, ERL_NIF_TERM *value)
{
    (void)env;
    (void)map;
    (void)key;
    (void)value;
    return 0;
}

int enif_compare(ERL_NIF_TERM a, ERL_NIF_TERM b)
{
    return a < b ? -1 : a > b;
}

/* A build of the library: its table, whether it is loaded, and which
 * layouts its dynamic call takes. */
typedef struct {
    tensor_blob_bridge table;
    atomic_int loaded;
    atomic_int takes_table_layout;
} build;

static atomic_long exported, deleted, lookups;

static void deleter(tb_DLManagedTensorVersioned *m)
{
    free(m);
    atomic_fetch_add(&deleted, 1);
}

static int export_of(ERL_NIF_TERM term, tb_DLManagedTensorVersioned **out)
{
    if (term < TERM_TENSOR || term >= TERM_TENSOR + TENSOR_BLOB_TENSOR_TYPES)
        return TENSOR_BLOB_BRIDGE_NOT_A_TENSOR;
    tb_DLManagedTensorVersioned *m = calloc(1, sizeof *m);
    if (!m)
        return TENSOR_BLOB_BRIDGE_NO_MEMORY;
    m->deleter = deleter;
    atomic_fetch_add(&exported, 1);
    *out = m;
    return TENSOR_BLOB_BRIDGE_OK;
}

static build builds[2];
static _Atomic(build *) current; /* the build whose types the terms have */

static int to_dlpack_of(build *b, ERL_NIF_TERM term, tb_DLManagedTensorVersioned **out)
{
    if (atomic_load(&b->loaded) <= 0)
        return TENSOR_BLOB_BRIDGE_RETIRED;
    return export_of(term, out);
}

static int to_dlpack_0(ErlNifEnv *env, ERL_NIF_TERM term, uint32_t flags, tb_DLManagedTensorVersioned **out)
{
    (void)env;
    (void)flags;
    return to_dlpack_of(&builds[0], term, out);
}

static int to_dlpack_1(ErlNifEnv *env, ERL_NIF_TERM term, uint32_t flags, tb_DLManagedTensorVersioned **out)
{
    (void)env;
    (void)flags;
    return to_dlpack_of(&builds[1], term, out);
}

/* A tensor term lives in the stripe its value names; the call goes to the
 * current build, as the VM's goes to the type's current owner. */
int enif_dynamic_resource_call(ErlNifEnv *env, ERL_NIF_TERM module, ERL_NIF_TERM name, ERL_NIF_TERM term,
                               void *call_data)
{
    (void)env;
    atomic_fetch_add(&lookups, 1);
    if (module != ATOM_MODULE || term < TERM_TENSOR || name - ATOM_STRIPE != term - TERM_TENSOR)
        return 1;
    build *b = atomic_load(&current);
    tensor_blob_bridge_call *call = call_data;
    int table = atomic_load(&b->takes_table_layout) && call->version == TENSOR_BLOB_BRIDGE_VERSION;
    if (!table && call->version != TENSOR_BLOB_BRIDGE_VERSION_FIRST) {
        call->status = TENSOR_BLOB_BRIDGE_BAD_VERSION;
        return 0;
    }
    call->status = export_of(term, &call->tensor);
    if (table)
        call->bridge = &b->table;
    return 0;
}

/* The tables are a build's constants: written once, before any call. */
static void init_builds(void)
{
    for (int i = 0; i < 2; i++)
        builds[i].table = (tensor_blob_bridge){
            .version = TENSOR_BLOB_BRIDGE_VERSION,
            .size = sizeof(tensor_blob_bridge),
            .to_dlpack = i == 0 ? to_dlpack_0 : to_dlpack_1,
        };
}

static void load(int i, int takes_table_layout)
{
    atomic_store(&builds[i].takes_table_layout, takes_table_layout);
    atomic_store(&builds[i].loaded, 1);
    atomic_store(&current, &builds[i]);
}

/* One export through the header, released at once: its status. */
static int take_release(ERL_NIF_TERM term)
{
    tb_DLManagedTensorVersioned *m = NULL;
    int status = tensor_blob_to_dlpack(NULL, term, 0, &m);
    if (status == TENSOR_BLOB_BRIDGE_OK)
        m->deleter(m);
    return status;
}

static void test_sequential(void)
{
    load(0, 1);
    /* Found by name once (the tensor in the last stripe: every stripe
     * asked), then through the table alone. */
    CHECK_EQ(take_release(TERM_TENSOR + TENSOR_BLOB_TENSOR_TYPES - 1), TENSOR_BLOB_BRIDGE_OK);
    CHECK_EQ(atomic_load(&lookups), TENSOR_BLOB_TENSOR_TYPES);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(take_release(TERM_TENSOR + i % TENSOR_BLOB_TENSOR_TYPES), TENSOR_BLOB_BRIDGE_OK);
    CHECK_EQ(atomic_load(&lookups), TENSOR_BLOB_TENSOR_TYPES);

    /* Not a tensor: refused, nothing to free (and asked by name: it may be
     * a tensor of a build loaded since). */
    CHECK_EQ(take_release(TERM_NOT_A_TENSOR), TENSOR_BLOB_BRIDGE_NOT_A_TENSOR);

    /* An upgrade: the old table serves until its build's code is purged;
     * then the next call finds the new build, once. */
    load(1, 1);
    long before = atomic_load(&lookups);
    CHECK_EQ(take_release(TERM_TENSOR), TENSOR_BLOB_BRIDGE_OK);
    CHECK_EQ(atomic_load(&lookups), before);
    atomic_store(&builds[0].loaded, 0);
    CHECK_EQ(take_release(TERM_TENSOR), TENSOR_BLOB_BRIDGE_OK);
    CHECK_EQ(atomic_load(&lookups), before + 1);
    CHECK_EQ(take_release(TERM_TENSOR), TENSOR_BLOB_BRIDGE_OK);
    CHECK_EQ(atomic_load(&lookups), before + 1);

    /* A build from before the table: refused in the table's layout, then
     * asked in the first one, every call (it has no table to keep). */
    atomic_store(&builds[1].loaded, 0);
    load(0, 0);
    before = atomic_load(&lookups);
    CHECK_EQ(take_release(TERM_TENSOR), TENSOR_BLOB_BRIDGE_OK);
    CHECK_EQ(atomic_load(&lookups), before + 2);
    CHECK_EQ(take_release(TERM_TENSOR), TENSOR_BLOB_BRIDGE_OK);
    CHECK_EQ(atomic_load(&lookups), before + 4);
    CHECK_EQ(atomic_load(&exported), atomic_load(&deleted));
}

enum { THREADS = 4, CALLS = 20000 };
static atomic_long failed;

static void *caller(void *arg)
{
    ERL_NIF_TERM term = TERM_TENSOR + (ERL_NIF_TERM)(uintptr_t)arg % TENSOR_BLOB_TENSOR_TYPES;
    for (int i = 0; i < CALLS; i++)
        if (take_release(term) != TENSOR_BLOB_BRIDGE_OK)
            atomic_fetch_add(&failed, 1);
    return NULL;
}

/* Upgrades back and forth while the callers run: each new build loaded
 * before the old one retires, as the VM does it. */
static void *upgrader(void *arg)
{
    (void)arg;
    for (int i = 0; i < 200; i++) {
        int next = (i + 1) % 2;
        load(next, 1);
        atomic_store(&builds[1 - next].loaded, 0);
    }
    return NULL;
}

static void test_threads(void)
{
    load(0, 1);
    atomic_store(&builds[1].loaded, 0);
    long before = atomic_load(&lookups);
    pthread_t callers[THREADS], up;
    for (int i = 0; i < THREADS; i++)
        pthread_create(&callers[i], NULL, caller, (void *)(uintptr_t)i);
    pthread_create(&up, NULL, upgrader, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(callers[i], NULL);
    pthread_join(up, NULL);
    CHECK_EQ(atomic_load(&failed), 0);
    CHECK_EQ(atomic_load(&exported), atomic_load(&deleted));
    /* Lookups by name only when a table retired: far fewer than calls. */
    CHECK(atomic_load(&lookups) - before < (long)THREADS * CALLS / 10);
}

int main(void)
{
    init_builds();
    test_sequential();
    test_threads();
    printf("test_bridge: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
