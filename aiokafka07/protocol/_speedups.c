/*
 * Optional accelerator for the Kafka 0.7 codec hot paths. Every function here has a
 * pure-Python twin in _pure.py with exactly the same contract; tests run both.
 *
 *   scan(buf, pos, base_offset, fixed_offset, cls, prefix, out, shallow) -> (pos, status, detail)
 *   scan_columns(buf, pos, base_offset, fixed_offset, offsets, value_ends, values)
 *       -> (pos, status, detail)
 *   summarize(buf, pos, shallow) -> (pos, status, detail, plain, wrapped, largest)
 *   encode_message_set(payloads, magic, attributes) -> bytes
 *   crc32(data) -> int
 *   java_string_hash(s) -> int
 *
 * scan() walks a message set from `pos`, appends one `cls` tuple per plain message to
 * `out` and stops at the first entry it cannot turn into a message, reporting why as a
 * status code. It never raises for bad data: the Python caller decides what a status means
 * (a partial first entry is an error, a partial later one is the normal tail) and raises
 * the typed exception with the position.
 *
 * scan_columns() walks exactly as scan() does (never shallow: it stops at a compressed
 * wrapper with ST_WRAPPER for the caller to expand) but builds no Python object per message: it
 * appends each message's offset (int64, native order) to the bytearray `offsets`, its
 * payload to the bytearray `values`, and the new length of `values` (int32, native order)
 * to the bytearray `value_ends` -- the buffers of Arrow int64 and binary columns. It sizes
 * the bytearrays once (a first walk over the entry lengths only), then checks and copies
 * with the GIL released.
 *
 * summarize() walks entries exactly as scan() does but builds nothing: it counts plain
 * messages and (in shallow mode) compressed wrappers and reports the largest payload, so
 * a broker can validate a produced set of any size in constant memory. It touches no
 * Python object while walking, so it lets other threads run meanwhile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

enum {
    ST_END = 0,        /* fewer than 4 bytes left */
    ST_PARTIAL = 1,    /* entry declares more bytes than remain; detail = declared size */
    ST_BAD_SIZE = 2,   /* negative or too small entry size; detail = declared size */
    ST_BAD_MAGIC = 3,  /* detail = magic byte */
    ST_BAD_CRC = 4,    /* detail = stored crc */
    ST_WRAPPER = 5,    /* compressed wrapper at pos (deep mode); detail = codec */
    ST_BAD_CODEC = 6,  /* codec 3; detail = attributes byte */
    ST_OK = -1,        /* internal: the entry is a message (never returned) */
};

/* CRC-32 (IEEE 802.3 polynomial, identical to zlib.crc32). zlib's braided CRC is about
 * twice as fast on long inputs but costs ~120 ns per call on short ones, where a
 * slicing-by-8 table takes ~40 ns for a 100-byte payload; the two cross near 512 bytes. */
#define CRC_ZLIB_FROM 512
static uint32_t crc_tab[8][256];

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_tab[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_tab[0][c & 0xff] ^ (c >> 8);
            crc_tab[t][i] = c;
        }
    }
}

static uint32_t
crc32_buf(const unsigned char *p, Py_ssize_t n)
{
    if (n >= CRC_ZLIB_FROM)
        return (uint32_t)crc32(0L, p, (uInt)n); /* payloads are < 2 GiB */
    uint32_t c = 0xFFFFFFFFu;
#if PY_LITTLE_ENDIAN
    while (n >= 8) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + 4, 4);
        a ^= c;
        c = crc_tab[7][a & 0xff] ^ crc_tab[6][(a >> 8) & 0xff] ^
            crc_tab[5][(a >> 16) & 0xff] ^ crc_tab[4][a >> 24] ^
            crc_tab[3][b & 0xff] ^ crc_tab[2][(b >> 8) & 0xff] ^
            crc_tab[1][(b >> 16) & 0xff] ^ crc_tab[0][b >> 24];
        p += 8;
        n -= 8;
    }
#endif
    while (n-- > 0)
        c = crc_tab[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static inline uint32_t
rd_u32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline void
wr_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

typedef struct {
    int32_t n; /* the entry's length, without its 4-byte length field */
    int magic;
    int hdr; /* magic, [attributes,] crc */
    int attributes;
} entry_t;

/* Check the entry at pos: ST_OK with *e filled in, or the status that stops a walk there
 * (with *detail set). The checks and their order are those of the 0.7.2 iterator. */
static int
check_entry(const unsigned char *b, Py_ssize_t len, Py_ssize_t pos, int shallow, entry_t *e,
            long long *detail)
{
    if (len - pos < 4)
        return ST_END;
    const int32_t n = (int32_t)rd_u32(b + pos);
    if (n < 0) {
        *detail = n;
        return ST_BAD_SIZE;
    }
    if (len - pos - 4 < (Py_ssize_t)n) {
        *detail = n;
        return ST_PARTIAL;
    }
    if (n < 1) {
        *detail = n;
        return ST_BAD_SIZE;
    }
    const unsigned char *m = b + pos + 4;
    const int magic = m[0];
    int hdr;
    if (magic == 1)
        hdr = 6;
    else if (magic == 0)
        hdr = 5;
    else {
        *detail = magic;
        return ST_BAD_MAGIC;
    }
    if (n < hdr) {
        *detail = n;
        return ST_BAD_SIZE;
    }
    const int attributes = magic == 1 ? m[1] : 0;
    const uint32_t stored = rd_u32(m + hdr - 4);
    if (crc32_buf(m + hdr, n - hdr) != stored) {
        *detail = stored;
        return ST_BAD_CRC;
    }
    const int codec = attributes & 3;
    if (codec == 3) {
        *detail = attributes;
        return ST_BAD_CODEC;
    }
    if (codec != 0 && !shallow) {
        *detail = codec;
        return ST_WRAPPER;
    }
    e->n = n;
    e->magic = magic;
    e->hdr = hdr;
    e->attributes = attributes;
    return ST_OK;
}

/* -1 (ValueError set, view released) if pos is outside the buffer, else 0. */
static int
release_if_outside(Py_buffer *view, Py_ssize_t pos)
{
    if (pos >= 0 && pos <= view->len)
        return 0;
    PyBuffer_Release(view);
    PyErr_SetString(PyExc_ValueError, "pos outside the buffer");
    return -1;
}

static PyObject *
speedups_scan(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    long long base_offset;
    PyObject *fixed_offset, *prefix, *out;
    PyTypeObject *cls;
    int shallow;

    if (!PyArg_ParseTuple(args, "y*nLOO!O!O!p:scan", &view, &pos, &base_offset, &fixed_offset,
                          &PyType_Type, &cls, &PyTuple_Type, &prefix, &PyList_Type, &out,
                          &shallow))
        return NULL;
    if (!PyType_IsSubtype(cls, &PyTuple_Type) || cls->tp_itemsize != sizeof(PyObject *)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "cls must be a tuple subclass");
        return NULL;
    }
    if (release_if_outside(&view, pos) < 0)
        return NULL;

    const unsigned char *b = (const unsigned char *)view.buf;
    const Py_ssize_t len = view.len;
    const Py_ssize_t nprefix = PyTuple_GET_SIZE(prefix);
    /* A message holding only ints, bytes and untracked prefix items can never be part of
     * a reference cycle, so it need not be GC-tracked (CPython untracks such tuples itself,
     * but only during a collection). Without this, decoding large fetches spends most of
     * its time in the garbage collector. */
    int untrack = cls->tp_dictoffset == 0;
    for (Py_ssize_t i = 0; untrack && i < nprefix; i++) {
        PyObject *item = PyTuple_GET_ITEM(prefix, i);
        if (PyObject_IS_GC(item) && PyObject_GC_IsTracked(item))
            untrack = 0;
    }
    int status = ST_END;
    long long detail = 0;
    entry_t e;

    for (;;) {
        status = check_entry(b, len, pos, shallow, &e, &detail);
        if (status != ST_OK)
            break;
        const unsigned char *m = b + pos + 4;
        const int32_t n = e.n;
        const int magic = e.magic;
        const int hdr = e.hdr;
        const int attributes = e.attributes;
        const Py_ssize_t next = pos + 4 + n;

        PyObject *offset;
        if (fixed_offset != Py_None) {
            Py_INCREF(fixed_offset);
            offset = fixed_offset;
        }
        else if ((offset = PyLong_FromLongLong(base_offset + (long long)next)) == NULL)
            goto error;
        PyObject *value = PyBytes_FromStringAndSize((const char *)m + hdr, n - hdr);
        if (value == NULL) {
            Py_DECREF(offset);
            goto error;
        }
        PyObject *msg = cls->tp_alloc(cls, nprefix + 4);
        if (msg == NULL) {
            Py_DECREF(offset);
            Py_DECREF(value);
            goto error;
        }
        for (Py_ssize_t i = 0; i < nprefix; i++) {
            PyObject *item = PyTuple_GET_ITEM(prefix, i);
            Py_INCREF(item);
            PyTuple_SET_ITEM(msg, i, item);
        }
        PyTuple_SET_ITEM(msg, nprefix, offset);
        PyTuple_SET_ITEM(msg, nprefix + 1, value);
        PyTuple_SET_ITEM(msg, nprefix + 2, PyLong_FromLong(magic));
        PyTuple_SET_ITEM(msg, nprefix + 3, PyLong_FromLong(attributes));
        if (untrack && PyObject_GC_IsTracked(msg))
            PyObject_GC_UnTrack(msg);
        int rc = PyList_Append(out, msg);
        Py_DECREF(msg);
        if (rc < 0)
            goto error;
        pos = next;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("niL", pos, status, detail);

error:
    PyBuffer_Release(&view);
    return NULL;
}

/* Grow a bytearray by `more` bytes; a pointer to the first new byte, or NULL (error set:
 * MemoryError, or BufferError while someone holds a view of it). */
static char *
grow_bytearray(PyObject *array, Py_ssize_t more)
{
    const Py_ssize_t size = PyByteArray_GET_SIZE(array);
    if (more > PY_SSIZE_T_MAX - size) {
        PyErr_NoMemory();
        return NULL;
    }
    if (PyByteArray_Resize(array, size + more) < 0)
        return NULL;
    return PyByteArray_AS_STRING(array) + size;
}

static PyObject *
speedups_scan_columns(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    long long base_offset;
    PyObject *fixed_offset, *offsets, *value_ends, *values;

    if (!PyArg_ParseTuple(args, "y*nLOO!O!O!:scan_columns", &view, &pos, &base_offset,
                          &fixed_offset, &PyByteArray_Type, &offsets, &PyByteArray_Type,
                          &value_ends, &PyByteArray_Type, &values))
        return NULL;
    long long fixed = 0;
    if (fixed_offset != Py_None) {
        fixed = PyLong_AsLongLong(fixed_offset);
        if (fixed == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    if (release_if_outside(&view, pos) < 0)
        return NULL;
    if (PyByteArray_GET_SIZE(offsets) % 8 != 0 || PyByteArray_GET_SIZE(value_ends) % 4 != 0 ||
        PyByteArray_GET_SIZE(value_ends) / 4 != PyByteArray_GET_SIZE(offsets) / 8 + 1) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError,
                        "value_ends must hold one int32 more than offsets holds int64s");
        return NULL;
    }

    const unsigned char *b = (const unsigned char *)view.buf;
    const Py_ssize_t len = view.len;
    /* First walk: entry lengths and headers only, up to the first entry that cannot be a
     * message (every check of check_entry but the CRC's), so an upper bound of what the
     * second walk appends. */
    Py_ssize_t count = 0, payload = 0;
    for (Py_ssize_t p = pos; len - p >= 4;) {
        const int32_t n = (int32_t)rd_u32(b + p);
        if (n < 5 || len - p - 4 < (Py_ssize_t)n)
            break;
        const int magic = b[p + 4];
        if (magic > 1 || (magic == 1 && (n < 6 || (b[p + 5] & 3) != 0)))
            break;
        count++;
        payload += n - (magic == 1 ? 6 : 5);
        p += 4 + (Py_ssize_t)n;
    }
    const Py_ssize_t had = PyByteArray_GET_SIZE(offsets) / 8;
    const Py_ssize_t had_values = PyByteArray_GET_SIZE(values);
    const Py_ssize_t had_ends = PyByteArray_GET_SIZE(value_ends);
    if (grow_bytearray(offsets, 8 * count) == NULL ||
        grow_bytearray(value_ends, 4 * count) == NULL || grow_bytearray(values, payload) == NULL) {
        PyBuffer_Release(&view);
        goto restore;
    }

    /* Views of the three bytearrays keep them from being resized (by another thread,
     * while the GIL is released) under the pointers the walk writes through. */
    Py_buffer out[3];
    PyObject *arrays[3] = {offsets, value_ends, values};
    for (int i = 0; i < 3; i++) {
        if (PyObject_GetBuffer(arrays[i], &out[i], PyBUF_WRITABLE) < 0) {
            while (i-- > 0)
                PyBuffer_Release(&out[i]);
            PyBuffer_Release(&view);
            goto restore;
        }
    }
    int status;
    long long detail = 0;
    Py_ssize_t done = 0; /* messages appended */
    Py_ssize_t used = 0; /* payload bytes appended */
    int overrun = 0, overflow = 0;
    entry_t e;
    char *o = (char *)out[0].buf + 8 * had;
    char *ends = (char *)out[1].buf + 4 * (had + 1);
    char *v = (char *)out[2].buf + had_values;
    const int has_fixed = fixed_offset != Py_None;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        status = check_entry(b, len, pos, 0, &e, &detail);
        if (status != ST_OK)
            break;
        const Py_ssize_t size = e.n - e.hdr;
        if (done == count || size > payload - used) {
            overrun = 1; /* cannot happen: the first walk saw every such entry */
            break;
        }
        if (had_values + used + size > INT32_MAX) {
            overflow = 1; /* Arrow's binary offsets are int32 */
            break;
        }
        const Py_ssize_t next = pos + 4 + e.n;
        const int64_t offset = has_fixed ? fixed : base_offset + (long long)next;
        const int32_t end = (int32_t)(had_values + used + size);
        memcpy(v + used, b + pos + 4 + e.hdr, (size_t)size);
        memcpy(o + 8 * done, &offset, 8);
        memcpy(ends + 4 * done, &end, 4);
        used += size;
        done++;
        pos = next;
    }
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 3; i++)
        PyBuffer_Release(&out[i]);
    PyBuffer_Release(&view);
    if (overrun) {
        PyErr_SetString(PyExc_SystemError, "scan_columns: a message the first walk missed");
        goto restore;
    }
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of values in one set of columns");
        goto restore;
    }
    /* Give back what the first walk reserved and the second did not use (a bad CRC). */
    if (done < count && (PyByteArray_Resize(offsets, 8 * (had + done)) < 0 ||
                         PyByteArray_Resize(value_ends, 4 * (had + done + 1)) < 0))
        return NULL;
    if (used < payload && PyByteArray_Resize(values, had_values + used) < 0)
        return NULL;
    return Py_BuildValue("niL", pos, status, detail);

restore: /* an exception is set: leave the columns as they were */
    {
#if PY_VERSION_HEX >= 0x030C0000
        PyObject *raised = PyErr_GetRaisedException();
#else
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
#endif
        if (PyByteArray_Resize(offsets, 8 * had) < 0 ||
            PyByteArray_Resize(value_ends, had_ends) < 0 ||
            PyByteArray_Resize(values, had_values) < 0)
            PyErr_Clear(); /* shrinking back: nothing to report over the first error */
#if PY_VERSION_HEX >= 0x030C0000
        PyErr_SetRaisedException(raised);
#else
        PyErr_Restore(type, value, tb);
#endif
    }
    return NULL;
}

static PyObject *
speedups_summarize(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    int shallow;

    if (!PyArg_ParseTuple(args, "y*np:summarize", &view, &pos, &shallow))
        return NULL;
    if (release_if_outside(&view, pos) < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    const Py_ssize_t len = view.len;
    long long detail = 0, plain = 0, wrapped = 0, largest = 0;
    int status;
    entry_t e;

    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        status = check_entry(b, len, pos, shallow, &e, &detail);
        if (status != ST_OK)
            break;
        if (e.n - e.hdr > largest)
            largest = e.n - e.hdr;
        if (e.attributes & 3)
            wrapped++;
        else
            plain++;
        pos += 4 + (Py_ssize_t)e.n;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("niLLLL", pos, status, detail, plain, wrapped, largest);
}

static PyObject *
speedups_encode_message_set(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *payloads;
    int magic, attributes;

    if (!PyArg_ParseTuple(args, "Oii:encode_message_set", &payloads, &magic, &attributes))
        return NULL;
    if (magic != 0 && magic != 1) {
        PyErr_SetString(PyExc_ValueError, "magic must be 0 or 1");
        return NULL;
    }
    if (attributes < 0 || attributes > 255 || (magic == 0 && attributes != 0)) {
        PyErr_SetString(PyExc_ValueError, "attributes must be a byte (0 for magic 0)");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(payloads, "payloads must be a sequence of bytes-like objects");
    if (seq == NULL)
        return NULL;
    const Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const Py_ssize_t hdr = magic == 1 ? 6 : 5;
    Py_ssize_t total = 0;
    PyObject *result = NULL;

    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t size;
        if (PyBytes_CheckExact(items[i])) {
            size = PyBytes_GET_SIZE(items[i]);
        }
        else {
            Py_buffer v;
            if (PyObject_GetBuffer(items[i], &v, PyBUF_SIMPLE) < 0)
                goto done;
            size = v.len;
            PyBuffer_Release(&v);
        }
        if (size > (Py_ssize_t)INT32_MAX - hdr || total > PY_SSIZE_T_MAX - (4 + hdr + size)) {
            PyErr_SetString(PyExc_OverflowError, "message set larger than 2 GiB");
            goto done;
        }
        total += 4 + hdr + size;
    }
    if ((result = PyBytes_FromStringAndSize(NULL, total)) == NULL)
        goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *p;
        Py_ssize_t size;
        Py_buffer v;
        int have_view = 0;
        if (PyBytes_CheckExact(items[i])) {
            p = (const unsigned char *)PyBytes_AS_STRING(items[i]);
            size = PyBytes_GET_SIZE(items[i]);
        }
        else {
            if (PyObject_GetBuffer(items[i], &v, PyBUF_SIMPLE) < 0)
                goto fail;
            have_view = 1;
            p = (const unsigned char *)v.buf;
            size = v.len;
        }
        if (w + 4 + hdr + size > (unsigned char *)PyBytes_AS_STRING(result) + total) {
            if (have_view)
                PyBuffer_Release(&v);
            PyErr_SetString(PyExc_RuntimeError, "a payload changed size during encoding");
            goto fail;
        }
        wr_u32(w, (uint32_t)(hdr + size));
        w[4] = (unsigned char)magic;
        if (magic == 1)
            w[5] = (unsigned char)attributes;
        wr_u32(w + hdr, crc32_buf(p, size));
        memcpy(w + 4 + hdr, p, (size_t)size);
        w += 4 + hdr + size;
        if (have_view)
            PyBuffer_Release(&v);
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    Py_DECREF(seq);
    return result;
}

static PyObject *
speedups_crc32(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:crc32", &view))
        return NULL;
    uint32_t c = crc32_buf((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *
speedups_java_string_hash(PyObject *Py_UNUSED(module), PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "java_string_hash expects a str");
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(arg) < 0)
        return NULL;
#endif
    const int kind = PyUnicode_KIND(arg);
    const void *data = PyUnicode_DATA(arg);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0x10000) { /* Java strings hold non-BMP characters as surrogate pairs */
            c -= 0x10000;
            h = 31u * h + (0xD800u + (c >> 10));
            h = 31u * h + (0xDC00u + (c & 0x3FFu));
        }
        else {
            h = 31u * h + c;
        }
    }
    return PyLong_FromLong((long)(int32_t)h);
}

static PyMethodDef speedups_methods[] = {
    {"scan", speedups_scan, METH_VARARGS, "Decode plain messages of a message set from pos."},
    {"scan_columns", speedups_scan_columns, METH_VARARGS,
     "Decode plain messages of a message set from pos into column buffers."},
    {"summarize", speedups_summarize, METH_VARARGS,
     "Count the messages of a message set from pos without building them."},
    {"encode_message_set", speedups_encode_message_set, METH_VARARGS,
     "Encode payloads as a message set of uncompressed messages."},
    {"crc32", speedups_crc32, METH_VARARGS, "CRC-32 of a bytes-like object (as zlib.crc32)."},
    {"java_string_hash", speedups_java_string_hash, METH_O, "java.lang.String.hashCode of a str."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "aiokafka07.protocol._speedups",
    "C accelerator for the Kafka 0.7 codec (see _pure.py for the reference twin).", -1,
    speedups_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc_init();
    return PyModule_Create(&speedups_module);
}
