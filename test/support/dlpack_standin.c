/* A stand-in DLPack producer for the tests of DLPack 1.3's C exchange API
 * (test/python_exchange_api_test.exs): tables of C functions, good and
 * bad, that the test hands to Python in PyCapsules named as the standard
 * says, on a Python type of its own. Built by the test itself, with no
 * Python header: the one Python function it calls (PyErr_SetString, for an
 * entry that fails as the standard says) is found by name in the process.
 *
 * Every tensor the good table makes is a fresh float32 [4] holding 1, 2,
 * 3, 4, in memory of its own; its deleter frees it. The counts say how
 * many were made and freed, and how many times an entry of a table that
 * must never be called was called. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_blob_dlpack.h"

static atomic_int made, freed, bad_calls;

/* Python's error, set as a producer does on failure (the GIL is held). */
static void set_python_error(const char *message)
{
    void (*set)(void *, const char *) = NULL;
    void *found = dlsym(RTLD_DEFAULT, "PyErr_SetString");
    void **type = dlsym(RTLD_DEFAULT, "PyExc_RuntimeError");
    memcpy(&set, &found, sizeof found);
    if (set && type)
        set(*type, message);
}

typedef struct {
    tb_DLManagedTensorVersioned m;
    int64_t shape[1];
    float data[4];
} standin_tensor;

static void standin_deleter(tb_DLManagedTensorVersioned *self)
{
    free(self); /* the managed tensor is the first field */
    atomic_fetch_add(&freed, 1);
}

static int from_object(void *obj, tb_DLManagedTensorVersioned **out)
{
    (void)obj;
    standin_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        set_python_error("stand-in: out of memory");
        return -1;
    }
    for (int i = 0; i < 4; i++)
        t->data[i] = (float)(i + 1);
    t->shape[0] = 4;
    t->m.version.major = 1;
    t->m.version.minor = 3;
    t->m.deleter = standin_deleter;
    t->m.dl_tensor.data = t->data;
    t->m.dl_tensor.device.device_type = tb_kDLCPU;
    t->m.dl_tensor.ndim = 1;
    t->m.dl_tensor.dtype.code = tb_kDLFloat;
    t->m.dl_tensor.dtype.bits = 32;
    t->m.dl_tensor.dtype.lanes = 1;
    t->m.dl_tensor.shape = t->shape;
    atomic_fetch_add(&made, 1);
    *out = &t->m;
    return 0;
}

static int from_object_fails(void *obj, tb_DLManagedTensorVersioned **out)
{
    (void)obj, (void)out;
    set_python_error("stand-in: this producer refuses every object");
    return -1;
}

static int from_object_fails_silently(void *obj, tb_DLManagedTensorVersioned **out)
{
    (void)obj, (void)out;
    return -1;
}

static int from_object_gives_null(void *obj, tb_DLManagedTensorVersioned **out)
{
    (void)obj;
    *out = NULL;
    return 0;
}

/* The entry of a table the consumer must refuse: counted if ever called. */
static int never_from(void *obj, tb_DLManagedTensorVersioned **out)
{
    (void)obj, (void)out;
    atomic_fetch_add(&bad_calls, 1);
    set_python_error("stand-in: an entry of a bad table was called");
    return -1;
}

static int allocator(tb_DLTensor *prototype, tb_DLManagedTensorVersioned **out, void *ctx,
                     void (*set_error)(void *, const char *, const char *))
{
    (void)prototype, (void)out;
    set_error(ctx, "RuntimeError", "stand-in: allocates nothing");
    return -1;
}

static int to_object(tb_DLManagedTensorVersioned *tensor, void **out)
{
    (void)out;
    if (tensor && tensor->deleter)
        tensor->deleter(tensor); /* ownership is taken, on failure too */
    set_python_error("stand-in: makes no objects");
    return -1;
}

static int work_stream(int32_t type, int32_t id, void **out)
{
    (void)type, (void)id;
    *out = NULL;
    return 0;
}

#define TABLE(major, minor, from)                                                                        \
    {                                                                                                    \
        .header = {{major, minor}, NULL}, .managed_tensor_allocator = allocator,                         \
        .managed_tensor_from_py_object_no_sync = from, .managed_tensor_to_py_object_no_sync = to_object, \
        .dltensor_from_py_object_no_sync = NULL, .current_work_stream = work_stream                      \
    }

tb_DLPackExchangeAPI standin_good = TABLE(1, 3, from_object);
tb_DLPackExchangeAPI standin_fails = TABLE(1, 3, from_object_fails);
tb_DLPackExchangeAPI standin_fails_silently = TABLE(1, 3, from_object_fails_silently);
tb_DLPackExchangeAPI standin_gives_null = TABLE(1, 3, from_object_gives_null);
tb_DLPackExchangeAPI standin_version_0 = TABLE(0, 8, never_from);
tb_DLPackExchangeAPI standin_version_1_2 = TABLE(1, 2, never_from);
tb_DLPackExchangeAPI standin_null_from = TABLE(1, 3, NULL);
tb_DLPackExchangeAPI standin_null_stream = TABLE(1, 3, never_from);
/* A later major whose chain leads to the good 1.3 table; and one leading
 * to a 0.x table only. */
tb_DLPackExchangeAPI standin_later = TABLE(2, 0, never_from);
tb_DLPackExchangeAPI standin_later_over_0 = TABLE(2, 0, never_from);

void standin_init(void)
{
    standin_null_stream.current_work_stream = NULL;
    standin_later.header.prev_api = &standin_good.header;
    standin_later_over_0.header.prev_api = &standin_version_0.header;
}

/* made, freed, bad_calls. */
void standin_counts(int *out)
{
    out[0] = atomic_load(&made);
    out[1] = atomic_load(&freed);
    out[2] = atomic_load(&bad_calls);
}
