/* The bench's Python extension (bench/exchange_loop.exs, built by `make
 * bench-nif` where Python's headers are; never shipped): loop(obj, n,
 * rounds) answers the least ns per managed_tensor_from_py_object_no_sync
 * of obj's type's DLPack C exchange API table and the managed tensor's
 * deleter, in loops of n, best of rounds: the loop shape of the bench
 * NIF's exchange_loop (exchange_loop.h). make_loop(obj, n, rounds) answers
 * the same for from-object, managed_tensor_to_py_object_no_sync of what
 * it gave and the new object's release: what the producer's own making
 * and freeing of one tensor costs (make_loop less loop), the floor of
 * every tensor a batch hands it (bench/python_exchange.exs). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "exchange_loop.h"

/* The table of version 1.3 or later in the chain the capsule holds; NULL
 * with Python's error set. */
static const tb_DLPackExchangeAPI *table_of(PyObject *obj)
{
    PyObject *capsule = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__dlpack_c_exchange_api__");
    if (!capsule)
        return NULL;
    const tb_DLPackExchangeAPIHeader *h = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    Py_DECREF(capsule); /* the type holds it */
    for (int i = 0; h && i < 16; i++, h = h->prev_api)
        if (h->version.major == 1 && h->version.minor >= 3)
            return (const tb_DLPackExchangeAPI *)h;
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "no DLPack exchange API table of version 1.3 or later");
    return NULL;
}

/* From-object, then to-object of the managed tensor (which takes it: its
 * deleter runs when the new object goes), then the new object released;
 * best ns per round, or -1 when an entry failed. */
static double make_rounds(const tb_DLPackExchangeAPI *api, PyObject *obj, long n, int rounds)
{
    double best = -1.0;
    for (int round = 0; round < rounds; round++) {
        int64_t t0 = exchange_loop_now_ns();
        for (long i = 0; i < n; i++) {
            tb_DLManagedTensorVersioned *m = NULL;
            PyObject *made = NULL;
            if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0 || !m)
                return -1.0;
            if (api->managed_tensor_to_py_object_no_sync(m, (void **)&made) != 0 || !made) {
                m->deleter(m);
                return -1.0;
            }
            Py_DECREF(made);
        }
        double ns = (double)(exchange_loop_now_ns() - t0) / (double)n;
        if (best < 0 || ns < best)
            best = ns;
    }
    return best;
}

/* loop (make 0) or make_loop (make 1) of (obj, n, rounds). */
static PyObject *run(PyObject *args, int make)
{
    PyObject *obj;
    long n;
    int rounds;
    const tb_DLPackExchangeAPI *api;
    if (!PyArg_ParseTuple(args, "Oli", &obj, &n, &rounds))
        return NULL;
    if (n <= 0 || rounds <= 0)
        return PyErr_SetString(PyExc_ValueError, "n and rounds > 0"), NULL;
    if (!(api = table_of(obj)))
        return NULL;
    double best;
    if (make)
        best = make_rounds(api, obj, n, rounds);
    else
        EXCHANGE_LOOP(best, n, rounds, api->managed_tensor_from_py_object_no_sync(obj, &m));
    if (best < 0)
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_RuntimeError, "an entry failed"), NULL);
    return PyFloat_FromDouble(best);
}

static PyObject *loop(PyObject *self, PyObject *args)
{
    (void)self;
    return run(args, 0);
}

static PyObject *make_loop(PyObject *self, PyObject *args)
{
    (void)self;
    return run(args, 1);
}

static PyMethodDef methods[] = {
    {"loop", loop, METH_VARARGS, "ns per from-object + deleter, best of rounds"},
    {"make_loop", make_loop, METH_VARARGS, "ns per from-object + to-object + release, best of rounds"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "torch_exchange_loop", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_torch_exchange_loop(void)
{
    return PyModule_Create(&module);
}
