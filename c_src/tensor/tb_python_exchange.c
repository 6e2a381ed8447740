/* DLPack 1.3's C exchange API, for the Python door: the table checked and
 * cached, the builtins through it (tb_python_exchange.h). */
#include "tb_python_exchange.h"

#include <stdio.h>

#include "tb_dlpack_export.h"
#include "tb_python_builtin.h"
#include "tb_slots.h"
#include "tb_state.h"

static tb_python_api_table *const py = &tb_python_api;

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

const tb_DLPackExchangeAPI *tb_python_exchange_api(void *capsule)
{
    if (!py->PyCapsule_IsValid(capsule, TB_DLPACK_EXCHANGE_API_NAME)) {
        py->PyErr_SetString(py->PyExc_ValueError, "tensor_blob: the type's " TB_DLPACK_EXCHANGE_API_ATTR
                                                  " is no PyCapsule named \"" TB_DLPACK_EXCHANGE_API_NAME "\"");
        return NULL;
    }
    const void *raw = py->PyCapsule_GetPointer(capsule, TB_DLPACK_EXCHANGE_API_NAME);
    if (capsule == api_cache.capsule && raw == api_cache.raw)
        return api_cache.api;
    const tb_DLPackExchangeAPI *api;
    tb_xapi_status status = tb_dlpack_exchange_api_find(raw, &api);
    if (status != TB_XAPI_OK) {
        char message[200];
        snprintf(message, sizeof message, "tensor_blob: the type's " TB_DLPACK_EXCHANGE_API_ATTR " holds %s",
                 tb_dlpack_xapi_text(status));
        py->PyErr_SetString(py->PyExc_ValueError, message);
        return NULL;
    }
    py->Py_IncRef(capsule);
    if (api_cache.capsule)
        py->Py_DecRef(api_cache.capsule);
    api_cache.capsule = capsule;
    api_cache.raw = raw;
    api_cache.api = api;
    return api;
}

int tb_python_exchange_succeeded(int rc, const char *entry)
{
    if (rc == 0)
        return 1;
    if (!py->PyErr_Occurred()) {
        char message[160];
        snprintf(message, sizeof message, "tensor_blob: the producer's %s failed and set no Python error", entry);
        py->PyErr_SetString(py->PyExc_BufferError, message);
    }
    return 0;
}

int tb_python_exchange_take(void *obj, void *capsule, uintptr_t *word)
{
    const tb_DLPackExchangeAPI *api = tb_python_exchange_api(capsule);
    if (!api)
        return TB_PYTHON_RAISED;
    tb_DLManagedTensorVersioned *m = NULL;
    if (!tb_python_exchange_succeeded(api->managed_tensor_from_py_object_no_sync(obj, &m),
                                      "managed_tensor_from_py_object_no_sync"))
        return TB_PYTHON_RAISED;
    if (!m)
        return TB_PYTHON_HOLDS_NULL;
    if ((uintptr_t)m & 1) { /* no slot's word: the producer's all the same */
        tb_dlpack_release(m, 1);
        return TB_PYTHON_ODD_ADDRESS;
    }
    *word = (uintptr_t)m | 1;
    return TB_PYTHON_TAKEN;
}

/* take_api(obj, api, k): takes obj's managed tensor into slot k through
 * its type's table (tb_python_exchange_take). Answers TAKEN, HOLDS_NULL,
 * ODD_ADDRESS or SLOT_REFUSED as take_capsule does, or raises. */
static void *python_take_api(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    uintptr_t tagged = 0;
    if (!tb_python_builtin_enter(args, nargs, 3, &k))
        return NULL;
    int taken = tb_python_exchange_take(args[0], args[1], &tagged);
    return taken == TB_PYTHON_RAISED ? NULL : py->PyLong_FromLong(tb_python_builtin_put(k, taken, tagged));
}

/* object_from_api(api, k): the producer's object over the versioned export
 * in slot k, made by the table of api (checked first), which takes the
 * export over, on failure too. */
static void *python_object_from_api(void *self, void *const *args, ssize_t nargs)
{
    (void)self;
    unsigned k;
    if (!tb_python_builtin_enter(args, nargs, 2, &k))
        return NULL;
    const tb_DLPackExchangeAPI *api = tb_python_exchange_api(args[0]);
    if (!api)
        return NULL;
    uintptr_t tagged = tb_slot_take(&tb_library_state->python_slots, k);
    if (!tagged || !(tagged & 1)) {
        if (tagged)
            tb_dlpack_release(tb_python_builtin_managed(tagged), 0);
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: the slot holds no versioned export");
        return NULL;
    }
    void *object = NULL;
    if (!tb_python_exchange_succeeded(
            api->managed_tensor_to_py_object_no_sync(tb_python_builtin_managed(tagged), &object),
            "managed_tensor_to_py_object_no_sync"))
        return NULL;
    if (!object)
        py->PyErr_SetString(py->PyExc_BufferError, "tensor_blob: the producer made no object and set no error");
    return object;
}

const tb_python_method_def tb_python_exchange_take_api_def = {"take_api", python_take_api, TB_PYTHON_METH_FASTCALL,
                                                              NULL};
const tb_python_method_def tb_python_exchange_object_from_api_def = {"object_from_api", python_object_from_api,
                                                                     TB_PYTHON_METH_FASTCALL, NULL};
