/* rmqtool.recovery._ccore: the per-record loops numpy cannot vectorise, in C.
 *
 * Optional: recovery/ccore.py holds the same functions in Python and uses them when this
 * module is not built (or RMQTOOL_PURE_PYTHON=1); tests run both and assert they agree.
 * Layout numbers (magic codes, header sizes, the broker's length rules) come from the
 * caller, who takes them from the schemas in formats/: nothing here knows the format.
 *
 * Every function reads damaged stores. Each read is checked against the buffer's
 * length, every length read from the buffer is treated as hostile, and positions are
 * 64-bit (long long) so that pos + length cannot overflow: positions are below 2^62
 * (checked on entry) and lengths read are 32-bit.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#define POS_LIMIT (1LL << 62)

/* ---- CRC-32 (ISO-HDLC, java.util.zip.CRC32, unmasked) ------------------------------- */

typedef uint32_t (*crc_fn)(uint32_t crc, const unsigned char *buf, uint32_t len);

static crc_fn fast_crc = NULL; /* zlib-ng's zng_crc32, when set_crc_library found it */
static uint32_t crc_table[4][256];

static void make_crc_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 4; t++)
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = crc_table[t - 1][i];
            crc_table[t][i] = (c >> 8) ^ crc_table[0][c & 0xFF];
        }
}

/* four bytes per step, the bytes assembled explicitly (no alignment or endianness
 * assumption) */
static uint32_t crc_portable(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 4) {
        c ^= (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
        c = crc_table[3][c & 0xFF] ^ crc_table[2][(c >> 8) & 0xFF] ^ crc_table[1][(c >> 16) & 0xFF] ^
            crc_table[0][c >> 24];
        p += 4;
        n -= 4;
    }
    while (n--)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t crc_of(const unsigned char *p, size_t n)
{
    if (fast_crc == NULL)
        return crc_portable(p, n);
    uint32_t c = 0;
    while (n > 0) {
        uint32_t k = n > (1u << 30) ? (1u << 30) : (uint32_t)n;
        c = fast_crc(c, p, k);
        p += k;
        n -= k;
    }
    return c;
}

/* ---- helpers ---------------------------------------------------------------------- */

/* big-endian signed 32-bit at p (4 bytes readable) */
static long long be32(const unsigned char *p)
{
    uint32_t u = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
    return (long long)(int32_t)u;
}

/* int.from_bytes(buf[pos:pos + 4], "big", signed=True): fewer bytes near the end */
static long long be32_partial(const unsigned char *b, long long n, long long pos)
{
    if (pos + 4 <= n)
        return be32(b + pos);
    long long k = pos < n ? n - pos : 0;
    if (k <= 0)
        return 0;
    long long v = 0;
    for (long long i = 0; i < k; i++)
        v = (v << 8) | b[pos + i];
    if (b[pos] & 0x80)
        v -= 1LL << (8 * k);
    return v;
}

/* a C-contiguous buffer of int64 items (numpy int64 arrays, format 'l' or 'q') */
static int get_i64(PyObject *obj, Py_buffer *view, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    if (view->itemsize != 8 || (strcmp(f, "q") != 0 && strcmp(f, "l") != 0)) {
        PyErr_Format(PyExc_TypeError, "%s: an int64 array is needed", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Python's slice clamping of [a:b] over n items (step 1) */
static void clamp_slice(long long n, long long *a, long long *b)
{
    if (*a < 0) {
        *a += n;
        if (*a < 0)
            *a = 0;
    } else if (*a > n)
        *a = n;
    if (*b < 0) {
        *b += n;
        if (*b < 0)
            *b = 0;
    } else if (*b > n)
        *b = n;
    if (*b < *a)
        *b = *a;
}

/* the starts and ends arrays of a spans call (m items each) beside its buffer; on failure
 * every buffer is released (``buf`` too) and -1 returned */
static int get_spans(Py_buffer *buf, PyObject *ao, PyObject *bo, Py_buffer *va, Py_buffer *vb, Py_ssize_t *m)
{
    if (get_i64(ao, va, "starts") < 0) {
        PyBuffer_Release(buf);
        return -1;
    }
    if (get_i64(bo, vb, "ends") < 0) {
        PyBuffer_Release(va);
        PyBuffer_Release(buf);
        return -1;
    }
    *m = va->len / 8;
    if (vb->len / 8 != *m) {
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        PyBuffer_Release(vb);
        PyBuffer_Release(va);
        PyBuffer_Release(buf);
        return -1;
    }
    return 0;
}

/* ---- crc32_spans ------------------------------------------------------------------ */

static PyObject *crc32_spans(PyObject *self, PyObject *args)
{
    Py_buffer buf, va, vb;
    PyObject *ao, *bo;
    Py_ssize_t m;
    if (!PyArg_ParseTuple(args, "y*OO:crc32_spans", &buf, &ao, &bo))
        return NULL;
    if (get_spans(&buf, ao, bo, &va, &vb, &m) < 0)
        return NULL;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, m * 8);
    if (out == NULL)
        goto done;
    {
        int64_t *res = (int64_t *)PyByteArray_AS_STRING(out);
        const int64_t *A = (const int64_t *)va.buf;
        const int64_t *B = (const int64_t *)vb.buf;
        const unsigned char *b = (const unsigned char *)buf.buf;
        long long n = (long long)buf.len;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < m; i++) {
            long long a = A[i], e = B[i];
            clamp_slice(n, &a, &e);
            res[i] = (int64_t)crc_of(b + a, (size_t)(e - a));
        }
        Py_END_ALLOW_THREADS
    }
done:
    PyBuffer_Release(&vb);
    PyBuffer_Release(&va);
    PyBuffer_Release(&buf);
    return out;
}

/* ---- join_spans ------------------------------------------------------------------- */

static PyObject *join_spans(PyObject *self, PyObject *args)
{
    Py_buffer buf, va, vb;
    PyObject *ao, *bo;
    int sep;
    Py_ssize_t m;
    if (!PyArg_ParseTuple(args, "y*OOi:join_spans", &buf, &ao, &bo, &sep))
        return NULL;
    if (get_spans(&buf, ao, bo, &va, &vb, &m) < 0)
        return NULL;
    PyObject *out = NULL;
    const int64_t *A = (const int64_t *)va.buf;
    const int64_t *B = (const int64_t *)vb.buf;
    const unsigned char *b = (const unsigned char *)buf.buf;
    long long n = (long long)buf.len;
    if (sep < 0 || sep > 255) {
        PyErr_SetString(PyExc_ValueError, "join_spans: sep is not a byte");
        goto done;
    }
    {
        long long total = m > 0 ? m - 1 : 0; /* the separators */
        for (Py_ssize_t i = 0; i < m; i++) {
            long long a = A[i], e = B[i];
            clamp_slice(n, &a, &e);
            total += e - a; /* each <= n < 2^62: checked below before it can overflow */
            if (total > (long long)PY_SSIZE_T_MAX - n) {
                PyErr_NoMemory();
                goto done;
            }
        }
        out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
        if (out == NULL)
            goto done;
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < m; i++) {
            long long a = A[i], e = B[i];
            clamp_slice(n, &a, &e);
            if (i)
                *o++ = (unsigned char)sep;
            if (e > a) {
                memcpy(o, b + a, (size_t)(e - a));
                o += e - a;
            }
        }
    }
done:
    PyBuffer_Release(&vb);
    PyBuffer_Release(&va);
    PyBuffer_Release(&buf);
    return out;
}

/* ---- chase ------------------------------------------------------------------------ */

enum { STOP_LIMIT = 0, STOP_CAPPED = 1, STOP_SHORT = 2, STOP_MAGIC = 3, STOP_SIZE = 4, STOP_FIT = 5 };

static PyObject *chase(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    long long pos, stop, end, max_count, min_total, need;
    PyObject *magics;
    if (!PyArg_ParseTuple(args, "y*LLLLLLO:chase", &buf, &pos, &stop, &end, &max_count, &min_total, &need, &magics))
        return NULL;
    long long mg[2] = {0, 0};
    int nm = 0;
    PyObject *out = NULL;
    if (magics != Py_None) {
        if (!PyTuple_Check(magics) || PyTuple_GET_SIZE(magics) < 1 || PyTuple_GET_SIZE(magics) > 2) {
            PyErr_SetString(PyExc_TypeError, "chase: magics is None or a tuple of one or two ints");
            goto fail;
        }
        nm = (int)PyTuple_GET_SIZE(magics);
        for (int i = 0; i < nm; i++) {
            mg[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(magics, i));
            if (mg[i] == -1 && PyErr_Occurred())
                goto fail;
        }
        if (nm == 1)
            mg[1] = mg[0];
    }
    if (pos < 0 || pos >= POS_LIMIT || end >= POS_LIMIT || stop >= POS_LIMIT || need < 0 || need >= POS_LIMIT ||
        min_total < 0) {
        /* (min_total >= 0: every start taken moves the walk forward) */
        PyErr_SetString(PyExc_ValueError, "chase: position, need or min_total out of range");
        goto fail;
    }
    {
        const unsigned char *b = (const unsigned char *)buf.buf;
        long long n = (long long)buf.len;
        Py_ssize_t cap = 1024, cnt = 0;
        int64_t *starts = PyMem_Malloc((size_t)cap * 8);
        if (starts == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        int reason = STOP_CAPPED;
        while (cnt < max_count) {
            if (pos >= stop) {
                reason = STOP_LIMIT;
                break;
            }
            if (pos + need > end) {
                reason = STOP_SHORT;
                break;
            }
            long long total = be32_partial(b, n, pos);
            if (nm) {
                if (pos + 8 > n) {
                    reason = STOP_SHORT;
                    break;
                }
                long long magic = be32(b + pos + 4);
                if (magic != mg[0] && magic != mg[1]) {
                    reason = STOP_MAGIC;
                    break;
                }
            }
            if (total <= min_total) {
                reason = STOP_SIZE;
                break;
            }
            if (pos + total > end) {
                reason = STOP_FIT;
                break;
            }
            if (cnt == cap) {
                Py_ssize_t ncap = cap * 2;
                int64_t *grown = PyMem_Realloc(starts, (size_t)ncap * 8);
                if (grown == NULL) {
                    PyMem_Free(starts);
                    PyErr_NoMemory();
                    goto fail;
                }
                starts = grown;
                cap = ncap;
            }
            starts[cnt++] = pos;
            pos += total; /* total > min_total >= ... and total < 2^31: no overflow below 2^62 */
        }
        PyObject *arr = PyByteArray_FromStringAndSize((const char *)starts, cnt * 8);
        PyMem_Free(starts);
        if (arr == NULL)
            goto fail;
        out = Py_BuildValue("(NLi)", arr, pos, reason);
    }
fail:
    PyBuffer_Release(&buf);
    return out;
}

/* ---- the CRC backend ---------------------------------------------------------------- */

static PyObject *set_crc_library(PyObject *self, PyObject *arg)
{
    /* use zng_crc32 from an already loaded shared object (the zlib-ng Python package's
     * extension module); None: back to the portable table CRC. Returns whether in use. */
    if (arg == Py_None) {
        fast_crc = NULL;
        Py_RETURN_FALSE;
    }
    PyObject *enc = NULL;
    if (!PyUnicode_FSConverter(arg, &enc))
        return NULL;
    void *h = dlopen(PyBytes_AS_STRING(enc), RTLD_NOW | RTLD_NOLOAD);
    Py_DECREF(enc);
    if (h == NULL)
        Py_RETURN_FALSE;
    crc_fn f = (crc_fn)dlsym(h, "zng_crc32");
    /* the check value of CRC-32/ISO-HDLC, and the portable CRC on a longer text */
    static const unsigned char probe[] = "123456789 the quick brown fox jumps over the lazy dog 0123456789abcdef";
    if (f == NULL || f(0, probe, 9) != 0xCBF43926u || f(0, probe, sizeof probe - 1) != crc_portable(probe, sizeof probe - 1)) {
        dlclose(h);
        Py_RETURN_FALSE;
    }
    fast_crc = f; /* (the handle stays open: the module is loaded for good) */
    Py_RETURN_TRUE;
}

static PyObject *crc_backend(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(fast_crc ? "zlib-ng" : "portable");
}

static PyMethodDef methods[] = {
    {"chase", chase, METH_VARARGS,
     "chase(buf, pos, stop, end, max_count, min_total, need, magics) -> (starts, pos, reason)"},
    {"crc32_spans", crc32_spans, METH_VARARGS, "crc32_spans(buf, starts, ends) -> int64 CRC-32 of each slice"},
    {"join_spans", join_spans, METH_VARARGS, "join_spans(buf, starts, ends, sep) -> bytes: sep.join(buf[a:b] ...)"},
    {"set_crc_library", set_crc_library, METH_O, "set_crc_library(path or None) -> bool"},
    {"crc_backend", crc_backend, METH_NOARGS, "crc_backend() -> 'zlib-ng' or 'portable'"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ccore", "rmqtool's optional compiled core", -1, methods,
                                   NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ccore(void)
{
    make_crc_table();
    return PyModule_Create(&module);
}
