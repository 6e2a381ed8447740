/* The C API of the Python of this VM, bound by name (tb_python_api.c).
 *
 * The library links no libpython: it binds the interpreter's C functions
 * it calls (PyCapsule_*, PyLong_*, PyErr_*, PyGILState_*, ...) by name,
 * once per VM, from the libpython already loaded in this OS process,
 * whose path the interpreter tells it: dlopen(RTLD_NOLOAD) loads nothing,
 * and nothing an Erlang caller passes becomes a call target. Here is the
 * one list of those names, the table they fill, and the interpreter's ABI
 * of a builtin function (PyMethodDef) that the Python door's builtins
 * (tb_python_builtin.h and the units above it) are made with. No BEAM:
 * the NIF that binds it (nif/tb_python.c) makes the terms. */
#ifndef TB_PYTHON_API_H
#define TB_PYTHON_API_H

#include <sys/types.h>

/* The one list of the interpreter's C API the library calls: each is looked
 * up by this name. PyObject * is void * here, Py_ssize_t ssize_t,
 * PyGILState_STATE (an enum) int. */
#define TB_PYTHON_FUNCTIONS(X)                                                              \
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
#define TB_PYTHON_OBJECTS(X) X(PyExc_BufferError) X(PyExc_TypeError) X(PyExc_ValueError)
/* Its static objects, whose addresses are the objects: bool's type, None. */
#define TB_PYTHON_STATICS(X) X(PyBool_Type) X(_Py_NoneStruct)

/* The interpreter's functions and objects, as the list names them. */
typedef struct {
#define TB_PYTHON_FUNCTION_FIELD(result, name, params) result(*name) params;
    TB_PYTHON_FUNCTIONS(TB_PYTHON_FUNCTION_FIELD)
#define TB_PYTHON_OBJECT_FIELD(name) void *name;
    TB_PYTHON_OBJECTS(TB_PYTHON_OBJECT_FIELD)
    TB_PYTHON_STATICS(TB_PYTHON_OBJECT_FIELD)
} tb_python_api_table;

/* Set once per VM (tb_python_api_bind), read with the GIL held: a builtin
 * exists only once it is set. */
extern tb_python_api_table tb_python_api;

/* Whether tb_python_api is set (any thread). */
int tb_python_api_bound(void);

/* What tb_python_api_bind answers. */
typedef enum {
    TB_PYTHON_API_BOUND,       /* bound now, or bound already to the same functions */
    TB_PYTHON_API_NOT_LOADED,  /* file is no library loaded in this OS process: *detail says why */
    TB_PYTHON_API_MISSING,     /* the library lacks a name of the list: *detail is the first */
    TB_PYTHON_API_OTHER_PYTHON /* bound already to another interpreter's functions (one per VM) */
} tb_python_api_status;

/* Binds every name of the list from the library at the path file, loaded
 * in this OS process already (RTLD_NOLOAD: the handle, kept, keeps it
 * loaded while the functions are bound), once per VM: there is one
 * interpreter per OS process, so a second call must find the same
 * functions. The release thread then holds the GIL across a burst of
 * Python's deleters with PyGILState_Ensure/_Release (tb_release.h). */
tb_python_api_status tb_python_api_bind(const char *file, const char **detail);

/* A PyMethodDef, as the stable ABI lays it out: a builtin whose C function
 * is one of this loaded image. */
typedef void *(*tb_python_fastcall)(void *self, void *const *args, ssize_t nargs);
typedef struct {
    const char *name;
    tb_python_fastcall function;
    int flags;
    const char *doc;
} tb_python_method_def;
enum { TB_PYTHON_METH_FASTCALL = 0x0080 };

#endif
