/*
 * Optional accelerator for the Kafka 0.7 codec hot paths. Every function here has a
 * pure-Python twin in _pure.py with exactly the same contract; tests run both.
 *
 *   scan(buf, pos, base_offset, fixed_offset, cls, prefix, out, shallow) -> (pos, status, detail)
 *   scan_columns(buf, pos, base_offset, fixed_offset, offsets, value_ends, values)
 *       -> (pos, status, detail)
 *   summarize(buf, pos, shallow) -> (pos, status, detail, plain, wrapped, largest)
 *   encode_message_set(payloads, magic, attributes) -> bytes
 *   crc32(data, value=0) -> int
 *   java_string_hash(s) -> int
 *   inflate(data, pos, limit, hint) -> (status, output or message, end, crc)
 *   offset_seq(offsets, fetched_at) -> bytearray
 *   encode_arrow(schema, array, magic, attributes, max_count, max_bytes, max_message, rows=None)
 *       -> (status, index, size, format, chunks)   (see its comment)
 *   arrow_schema(fields, metadata), arrow_array(fields, length, offset, owner),
 *   arrow_stream(fields, metadata, length, offset, owner) -> capsule (the Arrow C data
 *       interface; the twin is aiokafka07/arrow.py, through ctypes)
 *   _crc_fold(enabled) -> bool   (C only: the tests' switch between the CRC paths)
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
#include <stdio.h>
#include <stdlib.h>
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

/* CRC-32 (IEEE 802.3 polynomial, identical to zlib.crc32).
 *
 * On x86-64 with PCLMULQDQ (checked at run time) inputs of 64 bytes or more are folded
 * 64 bytes at a time with carry-less multiplications (Intel's "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ Instruction", with the constants of its
 * bit-reflected CRC-32 form, as in Linux and Chromium's zlib): several times the table
 * below on a 100-byte payload, and on a compressed wrapper several times zlib's. The
 * rest, and every input on a CPU (or a compiler, or an architecture) without the
 * instruction, goes through a slicing-by-8 table (~40 ns for 100 bytes; zlib's braided
 * CRC costs ~120 ns per call on short inputs, so it is used from CRC_ZLIB_FROM bytes on
 * where the fold is not available). Defining AIOKAFKA07_NO_CLMUL at build time leaves
 * the fold out, as on any other architecture. */
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

/* The table CRC of p[0..n) continuing from the (inverted) state c. */
static uint32_t
crc32_table(uint32_t c, const unsigned char *p, Py_ssize_t n)
{
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
    if (n >= 4) { /* the tail after the carry-less fold is mostly 4 bytes or more */
        uint32_t a;
        memcpy(&a, p, 4);
        a ^= c;
        c = crc_tab[3][a & 0xff] ^ crc_tab[2][(a >> 8) & 0xff] ^ crc_tab[1][(a >> 16) & 0xff] ^
            crc_tab[0][a >> 24];
        p += 4;
        n -= 4;
    }
#endif
    while (n-- > 0)
        c = crc_tab[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) &&                     \
    !defined(AIOKAFKA07_NO_CLMUL)
#define HAVE_CRC_CLMUL 1
#include <immintrin.h>

static int crc_clmul; /* the CPU has PCLMULQDQ (set by crc_init_clmul) */

/* Fold p[0..n), n >= 64, into the (inverted) state c; returns the state after the
 * largest multiple of 16 bytes, with *done set to that many bytes. Unaligned loads only:
 * any alignment of p is fine. */
__attribute__((target("pclmul,sse2"))) static uint32_t
crc32_clmul(uint32_t c, const unsigned char *p, Py_ssize_t n, Py_ssize_t *done)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
    const unsigned char *start = p;
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;

    x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    p += 64;
    n -= 64;
    while (n >= 64) { /* four lanes, 64 bytes a step */
        x5 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        x6 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        x7 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        x8 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(p + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(p + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(p + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(p + 0x30)));
        p += 64;
        n -= 64;
    }
    /* The four lanes into one. */
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (n >= 16) { /* one lane, 16 bytes a step */
        x2 = _mm_loadu_si128((const __m128i *)p);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        p += 16;
        n -= 16;
    }
    /* 128 bits to 64, then Barrett reduction to 32. */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_clmulepi64_si128(x1, k5k0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x2 = _mm_and_si128(x1, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x10);
    x2 = _mm_and_si128(x2, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    *done = p - start;
    return (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(x1, 4));
}

static void
crc_init_clmul(void)
{
    __builtin_cpu_init();
    crc_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
}
#else
static void
crc_init_clmul(void)
{
}
#endif

/* The CRC-32 of p[0..n) continuing the CRC `value` of what came before (0: none), as
 * zlib.crc32(data, value). */
static uint32_t
crc32_from(uint32_t value, const unsigned char *p, Py_ssize_t n)
{
#ifdef HAVE_CRC_CLMUL
    if (crc_clmul && n >= 64) {
        Py_ssize_t done;
        uint32_t c = crc32_clmul(value ^ 0xFFFFFFFFu, p, n, &done);
        return crc32_table(c, p + done, n - done) ^ 0xFFFFFFFFu;
    }
#endif
    if (n >= CRC_ZLIB_FROM) {
        while (n > 0) { /* zlib takes at most 4 GiB a call */
            uInt step = n > (Py_ssize_t)0x40000000 ? 0x40000000u : (uInt)n;
            value = (uint32_t)crc32(value, p, step);
            p += step;
            n -= step;
        }
        return value;
    }
    return crc32_table(value ^ 0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
}

static inline uint32_t
crc32_buf(const unsigned char *p, Py_ssize_t n)
{
    return crc32_from(0, p, n);
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
    Py_buffer head = {0};

    if (!PyArg_ParseTuple(args, "Oii|y*:encode_message_set", &payloads, &magic, &attributes,
                          &head))
        return NULL;
    /* head: bytes written before the set, in the same buffer (a request's header) */
    const Py_ssize_t head_len = head.buf != NULL ? head.len : 0;
    PyObject *result = NULL;
    PyObject *seq = NULL;
    if (magic != 0 && magic != 1) {
        PyErr_SetString(PyExc_ValueError, "magic must be 0 or 1");
        goto release;
    }
    if (attributes < 0 || attributes > 255 || (magic == 0 && attributes != 0)) {
        PyErr_SetString(PyExc_ValueError, "attributes must be a byte (0 for magic 0)");
        goto release;
    }
    seq = PySequence_Fast(payloads, "payloads must be a sequence of bytes-like objects");
    if (seq == NULL)
        goto release;
    const Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const Py_ssize_t hdr = magic == 1 ? 6 : 5;
    Py_ssize_t total = head_len;

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
    if (head_len) {
        memcpy(w, head.buf, (size_t)head_len);
        w += head_len;
    }
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
release:
    if (head.buf != NULL)
        PyBuffer_Release(&head);
    return result;
}

static PyObject *
speedups_crc32(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32", &view, &value))
        return NULL;
    uint32_t c;
    if (view.len >= 4096) { /* long inputs (a whole inflated set) let other threads run */
        Py_BEGIN_ALLOW_THREADS
        c = crc32_from((uint32_t)value, (const unsigned char *)view.buf, view.len);
        Py_END_ALLOW_THREADS
    }
    else {
        c = crc32_from((uint32_t)value, (const unsigned char *)view.buf, view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

/* _crc_fold(enabled) -> bool: for the tests, which check the table path against zlib
 * on a CPU that has the instruction too. Turns the carry-less fold off (or back on,
 * where the CPU has it); returns whether it was in use before. */
static PyObject *
speedups_crc_fold(PyObject *Py_UNUSED(module), PyObject *arg)
{
    const int enable = PyObject_IsTrue(arg);
    if (enable < 0)
        return NULL;
#ifdef HAVE_CRC_CLMUL
    const int was = crc_clmul;
    crc_init_clmul();
    crc_clmul = crc_clmul && enable;
    return PyBool_FromLong(was);
#else
    return PyBool_FromLong(0);
#endif
}

/* inflate(data, pos, limit, hint): the raw deflate stream at data[pos:] (a gzip
 * member's body) inflated into one bytes object of at most `limit` bytes. Returns
 * (IN_OK, output, end, crc) with `end` where the deflate data ends and `crc` the CRC-32
 * of the output; (IN_CORRUPT, message, 0, 0), (IN_OVER, None, 0, 0) or
 * (IN_SHORT, None, 0, 0) (the input ends inside the stream). The output starts at
 * `hint` bytes (what the gzip trailer declares, which the caller clamps) and doubles as
 * needed, never past `limit`: when it is full at `limit` and the stream goes on, one
 * more byte is asked for to tell "exactly the bound" from "over it". The CRC is taken
 * piece by piece as the output comes, while it is in the cache; inflating and the CRC
 * let other threads run. */
enum { IN_OK = 0, IN_CORRUPT = 1, IN_OVER = 2, IN_SHORT = 3 };

/* zlib's message for err, worded as Python's zlib module words its exceptions (so
 * that both twins say the same). */
static PyObject *
inflate_corrupt(int err, const char *msg)
{
    if (msg == NULL)
        msg = err == Z_BUF_ERROR      ? "incomplete or truncated stream"
              : err == Z_STREAM_ERROR ? "inconsistent stream state"
              : err == Z_DATA_ERROR   ? "invalid input data"
                                      : "library error";
    return PyUnicode_FromFormat("corrupt gzip data: Error %d while decompressing data: %.200s",
                                err, msg);
}

/* Hand zlib the next piece of input (at most 1 GiB: avail_in is 32-bit) once it has
 * taken the last one. */
static inline void
inflate_feed(z_stream *z, const unsigned char **in, Py_ssize_t *in_left)
{
    if (z->avail_in == 0 && *in_left > 0) {
        const Py_ssize_t step = *in_left > (1 << 30) ? (1 << 30) : *in_left;
        z->next_in = (Bytef *)*in;
        z->avail_in = (uInt)step;
        *in += step;
        *in_left -= step;
    }
}

static PyObject *
speedups_inflate(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, limit, hint;
    if (!PyArg_ParseTuple(args, "y*nnn:inflate", &view, &pos, &limit, &hint))
        return NULL;
    if (release_if_outside(&view, pos) < 0)
        return NULL;
    if (limit < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the limit must be >= 0");
        return NULL;
    }
    Py_ssize_t cap = hint < 64 ? 64 : hint;
    if (cap > limit)
        cap = limit;
    PyObject *out = PyBytes_FromStringAndSize(NULL, cap);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    z_stream z;
    memset(&z, 0, sizeof(z));
    int err = inflateInit2(&z, -15);
    if (err != Z_OK) {
        Py_DECREF(out);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    const unsigned char *in = (const unsigned char *)view.buf + pos;
    Py_ssize_t in_left = view.len - pos, size = 0;
    uint32_t crc = 0;
    int status = IN_OK;
    PyObject *message = NULL;

    for (;;) {
        if (size == cap) { /* full: grow, or at the bound see whether more would come */
            if (cap == limit) {
                unsigned char probe;
                z.next_out = &probe;
                z.avail_out = 1;
                inflate_feed(&z, &in, &in_left);
                const uInt had = z.avail_in;
                err = inflate(&z, Z_NO_FLUSH);
                /* Corrupt data first, even with the byte out (zlib may find a bad code
                 * right after writing it): Python's zlib module, the pure twin's, raises
                 * then too. */
                if (err != Z_OK && err != Z_BUF_ERROR && err != Z_STREAM_END) {
                    status = IN_CORRUPT;
                    message = inflate_corrupt(err, z.msg);
                    break;
                }
                if (z.avail_out == 0) {
                    status = IN_OVER;
                    break;
                }
                if (err == Z_STREAM_END)
                    break;
                if (err == Z_OK && z.avail_in != had && (z.avail_in > 0 || in_left > 0))
                    continue; /* only input was read (a block header): ask again */
                status = IN_SHORT;
                break;
            }
            Py_ssize_t grown = cap > limit / 2 ? limit : cap * 2;
            if (_PyBytes_Resize(&out, grown) < 0) {
                inflateEnd(&z);
                PyBuffer_Release(&view);
                return NULL;
            }
            cap = grown;
        }
        inflate_feed(&z, &in, &in_left);
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out) + size;
        const Py_ssize_t room = cap - size;
        z.next_out = o;
        z.avail_out = room > (1 << 30) ? (1u << 30) : (uInt)room;
        const uInt asked = z.avail_out, had = z.avail_in;
        Py_BEGIN_ALLOW_THREADS
        err = inflate(&z, Z_NO_FLUSH);
        crc = crc32_from(crc, o, (Py_ssize_t)(asked - z.avail_out));
        Py_END_ALLOW_THREADS
        size += (Py_ssize_t)(asked - z.avail_out);
        if (err == Z_STREAM_END)
            break;
        if (err == Z_OK || err == Z_BUF_ERROR) {
            const int progress = z.avail_out != asked || z.avail_in != had;
            if (progress && (z.avail_out == 0 || z.avail_in > 0 || in_left > 0))
                continue;
            status = IN_SHORT; /* all the input taken, the stream not ended */
            break;
        }
        status = IN_CORRUPT;
        message = inflate_corrupt(err, z.msg);
        break;
    }
    const Py_ssize_t end =
        status == IN_OK ? (Py_ssize_t)((const unsigned char *)z.next_in -
                                       (const unsigned char *)view.buf)
                        : 0;
    inflateEnd(&z);
    PyBuffer_Release(&view);
    if (status != IN_OK) {
        Py_DECREF(out);
        if (status == IN_CORRUPT && message == NULL)
            return NULL;
        return Py_BuildValue("(iNii)", status, message != NULL ? message : Py_NewRef(Py_None),
                             0, 0);
    }
    if (size != cap && _PyBytes_Resize(&out, size) < 0)
        return NULL;
    return Py_BuildValue("(iNnk)", IN_OK, out, end, (unsigned long)crc);
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

/* offset_seq(offsets, fetched_at) -> bytearray: for native int64 offsets of messages
 * decoded from a fetch at fetched_at (an entry boundary), in log order, one native int32
 * each: 0 for a message that ends its entry, 1, 2, ... for the other messages of a
 * compressed wrapper, which report the wrapper's start (equal offsets are contiguous; a
 * run at fetched_at itself holds only a wrapper's messages). See _pure.offset_seq. */
static PyObject *
speedups_offset_seq(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    long long fetched_at;
    if (!PyArg_ParseTuple(args, "y*L", &view, &fetched_at))
        return NULL;
    if (view.len % 8) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "offsets must be whole int64s");
        return NULL;
    }
    const Py_ssize_t n = view.len / 8;
    if (n > INT32_MAX) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_OverflowError, "more than 2**31 offsets");
        return NULL;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n * 4);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const char *src = (const char *)view.buf;
    char *dst = PyByteArray_AS_STRING(out);
    int64_t previous = 0;
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t offset;
        memcpy(&offset, src + 8 * i, 8);
        if (i == 0 || offset != previous) {
            previous = offset;
            start = i;
        }
        int32_t seq = (int32_t)(i - start + (offset == (int64_t)fetched_at));
        memcpy(dst + 4 * i, &seq, 4);
    }
    PyBuffer_Release(&view);
    return out;
}

/* ---- The Arrow C data interface (aiokafka07/arrow.py is the ctypes twin) ------------
 *
 * arrow_schema(fields, metadata) -> "arrow_schema" capsule
 * arrow_array(fields, length, offset, owner) -> "arrow_array" capsule
 * arrow_stream(fields, metadata, length, offset, owner) -> "arrow_array_stream" capsule
 *
 * `fields` is a sequence of (name, format, buffers): the children of a struct (format
 * "+s"), none nullable, each with no validity bitmap and `buffers` (writable buffer
 * objects: bytearrays) after it. `metadata` is the struct's metadata, already in Arrow's
 * binary encoding (b"" for none). An array's children start at row `offset`; they point
 * into the buffers themselves (no copy), each child holding a buffer export of its
 * buffers (a bytearray cannot be resized meanwhile) and a reference to `owner` until it
 * is released. Releasing a schema touches no Python object; releasing an array takes
 * the GIL (a consumer may release from any thread). A capsule's destructor releases its
 * struct unless a consumer moved it out (release set to NULL). A stream hands out its
 * one array once, then the end. */

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};

#define ARROW_MAX_BUFFERS 3
/* Where an empty buffer points: non-NULL and aligned, as Arrow wants. */
static const int64_t arrow_empty[8];

static char *
arrow_copy(const char *data, Py_ssize_t size)
{
    char *out = malloc(size + 1);
    if (out == NULL)
        return NULL;
    memcpy(out, data, size);
    out[size] = '\0';
    return out;
}

/* A schema's private data: its children, one block (the structs, then their pointers). */
static void
arrow_schema_release(struct ArrowSchema *schema)
{
    if (schema->release == NULL)
        return;
    for (int64_t i = 0; i < schema->n_children; i++) {
        struct ArrowSchema *child = schema->children[i];
        if (child->release != NULL)
            child->release(child);
    }
    free((void *)schema->format);
    free((void *)schema->name);
    free((void *)schema->metadata);
    free(schema->private_data);
    schema->release = NULL;
}

static int
arrow_schema_init(struct ArrowSchema *schema, const char *format, const char *name,
                  Py_ssize_t name_size, const char *metadata, Py_ssize_t metadata_size,
                  int64_t n_children)
{
    memset(schema, 0, sizeof(*schema));
    schema->format = arrow_copy(format, (Py_ssize_t)strlen(format));
    schema->name = arrow_copy(name, name_size);
    schema->metadata = metadata_size ? arrow_copy(metadata, metadata_size) : NULL;
    void *block = NULL;
    if (n_children) {
        block = calloc((size_t)n_children,
                       sizeof(struct ArrowSchema) + sizeof(struct ArrowSchema *));
    }
    if (schema->format == NULL || schema->name == NULL || (metadata_size && !schema->metadata)
        || (n_children && block == NULL)) {
        free((void *)schema->format);
        free((void *)schema->name);
        free((void *)schema->metadata);
        free(block);
        PyErr_NoMemory();
        return -1;
    }
    schema->n_children = n_children;
    schema->private_data = block;
    if (n_children) {
        struct ArrowSchema *structs = block;
        schema->children = (struct ArrowSchema **)(structs + n_children);
        for (int64_t i = 0; i < n_children; i++)
            schema->children[i] = &structs[i];
    }
    schema->release = arrow_schema_release;
    return 0;
}

/* One field: (name, format, buffers) with a str name and format. */
static int
arrow_field(PyObject *field, PyObject **name, PyObject **format, PyObject **buffers)
{
    if (!PyTuple_Check(field) || PyTuple_GET_SIZE(field) != 3) {
        PyErr_SetString(PyExc_TypeError, "a field is a (name, format, buffers) tuple");
        return -1;
    }
    *name = PyTuple_GET_ITEM(field, 0);
    *format = PyTuple_GET_ITEM(field, 1);
    *buffers = PyTuple_GET_ITEM(field, 2);
    if (!PyUnicode_Check(*name) || !PyUnicode_Check(*format) || !PyTuple_Check(*buffers)
        || PyTuple_GET_SIZE(*buffers) + 1 > ARROW_MAX_BUFFERS) {
        PyErr_SetString(PyExc_TypeError,
                        "a field is (str name, str format, tuple of at most 2 buffers)");
        return -1;
    }
    return 0;
}

/* Fill `out` with the struct schema of `fields` (the GIL held). */
static int
arrow_export_schema(struct ArrowSchema *out, PyObject *fields, const char *metadata,
                    Py_ssize_t metadata_size)
{
    PyObject *seq = PySequence_Fast(fields, "fields must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (arrow_schema_init(out, "+s", "", 0, metadata, metadata_size, n) < 0) {
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name, *format, *buffers;
        Py_ssize_t name_size, format_size;
        if (arrow_field(PySequence_Fast_GET_ITEM(seq, i), &name, &format, &buffers) < 0)
            goto fail;
        const char *name_text = PyUnicode_AsUTF8AndSize(name, &name_size);
        const char *format_text = PyUnicode_AsUTF8AndSize(format, &format_size);
        if (name_text == NULL || format_text == NULL)
            goto fail;
        if (arrow_schema_init(out->children[i], format_text, name_text, name_size, NULL, 0, 0)
            < 0)
            goto fail;
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    out->release(out); /* children not filled yet have release NULL */
    return -1;
}

struct arrow_array_private {
    PyObject *owner;
    Py_buffer views[ARROW_MAX_BUFFERS];
    int n_views;
    const void *buffers[ARROW_MAX_BUFFERS];
    struct ArrowArray *children; /* n_children structs, then their pointers */
};

static void
arrow_array_release(struct ArrowArray *array)
{
    if (array->release == NULL)
        return;
    for (int64_t i = 0; i < array->n_children; i++) {
        struct ArrowArray *child = array->children[i];
        if (child->release != NULL)
            child->release(child);
    }
    struct arrow_array_private *private = array->private_data;
    if (Py_IsInitialized()) { /* (at exit the buffers are left as they are) */
        PyGILState_STATE gil = PyGILState_Ensure();
        for (int i = 0; i < private->n_views; i++)
            PyBuffer_Release(&private->views[i]);
        Py_XDECREF(private->owner);
        PyGILState_Release(gil);
    }
    free(private->children);
    free(private);
    array->release = NULL;
}

static struct arrow_array_private *
arrow_array_init(struct ArrowArray *array, int64_t length, int64_t offset, int64_t n_buffers,
                 int64_t n_children, PyObject *owner)
{
    memset(array, 0, sizeof(*array));
    struct arrow_array_private *private = calloc(1, sizeof(*private));
    if (private == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (n_children) {
        private->children =
            calloc((size_t)n_children, sizeof(struct ArrowArray) + sizeof(struct ArrowArray *));
        if (private->children == NULL) {
            free(private);
            PyErr_NoMemory();
            return NULL;
        }
        array->children = (struct ArrowArray **)(private->children + n_children);
        for (int64_t i = 0; i < n_children; i++)
            array->children[i] = &private->children[i];
    }
    Py_INCREF(owner);
    private->owner = owner;
    array->length = length;
    array->offset = offset;
    array->n_buffers = n_buffers;
    array->n_children = n_children;
    array->buffers = private->buffers;
    array->private_data = private;
    array->release = arrow_array_release;
    return private;
}

/* Fill `out` with the struct array of `fields` (the GIL held). */
static int
arrow_export_array(struct ArrowArray *out, PyObject *fields, int64_t length, int64_t offset,
                   PyObject *owner)
{
    if (length < 0 || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "length and offset must not be negative");
        return -1;
    }
    PyObject *seq = PySequence_Fast(fields, "fields must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (arrow_array_init(out, length, 0, 1, n, owner) == NULL) {
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name, *format, *buffers;
        if (arrow_field(PySequence_Fast_GET_ITEM(seq, i), &name, &format, &buffers) < 0)
            goto fail;
        Py_ssize_t count = PyTuple_GET_SIZE(buffers);
        struct arrow_array_private *private =
            arrow_array_init(out->children[i], length, offset, count + 1, 0, owner);
        if (private == NULL)
            goto fail;
        private->buffers[0] = NULL; /* no validity bitmap: nothing is null */
        for (Py_ssize_t b = 0; b < count; b++) {
            Py_buffer *view = &private->views[b];
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(buffers, b), view, PyBUF_WRITABLE) < 0)
                goto fail;
            private->n_views++;
            private->buffers[b + 1] = view->len ? view->buf : (const void *)arrow_empty;
        }
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    out->release(out);
    return -1;
}

static void
arrow_schema_capsule_free(PyObject *capsule)
{
    struct ArrowSchema *schema = PyCapsule_GetPointer(capsule, "arrow_schema");
    if (schema == NULL) {
        PyErr_WriteUnraisable(capsule);
        return;
    }
    if (schema->release != NULL) /* not moved out by a consumer */
        schema->release(schema);
    free(schema);
}

static void
arrow_array_capsule_free(PyObject *capsule)
{
    struct ArrowArray *array = PyCapsule_GetPointer(capsule, "arrow_array");
    if (array == NULL) {
        PyErr_WriteUnraisable(capsule);
        return;
    }
    if (array->release != NULL)
        array->release(array);
    free(array);
}

static PyObject *
speedups_arrow_schema(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *fields;
    const char *metadata;
    Py_ssize_t metadata_size;
    if (!PyArg_ParseTuple(args, "Oy#", &fields, &metadata, &metadata_size))
        return NULL;
    struct ArrowSchema *schema = malloc(sizeof(*schema));
    if (schema == NULL)
        return PyErr_NoMemory();
    if (arrow_export_schema(schema, fields, metadata, metadata_size) < 0) {
        free(schema);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(schema, "arrow_schema", arrow_schema_capsule_free);
    if (capsule == NULL) {
        schema->release(schema);
        free(schema);
    }
    return capsule;
}

static PyObject *
speedups_arrow_array(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *fields, *owner;
    long long length, offset;
    if (!PyArg_ParseTuple(args, "OLLO", &fields, &length, &offset, &owner))
        return NULL;
    struct ArrowArray *array = malloc(sizeof(*array));
    if (array == NULL)
        return PyErr_NoMemory();
    if (arrow_export_array(array, fields, length, offset, owner) < 0) {
        free(array);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(array, "arrow_array", arrow_array_capsule_free);
    if (capsule == NULL) {
        array->release(array);
        free(array);
    }
    return capsule;
}

struct arrow_stream_private {
    PyObject *fields;
    PyObject *metadata; /* bytes */
    PyObject *owner;
    int64_t length;
    int64_t offset;
    int done;
    char error[200];
};

static int
arrow_stream_failed(struct arrow_stream_private *private)
{
    /* The Python error becomes the stream's last error (the GIL held). */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *message = text ? PyUnicode_AsUTF8(text) : NULL;
    snprintf(private->error, sizeof(private->error), "%s", message ? message : "export failed");
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    PyErr_Clear();
    return 12; /* ENOMEM, or a failed export */
}

static int
arrow_stream_get_schema(struct ArrowArrayStream *stream, struct ArrowSchema *out)
{
    struct arrow_stream_private *private = stream->private_data;
    PyGILState_STATE gil = PyGILState_Ensure();
    int status = 0;
    if (arrow_export_schema(out, private->fields, PyBytes_AS_STRING(private->metadata),
                            PyBytes_GET_SIZE(private->metadata))
        < 0)
        status = arrow_stream_failed(private);
    PyGILState_Release(gil);
    return status;
}

static int
arrow_stream_get_next(struct ArrowArrayStream *stream, struct ArrowArray *out)
{
    struct arrow_stream_private *private = stream->private_data;
    if (private->done) { /* the end: a released array */
        memset(out, 0, sizeof(*out));
        return 0;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    int status = 0;
    if (arrow_export_array(out, private->fields, private->length, private->offset,
                           private->owner)
        < 0)
        status = arrow_stream_failed(private);
    else
        private->done = 1;
    PyGILState_Release(gil);
    return status;
}

static const char *
arrow_stream_last_error(struct ArrowArrayStream *stream)
{
    struct arrow_stream_private *private = stream->private_data;
    return private->error[0] ? private->error : NULL;
}

static void
arrow_stream_release(struct ArrowArrayStream *stream)
{
    if (stream->release == NULL)
        return;
    struct arrow_stream_private *private = stream->private_data;
    if (Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        Py_DECREF(private->fields);
        Py_DECREF(private->metadata);
        Py_DECREF(private->owner);
        PyGILState_Release(gil);
    }
    free(private);
    stream->release = NULL;
}

static void
arrow_stream_capsule_free(PyObject *capsule)
{
    struct ArrowArrayStream *stream = PyCapsule_GetPointer(capsule, "arrow_array_stream");
    if (stream == NULL) {
        PyErr_WriteUnraisable(capsule);
        return;
    }
    if (stream->release != NULL)
        stream->release(stream);
    free(stream);
}

static PyObject *
speedups_arrow_stream(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *fields, *metadata, *owner;
    long long length, offset;
    if (!PyArg_ParseTuple(args, "OSLLO", &fields, &metadata, &length, &offset, &owner))
        return NULL;
    struct ArrowArrayStream *stream = malloc(sizeof(*stream));
    struct arrow_stream_private *private = calloc(1, sizeof(*private));
    if (stream == NULL || private == NULL) {
        free(stream);
        free(private);
        return PyErr_NoMemory();
    }
    Py_INCREF(fields);
    Py_INCREF(metadata);
    Py_INCREF(owner);
    private->fields = fields;
    private->metadata = metadata;
    private->owner = owner;
    private->length = length;
    private->offset = offset;
    stream->get_schema = arrow_stream_get_schema;
    stream->get_next = arrow_stream_get_next;
    stream->get_last_error = arrow_stream_last_error;
    stream->release = arrow_stream_release;
    stream->private_data = private;
    PyObject *capsule = PyCapsule_New(stream, "arrow_array_stream", arrow_stream_capsule_free);
    if (capsule == NULL) {
        stream->release(stream);
        free(stream);
    }
    return capsule;
}

/* encode_arrow(schema, array, magic, attributes, max_count, max_bytes, max_message,
 *              rows=None) -> (status, index, size, format, chunks)
 *
 * The producer's Arrow path (Producer.send_arrow): the values of an Arrow array of
 * binary or string values (formats "z", "u": int32 offsets; "Z", "U": int64 offsets),
 * given as its "arrow_schema" and "arrow_array" capsules (what __arrow_c_array__
 * returns), encoded as 0.7 message sets straight from its offsets and data buffers: no
 * Python object per message. The array is moved out of its capsule (its release set to
 * NULL there) and released here once encoded, or refused; the schema stays in its
 * capsule. The array's offset (a slice) is honoured; nothing is read outside the rows
 * [offset, offset + length] of its offsets and the bytes they delimit.
 *
 * The values are cut into chunks as BatchBuilder.append cuts a batch: at most max_count
 * values, and no more than max_bytes of payload unless a chunk holds one value. Each
 * chunk is (count, payload bytes, message set). `rows` (optional: a buffer of native
 * int64s, or None) selects the values to encode, in its order, by their positions in the
 * array (the producer's per-message keys: one call per partition); every row is then
 * checked, nulls in the whole array. A refusal returns no chunks and a status
 * for the Python caller to raise as a typed error (ARROW_* below): `index` is the
 * value's position in the array (from its offset), `size` its size, `format` the
 * schema's format string (None when unreadable). Everything is checked before anything
 * is encoded; the encoding runs with the GIL released. */
enum {
    ARROW_OK = 0,
    ARROW_RELEASED = 1,  /* a capsule of the wrong name, or a released struct */
    ARROW_FORMAT = 2,    /* not binary or string; format says what it is */
    ARROW_SHAPE = 3,     /* buffers or children not those of its format */
    ARROW_NULL = 4,      /* a null at index */
    ARROW_OFFSETS = 5,   /* offsets decreasing or negative at index */
    ARROW_TOO_LARGE = 6, /* the value at index has size bytes, over max_message */
};

struct arrow_chunk {
    int64_t start, stop, bytes;
};

static PyObject *speedups_encode_arrow_rows(PyObject *, PyObject *, int, int, Py_ssize_t,
                                            Py_ssize_t, Py_ssize_t, const int64_t *, Py_ssize_t);

static PyObject *
speedups_encode_arrow(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *schema_capsule, *array_capsule;
    int magic, attributes;
    Py_ssize_t max_count, max_bytes, max_message;
    PyObject *rows_arg = Py_None;
    if (!PyArg_ParseTuple(args, "OOiinnn|O:encode_arrow", &schema_capsule, &array_capsule, &magic,
                          &attributes, &max_count, &max_bytes, &max_message, &rows_arg))
        return NULL;
    Py_buffer rows_view = {0};
    const int64_t *rows = NULL;
    if (rows_arg != Py_None) {
        if (PyObject_GetBuffer(rows_arg, &rows_view, PyBUF_SIMPLE) < 0)
            return NULL;
        if (rows_view.len % 8) {
            PyBuffer_Release(&rows_view);
            PyErr_SetString(PyExc_ValueError, "rows must be whole int64s");
            return NULL;
        }
        rows = rows_view.buf;
    }
    PyObject *early = NULL;
    if (magic != 0 && magic != 1) {
        PyErr_SetString(PyExc_ValueError, "magic must be 0 or 1");
        goto early_out;
    }
    if (attributes < 0 || attributes > 255 || (magic == 0 && attributes != 0)) {
        PyErr_SetString(PyExc_ValueError, "attributes must be a byte (0 for magic 0)");
        goto early_out;
    }
    if (max_count < 1 || max_bytes < 1 || max_message < 0) {
        PyErr_SetString(PyExc_ValueError, "max_count and max_bytes must be positive");
        goto early_out;
    }
    early = speedups_encode_arrow_rows(schema_capsule, array_capsule, magic, attributes,
                                       max_count, max_bytes, max_message, rows,
                                       rows == NULL ? -1 : rows_view.len / 8);
early_out:
    if (rows != NULL)
        PyBuffer_Release(&rows_view);
    return early;
}

static PyObject *
speedups_encode_arrow_rows(PyObject *schema_capsule, PyObject *array_capsule, int magic,
                           int attributes, Py_ssize_t max_count, Py_ssize_t max_bytes,
                           Py_ssize_t max_message, const int64_t *rows, Py_ssize_t n_rows)
{
    struct ArrowSchema *schema = NULL;
    struct ArrowArray *source = NULL;
    if (PyCapsule_IsValid(schema_capsule, "arrow_schema"))
        schema = PyCapsule_GetPointer(schema_capsule, "arrow_schema");
    if (PyCapsule_IsValid(array_capsule, "arrow_array"))
        source = PyCapsule_GetPointer(array_capsule, "arrow_array");
    if (schema == NULL || source == NULL || schema->release == NULL || source->release == NULL
        || schema->format == NULL)
        return Py_BuildValue("iiiOO", ARROW_RELEASED, 0, 0, Py_None, Py_None);
    PyObject *format = PyUnicode_DecodeUTF8(schema->format, (Py_ssize_t)strlen(schema->format),
                                            "replace");
    if (format == NULL)
        return NULL;
    const char *f = schema->format;
    int wide; /* int64 offsets */
    if ((f[0] == 'z' || f[0] == 'u') && f[1] == '\0')
        wide = 0;
    else if ((f[0] == 'Z' || f[0] == 'U') && f[1] == '\0')
        wide = 1;
    else
        return Py_BuildValue("iiiNO", ARROW_FORMAT, 0, 0, format, Py_None);

    /* Moved out: ours to release from here on, whatever happens. */
    struct ArrowArray array = *source;
    source->release = NULL;
    PyObject *result = NULL;
    PyObject *chunks = NULL;
    struct arrow_chunk *cuts = NULL;
    int status = ARROW_OK;
    int64_t index = 0, size = 0;

    const int64_t length = array.length, offset = array.offset;
    if (array.n_buffers != 3 || array.n_children != 0 || array.buffers == NULL || length < 0
        || offset < 0 || array.dictionary != NULL
        || (length > 0 && (array.buffers[1] == NULL || array.buffers[2] == NULL))) {
        status = ARROW_SHAPE;
        goto refused;
    }
    const uint8_t *validity = array.buffers[0];
    const int32_t *off32 = array.buffers[1];
    const int64_t *off64 = array.buffers[1];
    const unsigned char *data = array.buffers[2];
    const Py_ssize_t hdr = magic == 1 ? 6 : 5;
#define ARROW_OFF(i) (wide ? off64[offset + (i)] : (int64_t)off32[offset + (i)])

    if (validity != NULL && array.null_count != 0) {
        for (int64_t i = 0; i < length; i++) {
            const int64_t bit = offset + i;
            if (!(validity[bit >> 3] & (1u << (bit & 7)))) {
                status = ARROW_NULL;
                index = i;
                goto refused;
            }
        }
    }
    /* Chunks, as BatchBuilder.append cuts them, over the selected values (all, or
     * rows); at most one per value. */
    const int64_t selected = rows == NULL ? length : (int64_t)n_rows;
#define ARROW_ROW(k) (rows == NULL ? (k) : rows[k])
    Py_ssize_t n_cuts = 0;
    if (selected > 0) {
        cuts = PyMem_Malloc(sizeof(*cuts) * (size_t)selected);
        if (cuts == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        struct arrow_chunk cut = {0, 0, 0};
        for (int64_t k = 0; k < selected; k++) {
            const int64_t i = ARROW_ROW(k);
            if (i < 0 || i >= length) {
                PyErr_SetString(PyExc_IndexError, "a row outside the array");
                goto done;
            }
            const int64_t first = ARROW_OFF(i), next = ARROW_OFF(i + 1);
            if (first < 0 || next < first) {
                status = ARROW_OFFSETS;
                index = i;
                goto refused;
            }
            const int64_t n = next - first;
            if (n > max_message || n > (int64_t)INT32_MAX - hdr) {
                status = ARROW_TOO_LARGE;
                index = i;
                size = n;
                goto refused;
            }
            const int64_t count = k - cut.start;
            if (count >= max_count || (count > 0 && cut.bytes + n > max_bytes)) {
                cut.stop = k;
                cuts[n_cuts++] = cut;
                cut.start = k;
                cut.bytes = 0;
            }
            cut.bytes += n;
        }
        cut.stop = selected;
        cuts[n_cuts++] = cut;
    }
    /* The sets, allocated with the GIL, filled without it. */
    if ((chunks = PyList_New(n_cuts)) == NULL)
        goto done;
    for (Py_ssize_t c = 0; c < n_cuts; c++) {
        const int64_t count = cuts[c].stop - cuts[c].start;
        const int64_t total = cuts[c].bytes + count * (4 + hdr);
        if (total > (int64_t)PY_SSIZE_T_MAX) {
            PyErr_SetString(PyExc_OverflowError, "message set too large");
            goto done;
        }
        PyObject *set = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
        if (set == NULL)
            goto done;
        PyObject *item = Py_BuildValue("LLN", (long long)count, (long long)cuts[c].bytes, set);
        if (item == NULL)
            goto done;
        PyList_SET_ITEM(chunks, c, item);
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = 0; c < n_cuts; c++) {
        PyObject *set = PyTuple_GET_ITEM(PyList_GET_ITEM(chunks, c), 2);
        unsigned char *w = (unsigned char *)PyBytes_AS_STRING(set);
        for (int64_t k = cuts[c].start; k < cuts[c].stop; k++) {
            const int64_t i = ARROW_ROW(k);
            const int64_t start = ARROW_OFF(i);
            const Py_ssize_t n = (Py_ssize_t)(ARROW_OFF(i + 1) - start);
            const unsigned char *p = data + start;
            wr_u32(w, (uint32_t)(hdr + n));
            w[4] = (unsigned char)magic;
            if (magic == 1)
                w[5] = (unsigned char)attributes;
            wr_u32(w + hdr, crc32_buf(p, n));
            memcpy(w + 4 + hdr, p, (size_t)n);
            w += 4 + hdr + n;
        }
    }
    Py_END_ALLOW_THREADS
#undef ARROW_OFF
#undef ARROW_ROW
    result = Py_BuildValue("iiiOO", ARROW_OK, 0, 0, format, chunks);
    goto done;
refused:
    result = Py_BuildValue("iLLOO", status, (long long)index, (long long)size, format, Py_None);
done:
    PyMem_Free(cuts);
    Py_XDECREF(chunks);
    Py_DECREF(format);
    if (array.release != NULL) {
        /* A release callback may run Python code (a ctypes export): not with an
         * exception pending. */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        array.release(&array);
        PyErr_Restore(type, value, traceback);
    }
    return result;
}

static PyMethodDef speedups_methods[] = {
    {"scan", speedups_scan, METH_VARARGS, "Decode plain messages of a message set from pos."},
    {"scan_columns", speedups_scan_columns, METH_VARARGS,
     "Decode plain messages of a message set from pos into column buffers."},
    {"summarize", speedups_summarize, METH_VARARGS,
     "Count the messages of a message set from pos without building them."},
    {"encode_message_set", speedups_encode_message_set, METH_VARARGS,
     "Encode payloads as a message set of uncompressed messages (after head, if given)."},
    {"crc32", speedups_crc32, METH_VARARGS,
     "CRC-32 of a bytes-like object, continuing value (as zlib.crc32)."},
    {"inflate", speedups_inflate, METH_VARARGS,
     "Inflate the raw deflate stream at pos into at most limit bytes."},
    {"_crc_fold", speedups_crc_fold, METH_O,
     "Use the carry-less CRC fold where the CPU has it (tests); whether it was in use."},
    {"java_string_hash", speedups_java_string_hash, METH_O, "java.lang.String.hashCode of a str."},
    {"arrow_schema", speedups_arrow_schema, METH_VARARGS,
     "An arrow_schema capsule: a struct of (name, format, buffers) fields."},
    {"arrow_array", speedups_arrow_array, METH_VARARGS,
     "An arrow_array capsule: a struct array pointing into the fields' buffers."},
    {"arrow_stream", speedups_arrow_stream, METH_VARARGS,
     "An arrow_array_stream capsule handing out that struct array once."},
    {"encode_arrow", speedups_encode_arrow, METH_VARARGS,
     "Message sets of an Arrow array of binary or string values, from its buffers."},
    {"offset_seq", speedups_offset_seq, METH_VARARGS,
     "offset_seq (int32) of messages with these int64 offsets, fetched at fetched_at."},
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
    crc_init_clmul();
    return PyModule_Create(&speedups_module);
}
