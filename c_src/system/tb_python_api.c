/* The C API of the Python of this VM, bound by name from the libpython
 * loaded in this OS process (tb_python_api.h). */
#include "tb_python_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "tb_release.h"

tb_python_api_table tb_python_api;
static atomic_int python_bound;

int tb_python_api_bound(void)
{
    return atomic_load(&python_bound);
}

/* Looks up every name of the list in the library `handle`: 1, or 0 with
 * *missing the first name it lacks. */
static int python_lookup(void *handle, tb_python_api_table *api, const char **missing)
{
    void *found;
#define TB_PYTHON_LOOKUP(name)             \
    if (!(found = dlsym(handle, #name))) { \
        *missing = #name;                  \
        return 0;                          \
    }
    /* POSIX: a function's address, as dlsym gives it, fits a void *. */
#define TB_PYTHON_FUNCTION_LOOKUP(result, name, params) TB_PYTHON_LOOKUP(name) memcpy(&api->name, &found, sizeof found);
    TB_PYTHON_FUNCTIONS(TB_PYTHON_FUNCTION_LOOKUP)
#define TB_PYTHON_OBJECT_LOOKUP(name) TB_PYTHON_LOOKUP(name) api->name = *(void **)found;
    TB_PYTHON_OBJECTS(TB_PYTHON_OBJECT_LOOKUP)
#define TB_PYTHON_STATIC_LOOKUP(name) TB_PYTHON_LOOKUP(name) api->name = found;
    TB_PYTHON_STATICS(TB_PYTHON_STATIC_LOOKUP)
    return 1;
}

tb_python_api_status tb_python_api_bind(const char *file, const char **detail)
{
    /* RTLD_NOLOAD: only a library this process has loaded already; the
     * handle, kept, keeps it loaded while the functions are bound. */
    void *handle = dlopen(file, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) {
        /* glibc sets no error when RTLD_NOLOAD finds nothing loaded. */
        *detail = dlerror();
        return TB_PYTHON_API_NOT_LOADED;
    }
    tb_python_api_table found;
    if (!python_lookup(handle, &found, detail)) {
        dlclose(handle);
        return TB_PYTHON_API_MISSING;
    }
    static pthread_mutex_t binding = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&binding);
    int bound = atomic_load(&python_bound);
    if (!bound) {
        tb_python_api = found;
        tb_release_set_hold(tb_python_api.PyGILState_Ensure, tb_python_api.PyGILState_Release);
        atomic_store(&python_bound, 1);
    }
    pthread_mutex_unlock(&binding);
    int same = !bound || memcmp(&found, &tb_python_api, sizeof found) == 0;
    if (bound)
        dlclose(handle); /* the first binding's handle is the one kept */
    return same ? TB_PYTHON_API_BOUND : TB_PYTHON_API_OTHER_PYTHON;
}
