/*
 * Optional accelerator for the producer's two per-message hot paths. Their pure-Python
 * twins are in batch.py and accumulator.py; tests run both (AIOKAFKA07_PURE=1 forces the
 * twins, as for the codec).
 *
 * Appender is the base type of BatchBuilder, the hot path of send_batch(). Its
 * append(value, *, key=None, timestamp=None) takes the common case in C: exactly one
 * positional bytes value, no serializer, a size within max.message.size; it returns the
 * value's position, or None when the batch is full (count limit, or bytes limit once it
 * holds a message). Anything else (keywords, another type, a serializer, an oversized
 * value, `values` not a list) is handed, arguments unchanged, to the subclass's Python
 * method _append_slow, which holds every check and error of the contract. So the two
 * paths cannot disagree on an error: C only ever takes the path on which nothing can be
 * refused.
 *
 * BatchCore is the base type of the producer's Batch: the fields the hot path of send()
 * touches per message (values, futures, size, count_cap, byte_cap), as C members that
 * Python reads and writes like slots. HotPath.append(topic, value) is that hot path
 * (Accumulator's _PureHotPath is its twin): a bytes value within max.message.size, for
 * a topic with a hot batch, gets a future from create_future (called with the keywords of
 * future_kwargs when set, a dict made once), is appended with it, and
 * if the batch reached count_cap or byte_cap, capped(batch) is called; the future is
 * returned. In every other case it returns None and takes nothing, and the producer's
 * general path (which explains any refusal) takes the message.
 *
 * Pending futures and the cyclic garbage collector. A message's future is held by its
 * batch from send() until the producer completes it, which with confirm mode waits for
 * the broker's flush: tens of thousands of futures live that long under load, and each
 * collection of the older generations walked them all (CPU per message up by a third
 * against confirm=False, measured). While the producer holds a future it is reachable,
 * so the collector has nothing to find there: the hot path (and untrack_future(), for
 * the general path) takes a new asyncio.Future off the collector's lists, and
 * track_futures() puts a batch's futures back on before the producer completes them and
 * lets them go. Untracking never frees anything early: references from an untracked
 * object only make what it refers to look reachable. Only exact asyncio.Future objects
 * (the C type) are untracked; anything else is left as it is.
 *
 * The same holds for a sealed batch's two lists (values and futures): from the request
 * that sends them until the producer completes the batch, untrack_list() keeps them off
 * the collector's lists (a younger generation's pass walked every item of every list it
 * found: tens of thousands under confirm mode), and track_list() / track_futures() put
 * them back before the batch is let go. Neither list can close a reference cycle: only
 * its batch refers to it.
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
static PyObject *empty_tuple; /* the positional arguments of create_future(**kwargs) */
static PyTypeObject *future_type; /* _asyncio.Future, or NULL without the C asyncio */

/* Take a pending asyncio.Future off the cyclic collector's lists (see the top). */
static inline void
untrack(PyObject *future)
{
    if (future_type != NULL && Py_TYPE(future) == future_type && PyObject_GC_IsTracked(future))
        PyObject_GC_UnTrack(future);
}

/* append() returns the message's position. CPython keeps the ints up to 256 ready; a
 * position beyond that would be a new int per message, made and freed for every append
 * (most callers drop it at once), which costs more than the append itself. So the ints of
 * the positions below POSITIONS are made once, when a batch first reaches them, and kept
 * for the life of the process (at most POSITIONS ints, ~32 B each; the default batch_size
 * of 1000 uses 1000 of them); a position past them is made per call as before. */
#define POSITIONS 16384
static PyObject *positions[POSITIONS];

/* A new reference to the int `position` (>= 0), or NULL with MemoryError set. */
static PyObject *
position_of(Py_ssize_t position)
{
    if (position >= POSITIONS)
        return PyLong_FromSsize_t(position);
    PyObject *cached = positions[position];
    if (cached == NULL) {
        if ((cached = PyLong_FromSsize_t(position)) == NULL)
            return NULL;
        positions[position] = cached; /* the cache's own reference, never released */
    }
    Py_INCREF(cached);
    return cached;
}

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
    /* The position first: once the value is in, the call must not fail. */
    PyObject *position = position_of(count);
    if (position == NULL)
        return NULL;
    if (PyList_Append(self->values, value) < 0) {
        Py_DECREF(position);
        return NULL;
    }
    self->size_bytes = total;
    return position;
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

/* -- BatchCore and HotPath (send()'s hot path) ------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *values;         /* list: the payloads, in order */
    PyObject *futures;        /* list: one future per payload (or one for the whole batch) */
    Py_ssize_t size;          /* payload bytes */
    Py_ssize_t count_cap;     /* while hot: messages it may hold */
    Py_ssize_t byte_cap;      /* while hot: payload bytes it may hold */
} BatchCore;

static int
batch_traverse(BatchCore *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->values);
    Py_VISIT(self->futures);
    return 0;
}

static int
batch_clear(BatchCore *self)
{
    Py_CLEAR(self->values);
    Py_CLEAR(self->futures);
    return 0;
}

static void
batch_dealloc(BatchCore *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    batch_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMemberDef batch_members[] = {
    {"values", T_OBJECT_EX, offsetof(BatchCore, values), 0, "The payloads, in order."},
    {"futures", T_OBJECT_EX, offsetof(BatchCore, futures), 0, "Their futures."},
    {"size", T_PYSSIZET, offsetof(BatchCore, size), 0, "Payload bytes."},
    {"count_cap", T_PYSSIZET, offsetof(BatchCore, count_cap), 0, "Hot: messages it may hold."},
    {"byte_cap", T_PYSSIZET, offsetof(BatchCore, byte_cap), 0, "Hot: bytes it may hold."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot batch_slots[] = {
    {Py_tp_doc, "The C base of the producer's Batch: the fields of send()'s hot path."},
    {Py_tp_members, batch_members},
    {Py_tp_traverse, batch_traverse},
    {Py_tp_clear, batch_clear},
    {Py_tp_dealloc, batch_dealloc},
    {Py_tp_new, PyType_GenericNew},
    {0, NULL},
};

static PyType_Spec batch_spec = {
    "aiokafka07.producer._appender.BatchCore",
    sizeof(BatchCore),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    batch_slots,
};

static PyTypeObject *batch_type; /* BatchCore, for HotPath's check */

typedef struct {
    PyObject_HEAD
    PyObject *hot;            /* dict: topic -> its hot batch (a BatchCore) */
    PyObject *create_future;  /* callable: the loop's create_future */
    PyObject *future_kwargs;  /* NULL or None, or a dict: create_future(**future_kwargs) */
    PyObject *capped;         /* callable(batch): the batch reached a cap */
    Py_ssize_t max_message;   /* max.message.size */
} HotPath;

static PyObject *
hotpath_append(HotPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "append() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *value = args[1];
    if (!PyBytes_CheckExact(value) || self->hot == NULL || !PyDict_CheckExact(self->hot)
        || self->create_future == NULL || self->capped == NULL)
        Py_RETURN_NONE;
    Py_ssize_t size = PyBytes_GET_SIZE(value);
    if (size > self->max_message)
        Py_RETURN_NONE;
    PyObject *found = PyDict_GetItemWithError(self->hot, args[0]);
    if (found == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    /* The producer's batches are instances of Batch, a direct subclass of BatchCore: its
     * tp_base is checked first, sparing PyType_IsSubtype's walk of the MRO each message
     * (PyObject_TypeCheck's own fast path is for the exact type only). */
    PyTypeObject *found_type = Py_TYPE(found);
    if (found_type->tp_base != batch_type && !PyObject_TypeCheck(found, batch_type))
        Py_RETURN_NONE;
    BatchCore *batch = (BatchCore *)found;
    if (batch->values == NULL || batch->futures == NULL || !PyList_CheckExact(batch->values)
        || !PyList_CheckExact(batch->futures))
        Py_RETURN_NONE;
    /* create_future runs Python code: hold the batch (the dict's reference is borrowed)
     * and the callables (Python may replace them meanwhile). */
    Py_INCREF(batch);
    PyObject *future = NULL;
    PyObject *kwargs = self->future_kwargs;
    if (kwargs != NULL && kwargs != Py_None && !PyDict_Check(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "future_kwargs must be a dict or None");
        goto fail;
    }
    PyObject *make = Py_NewRef(self->create_future);
    if (kwargs == NULL || kwargs == Py_None)
        future = PyObject_CallNoArgs(make);
    else {
        /* the same dict for every message: no keyword dict made per call */
        Py_INCREF(kwargs);
        future = PyObject_Call(make, empty_tuple, kwargs);
        Py_DECREF(kwargs);
    }
    Py_DECREF(make);
    if (future == NULL)
        goto fail;
    untrack(future);
    if (PyList_Append(batch->futures, future) < 0)
        goto fail;
    if (PyList_Append(batch->values, value) < 0) {
        /* keep the two lists parallel: take the future back */
        Py_ssize_t n = PyList_GET_SIZE(batch->futures);
        PyList_SetSlice(batch->futures, n - 1, n, NULL);
        goto fail;
    }
    batch->size += size;
    if (PyList_GET_SIZE(batch->values) >= batch->count_cap || batch->size >= batch->byte_cap) {
        PyObject *capped = Py_NewRef(self->capped);
        PyObject *result = PyObject_CallOneArg(capped, (PyObject *)batch);
        Py_DECREF(capped);
        if (result == NULL)
            goto fail;
        Py_DECREF(result);
    }
    Py_DECREF(batch);
    return future;
fail:
    Py_XDECREF(future);
    Py_DECREF(batch);
    return NULL;
}

static int
hotpath_init(HotPath *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"hot", "create_future", "capped", "max_message_size", NULL};
    PyObject *hot, *create_future, *capped;
    Py_ssize_t max_message;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOn:HotPath", kwlist, &PyDict_Type, &hot,
                                     &create_future, &capped, &max_message))
        return -1;
    Py_INCREF(hot);
    Py_XSETREF(self->hot, hot);
    Py_INCREF(create_future);
    Py_XSETREF(self->create_future, create_future);
    Py_INCREF(capped);
    Py_XSETREF(self->capped, capped);
    self->max_message = max_message;
    return 0;
}

static int
hotpath_traverse(HotPath *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->hot);
    Py_VISIT(self->create_future);
    Py_VISIT(self->future_kwargs);
    Py_VISIT(self->capped);
    return 0;
}

static int
hotpath_clear(HotPath *self)
{
    Py_CLEAR(self->hot);
    Py_CLEAR(self->create_future);
    Py_CLEAR(self->future_kwargs);
    Py_CLEAR(self->capped);
    return 0;
}

static void
hotpath_dealloc(HotPath *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    hotpath_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef hotpath_methods[] = {
    {"append", (PyCFunction)(void (*)(void))hotpath_append, METH_FASTCALL,
     "append($self, topic, value, /)\n--\n\n"
     "Take a bytes value into the topic's hot batch and return its future; None (taking\n"
     "nothing) when there is no hot batch, the value is not bytes or is too large."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef hotpath_members[] = {
    {"create_future", T_OBJECT_EX, offsetof(HotPath, create_future), 0,
     "Makes each message's future (the loop's create_future once started)."},
    {"future_kwargs", T_OBJECT, offsetof(HotPath, future_kwargs), 0,
     "None, or the keywords create_future is called with (one dict, not copied per call)."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot hotpath_slots[] = {
    {Py_tp_doc, "HotPath(hot, create_future, capped, max_message_size): send()'s hot path."},
    {Py_tp_methods, hotpath_methods},
    {Py_tp_members, hotpath_members},
    {Py_tp_init, hotpath_init},
    {Py_tp_traverse, hotpath_traverse},
    {Py_tp_clear, hotpath_clear},
    {Py_tp_dealloc, hotpath_dealloc},
    {Py_tp_new, PyType_GenericNew},
    {0, NULL},
};

static PyType_Spec hotpath_spec = {
    "aiokafka07.producer._appender.HotPath",
    sizeof(HotPath),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    hotpath_slots,
};

/* -- append_method ----------------------------------------------------------------- */

static PyTypeObject *appender_type; /* Appender, for append_method's check */

/* Appender's append as a method descriptor of the subclass `cls`. The interpreter
 * specialises a call of a C method only on an instance of exactly the descriptor's type:
 * on a subclass's instance, the inherited descriptor takes the generic call path, with
 * a subtype check, every call (about 35 ns; BatchBuilder is such a subclass). */
static PyObject *
append_method(PyObject *Py_UNUSED(module), PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, appender_type)) {
        PyErr_SetString(PyExc_TypeError, "append_method() takes a subclass of Appender");
        return NULL;
    }
    return PyDescr_NewMethod((PyTypeObject *)cls, &appender_methods[0]);
}

static PyObject *
untrack_future(PyObject *Py_UNUSED(module), PyObject *future)
{
    untrack(future);
    Py_RETURN_NONE;
}

static PyObject *
untrack_list(PyObject *Py_UNUSED(module), PyObject *list)
{
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "untrack_list() takes a list");
        return NULL;
    }
    if (PyList_CheckExact(list) && PyObject_GC_IsTracked(list))
        PyObject_GC_UnTrack(list);
    Py_RETURN_NONE;
}

static PyObject *
track_list(PyObject *Py_UNUSED(module), PyObject *list)
{
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "track_list() takes a list");
        return NULL;
    }
    if (!PyObject_GC_IsTracked(list))
        PyObject_GC_Track(list);
    Py_RETURN_NONE;
}

static PyObject *
track_futures(PyObject *Py_UNUSED(module), PyObject *futures)
{
    if (!PyList_Check(futures)) {
        PyErr_SetString(PyExc_TypeError, "track_futures() takes a list");
        return NULL;
    }
    if (!PyObject_GC_IsTracked(futures))
        PyObject_GC_Track(futures);
    Py_ssize_t n = PyList_GET_SIZE(futures);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *future = PyList_GET_ITEM(futures, i);
        if (PyObject_IS_GC(future) && !PyObject_GC_IsTracked(future))
            PyObject_GC_Track(future);
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"append_method", append_method, METH_O,
     "append_method(cls, /)\n--\n\n"
     "Appender.append as a method of the subclass cls (a call the interpreter specialises)."},
    {"untrack_future", untrack_future, METH_O,
     "untrack_future(future, /)\n--\n\n"
     "Take a pending asyncio.Future the producer holds off the cyclic collector's lists."},
    {"track_futures", track_futures, METH_O,
     "track_futures(futures, /)\n--\n\n"
     "Put the list and every future in it back on the collector's lists (before completing "
     "them)."},
    {"untrack_list", untrack_list, METH_O,
     "untrack_list(list, /)\n--\n\n"
     "Take a sealed batch's list (its values or its futures) off the collector's lists."},
    {"track_list", track_list, METH_O,
     "track_list(list, /)\n--\n\n"
     "Put a list untrack_list() took off back on the collector's lists."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef appender_module = {
    PyModuleDef_HEAD_INIT, "aiokafka07.producer._appender",
    "C accelerator for the producer's hot paths (twins in batch.py and accumulator.py).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__appender(void)
{
    slow_name = PyUnicode_InternFromString("_append_slow");
    if (slow_name == NULL)
        return NULL;
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL)
        return NULL;
    PyObject *asyncio_c = PyImport_ImportModule("_asyncio");
    if (asyncio_c == NULL)
        PyErr_Clear(); /* no C asyncio: nothing is untracked */
    else {
        PyObject *type = PyObject_GetAttrString(asyncio_c, "Future");
        Py_DECREF(asyncio_c);
        if (type != NULL && PyType_Check(type))
            future_type = (PyTypeObject *)type; /* kept for the life of the process */
        else {
            Py_XDECREF(type);
            PyErr_Clear();
        }
    }
    PyObject *module = PyModule_Create(&appender_module);
    if (module == NULL)
        return NULL;
    PyType_Spec *specs[] = {&appender_spec, &batch_spec, &hotpath_spec};
    const char *names[] = {"Appender", "BatchCore", "HotPath"};
    for (int i = 0; i < 3; i++) {
        PyObject *type = PyType_FromSpec(specs[i]);
        if (type == NULL)
            goto fail;
        if (i == 0) {
            Py_INCREF(type);
            appender_type = (PyTypeObject *)type;
        }
        if (i == 1) {
            Py_INCREF(type);
            batch_type = (PyTypeObject *)type;
        }
        if (PyModule_AddObject(module, names[i], type) < 0) {
            Py_DECREF(type);
            goto fail;
        }
    }
    return module;
fail:
    Py_DECREF(module);
    return NULL;
}
