/*
 * Optional accelerator for the producer's send_batch() hot path: BatchBuilder.append,
 * called once per message. Its pure-Python twin is _PureAppender in batch.py; tests run
 * both (AIOKAFKA07_PURE=1 forces the twin, as for the codec).
 *
 * Appender is the base type of BatchBuilder. Its append(value, *, key=None,
 * timestamp=None) takes the common case in C: exactly one positional bytes value, no
 * serializer, a size within max.message.size; it returns the value's position, or None
 * when the batch is full (count limit, or bytes limit once it holds a message). Anything
 * else (keywords, another type, a serializer, an oversized value, `values` not a list) is
 * handed, arguments unchanged, to the subclass's Python method _append_slow, which holds
 * every check and error of the contract. So the two paths cannot disagree on an error:
 * C only ever takes the path on which nothing can be refused.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *values;         /* list of the payloads appended */
    Py_ssize_t size_bytes;    /* payload bytes appended */
    Py_ssize_t limit;         /* appends refused from this many messages on (0: closed) */
    Py_ssize_t max_bytes;     /* payload bytes of a full batch */
    Py_ssize_t max_message;   /* max.message.size */
    char plain;               /* no value serializer: bytes are taken as they are */
} Appender;

static PyObject *slow_name; /* "_append_slow" */

static PyObject *
appender_slow(Appender *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    /* self, then the arguments as they came: room for one more in front. */
    PyObject *small[8];
    PyObject **stack = small;
    if (nargs + nkw + 1 > 8) {
        stack = PyMem_Malloc((size_t)(nargs + nkw + 1) * sizeof(PyObject *));
        if (stack == NULL)
            return PyErr_NoMemory();
    }
    stack[0] = (PyObject *)self;
    for (Py_ssize_t i = 0; i < nargs + nkw; i++)
        stack[i + 1] = args[i];
    PyObject *result = PyObject_VectorcallMethod(slow_name, stack, (size_t)(nargs + 1), kwnames);
    if (stack != small)
        PyMem_Free(stack);
    return result;
}

static PyObject *
appender_append(Appender *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs != 1 || kwnames != NULL || !self->plain || self->values == NULL
        || !PyList_CheckExact(self->values) || !PyBytes_CheckExact(args[0]))
        return appender_slow(self, args, (size_t)nargs, kwnames);
    PyObject *value = args[0];
    Py_ssize_t count = PyList_GET_SIZE(self->values);
    if (count >= self->limit)
        Py_RETURN_NONE;
    Py_ssize_t size = PyBytes_GET_SIZE(value);
    if (size > self->max_message)
        return appender_slow(self, args, (size_t)nargs, kwnames); /* it raises */
    Py_ssize_t total = self->size_bytes + size;
    if (count && total > self->max_bytes)
        Py_RETURN_NONE;
    if (PyList_Append(self->values, value) < 0)
        return NULL;
    self->size_bytes = total;
    return PyLong_FromSsize_t(count);
}

static int
appender_traverse(Appender *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->values);
    return 0;
}

static int
appender_clear(Appender *self)
{
    Py_CLEAR(self->values);
    return 0;
}

static void
appender_dealloc(Appender *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    appender_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef appender_methods[] = {
    {"append", (PyCFunction)(void (*)(void))appender_append, METH_FASTCALL | METH_KEYWORDS,
     "append($self, value, *, key=None, timestamp=None)\n--\n\n"
     "Add a message; its position, or None if the batch is full (or closed)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef appender_members[] = {
    {"values", T_OBJECT_EX, offsetof(Appender, values), 0, "The payloads appended, in order."},
    {"size_bytes", T_PYSSIZET, offsetof(Appender, size_bytes), 0, "Payload bytes appended."},
    {"_limit", T_PYSSIZET, offsetof(Appender, limit), 0, NULL},
    {"_max_bytes", T_PYSSIZET, offsetof(Appender, max_bytes), 0, NULL},
    {"_max_message", T_PYSSIZET, offsetof(Appender, max_message), 0, NULL},
    {"_plain", T_BOOL, offsetof(Appender, plain), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot appender_slots[] = {
    {Py_tp_doc, "The C base of BatchBuilder: append() for plain bytes (see _appender.c)."},
    {Py_tp_methods, appender_methods},
    {Py_tp_members, appender_members},
    {Py_tp_traverse, appender_traverse},
    {Py_tp_clear, appender_clear},
    {Py_tp_dealloc, appender_dealloc},
    {Py_tp_new, PyType_GenericNew},
    {0, NULL},
};

static PyType_Spec appender_spec = {
    "aiokafka07.producer._appender.Appender",
    sizeof(Appender),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    appender_slots,
};

static struct PyModuleDef appender_module = {
    PyModuleDef_HEAD_INIT, "aiokafka07.producer._appender",
    "C accelerator for BatchBuilder.append (see batch.py for the pure-Python twin).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__appender(void)
{
    slow_name = PyUnicode_InternFromString("_append_slow");
    if (slow_name == NULL)
        return NULL;
    PyObject *module = PyModule_Create(&appender_module);
    if (module == NULL)
        return NULL;
    PyObject *type = PyType_FromSpec(&appender_spec);
    if (type == NULL || PyModule_AddObject(module, "Appender", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
