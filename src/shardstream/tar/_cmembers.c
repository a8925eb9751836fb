/* The tar reader's fast path (see reader.py): the plain members of a buffer window, in C, and
 * (group_members, further down) grouping.py's loop for the common members.
 *
 * plain_members(buf, start, end, base, threshold, limit) -> (members, start)
 *
 * Walks consecutive 512-byte headers in buf[start:end] and returns the (name, data, offset)
 * tuples of the regular members whose header and data lie whole in the window, with the
 * position of the first header it left alone. It leaves alone, to reader.py's Python parse,
 * every header that is not the common case, so that every error, every special member and
 * every refill keeps exactly one implementation:
 *
 *   - fewer than 512 bytes left, or a member's data not whole in the window (a refill);
 *   - a header whose first byte is NUL (the end-of-archive block, or a broken header);
 *   - a size or checksum field that is not plain octal (GNU base-256 among others), or a
 *     checksum that does not match exactly;
 *   - a type other than a regular file ('0', NUL, '7'): long names, PAX headers, directories;
 *   - a size over `threshold` or past the shard's end (`limit`, -1 when unknown).
 *
 * What it accepts, the Python parse accepts and reads the same way: the name (the ustar prefix
 * joined with '/', decoded as UTF-8 with surrogateescape), the data (a copy of `size` bytes),
 * the offset (base + the header's position). The Python parse compares checksums modulo 65521
 * (zlib.adler32, reader.py); an exact match here implies it.
 *
 * Why C: for tiny samples the Python header parse was most of the reading thread's time, and
 * in thread mode that thread's time per sample caps the whole loader
 * (benchmarks/results/bench_scaling.md). The Python parse stays the fallback when this module is
 * not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define BLOCK 512

/* A numeric field as reader._octal reads its octal case: up to the first NUL, spaces stripped at
 * both ends, octal digits only (empty: 0). Returns 0 and sets *out, or -1 (not that case). */
static int
octal_field(const unsigned char *field, Py_ssize_t width, long long *out)
{
    Py_ssize_t n = 0, lo, hi;
    long long value = 0;
    if (field[0] == 0x80 || field[0] == 0xff)
        return -1; /* base-256: the Python parse */
    while (n < width && field[n] != 0)
        n++;
    lo = 0;
    hi = n;
    while (lo < hi && field[lo] == ' ')
        lo++;
    while (hi > lo && field[hi - 1] == ' ')
        hi--;
    if (hi - lo > 20)
        return -1; /* could overflow: the Python parse */
    for (Py_ssize_t i = lo; i < hi; i++) {
        unsigned char c = field[i];
        if (c < '0' || c > '7')
            return -1;
        value = value * 8 + (c - '0');
    }
    *out = value;
    return 0;
}

static PyObject *
plain_members(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end;
    long long base, threshold, limit;
    PyObject *members, *result;

    if (!PyArg_ParseTuple(args, "y*nnLLL", &view, &start, &end, &base, &threshold, &limit))
        return NULL;
    if (start < 0 || end < start || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "plain_members: window out of the buffer");
        return NULL;
    }
    members = PyList_New(0);
    if (members == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    while (end - start >= BLOCK) {
        const unsigned char *h = buf + start;
        long long size, expected, sum = 0;
        unsigned char type = h[156];
        if (h[0] == 0)
            break;
        if (type != '0' && type != 0 && type != '7')
            break;
        if (octal_field(h + 124, 12, &size) < 0 || octal_field(h + 148, 8, &expected) < 0)
            break;
        for (int i = 0; i < BLOCK; i++)
            sum += h[i];
        for (int i = 148; i < 156; i++)
            sum += ' ' - h[i]; /* the checksum field counts as spaces */
        if (sum != expected)
            break;
        long long offset = base + start;
        if (size > threshold || (limit >= 0 && size > limit - offset - BLOCK))
            break;
        long long padded = (size + BLOCK - 1) & ~(long long)(BLOCK - 1);
        if (end - (start + BLOCK) < padded)
            break; /* not whole in the window: the Python parse refills */

        /* The name: up to 100 bytes to a NUL, after the ustar prefix when there is one. */
        const unsigned char *nul = memchr(h, 0, 100);
        Py_ssize_t name_len = nul != NULL ? (Py_ssize_t)(nul - h) : 100;
        PyObject *name;
        if (h[345] != 0 && memcmp(h + 257, "ustar\0", 6) == 0) {
            const unsigned char *pnul = memchr(h + 345, 0, 155);
            Py_ssize_t prefix_len = pnul != NULL ? (Py_ssize_t)(pnul - (h + 345)) : 155;
            char joined[256];
            memcpy(joined, h + 345, prefix_len);
            joined[prefix_len] = '/';
            memcpy(joined + prefix_len + 1, h, name_len);
            name = PyUnicode_DecodeUTF8(joined, prefix_len + 1 + name_len, "surrogateescape");
        } else {
            name = PyUnicode_DecodeUTF8((const char *)h, name_len, "surrogateescape");
        }
        if (name == NULL)
            goto error;
        PyObject *data = PyBytes_FromStringAndSize((const char *)h + BLOCK, (Py_ssize_t)size);
        if (data == NULL) {
            Py_DECREF(name);
            goto error;
        }
        PyObject *at = PyLong_FromLongLong(offset);
        if (at == NULL) {
            Py_DECREF(name);
            Py_DECREF(data);
            goto error;
        }
        PyObject *member = PyTuple_New(3);
        if (member == NULL) {
            Py_DECREF(name);
            Py_DECREF(data);
            Py_DECREF(at);
            goto error;
        }
        PyTuple_SET_ITEM(member, 0, name);
        PyTuple_SET_ITEM(member, 1, data);
        PyTuple_SET_ITEM(member, 2, at);
        if (PyList_Append(members, member) < 0) {
            Py_DECREF(member);
            goto error;
        }
        Py_DECREF(member);
        start += BLOCK + (Py_ssize_t)padded;
    }
    PyBuffer_Release(&view);
    result = Py_BuildValue("(Nn)", members, start);
    return result;

error:
    PyBuffer_Release(&view);
    Py_DECREF(members);
    return NULL;
}

/* ---- group_members: members -> samples (grouping.py's loop, for its common case) ----------
 *
 * group_members(members, i, sample, key, start, url, local_path, lcase, suffixes)
 *     -> (done, i, sample, key, start)
 *
 * Takes members[i:] (a list of (name, data, offset) tuples, as plain_members returns them) into
 * the sample in hand, exactly as grouping.group_samples' loop does, and returns the samples it
 * completed as (sample, start, next, key) tuples (the cursor's values at each yield), the index
 * of the first member it left alone, and the sample in hand after it (sample, key, start).
 * It leaves alone, to grouping.py's Python loop, every member that is not the common case:
 *
 *   - a name starting with "__" (metadata, maybe: the Python loop has the pattern);
 *   - a basename without a usable dot (the Python loop skips it);
 *   - an extension starting with '_' (it could name __key__, __url__ or __local_path__), or one
 *     the sample in hand already has (the Python loop raises the duplicate's error).
 *
 * Why C: with tiny samples the grouping loop was the largest part of the reading thread's time
 * under the GIL, which caps thread mode (benchmarks/results/bench_scaling.md).
 */

#define EXT_MEMO 8

static PyObject *
group_members(PyObject *self, PyObject *args)
{
    PyObject *members, *sample, *key, *start, *url, *local_path, *suffixes;
    Py_ssize_t i;
    int lcase;
    /* Extensions already made in this call, reused: one string object per extension, whose
     * hash is computed once (the samples' dicts all take the same few keys). */
    PyObject *memo[EXT_MEMO];
    int memo_n = 0;

    if (!PyArg_ParseTuple(args, "O!nOOOOOpO", &PyList_Type, &members, &i, &sample, &key, &start, &url,
                          &local_path, &lcase, &suffixes))
        return NULL;
    if (i < 0 || (sample != Py_None && !PyDict_Check(sample))) {
        PyErr_SetString(PyExc_ValueError, "group_members: a negative index, or a sample that is not a dict");
        return NULL;
    }
    PyObject *done = PyList_New(0);
    if (done == NULL)
        return NULL;
    Py_INCREF(sample);
    Py_INCREF(key);
    Py_INCREF(start);
    /* The member is held for its turn (its name, data and offset are borrowed from it): a
     * suffixes object's __contains__ is Python code, which could change the list. */
    PyObject *member = NULL;
    for (; i < PyList_GET_SIZE(members); i++) {
        Py_XSETREF(member, Py_NewRef(PyList_GET_ITEM(members, i)));
        if (!PyTuple_Check(member) || PyTuple_GET_SIZE(member) != 3)
            break;
        PyObject *name = PyTuple_GET_ITEM(member, 0);
        PyObject *data = PyTuple_GET_ITEM(member, 1);
        PyObject *offset = PyTuple_GET_ITEM(member, 2);
        if (!PyUnicode_Check(name))
            break;
        Py_ssize_t len = PyUnicode_GET_LENGTH(name);
        if (len >= 2 && PyUnicode_READ_CHAR(name, 0) == '_' && PyUnicode_READ_CHAR(name, 1) == '_')
            break;
        Py_ssize_t slash = PyUnicode_FindChar(name, '/', 0, len, -1);
        if (slash == -2)
            goto error;
        Py_ssize_t dot = PyUnicode_FindChar(name, '.', slash + 1, len, 1);
        if (dot == -2)
            goto error;
        if (dot <= slash + 1)
            break;
        if (dot + 1 < len && PyUnicode_READ_CHAR(name, dot + 1) == '_')
            break;
        /* The extension, lower-cased as str.lower() does (ASCII here; str.lower() otherwise). */
        PyObject *ext = NULL;
        Py_ssize_t ext_len = len - dot - 1;
        int ascii = PyUnicode_IS_ASCII(name);
        int upper = 0;
        if (lcase && ascii) {
            const Py_UCS1 *chars = PyUnicode_1BYTE_DATA(name) + dot + 1;
            for (Py_ssize_t k = 0; k < ext_len; k++)
                if (chars[k] >= 'A' && chars[k] <= 'Z')
                    upper = 1;
        }
        if (!upper && (ascii || !lcase)) {
            for (int m = 0; m < memo_n; m++) {
                if (PyUnicode_GET_LENGTH(memo[m]) == ext_len && PyUnicode_Tailmatch(name, memo[m], dot + 1, len, 1) == 1) {
                    ext = memo[m];
                    Py_INCREF(ext);
                    break;
                }
            }
        }
        if (ext == NULL) {
            PyObject *raw = PyUnicode_Substring(name, dot + 1, len);
            if (raw == NULL)
                goto error;
            if (lcase && (upper || !ascii)) {
                ext = PyObject_CallMethod(raw, "lower", NULL);
                Py_DECREF(raw);
                if (ext == NULL)
                    goto error;
            } else {
                ext = raw;
                if (memo_n < EXT_MEMO) {
                    Py_INCREF(ext);
                    memo[memo_n++] = ext;
                }
            }
        }
        int same = sample != Py_None && PyUnicode_Check(key) && PyUnicode_GET_LENGTH(key) == dot &&
                   PyUnicode_Tailmatch(name, key, 0, dot, -1) == 1;
        if (same) {
            int has = PyDict_Contains(sample, ext);
            if (has != 0) {
                Py_DECREF(ext);
                if (has < 0)
                    goto error;
                break; /* a duplicate: the Python loop raises its error */
            }
        } else {
            PyObject *prefix = PyUnicode_Substring(name, 0, dot);
            if (prefix == NULL) {
                Py_DECREF(ext);
                goto error;
            }
            PyObject *fresh = PyDict_New();
            if (fresh == NULL || PyDict_SetItemString(fresh, "__key__", prefix) < 0 ||
                PyDict_SetItemString(fresh, "__url__", url) < 0 ||
                (local_path != Py_None && PyDict_SetItemString(fresh, "__local_path__", local_path) < 0)) {
                Py_XDECREF(fresh);
                Py_DECREF(prefix);
                Py_DECREF(ext);
                goto error;
            }
            if (sample != Py_None) {
                PyObject *entry = PyTuple_Pack(4, sample, start, offset, key);
                if (entry == NULL || PyList_Append(done, entry) < 0) {
                    Py_XDECREF(entry);
                    Py_DECREF(fresh);
                    Py_DECREF(prefix);
                    Py_DECREF(ext);
                    goto error;
                }
                Py_DECREF(entry);
            }
            Py_SETREF(sample, fresh);
            Py_SETREF(key, prefix);
            Py_INCREF(offset);
            Py_SETREF(start, offset);
        }
        if (suffixes != Py_None) {
            int keep = PySequence_Contains(suffixes, ext);
            if (keep < 0) {
                Py_DECREF(ext);
                goto error;
            }
            if (!keep) {
                Py_DECREF(ext);
                continue;
            }
        }
        int failed = PyDict_SetItem(sample, ext, data);
        Py_DECREF(ext);
        if (failed < 0)
            goto error;
    }
    Py_XDECREF(member);
    for (int m = 0; m < memo_n; m++)
        Py_DECREF(memo[m]);
    return Py_BuildValue("(NnNNN)", done, i, sample, key, start);

error:
    Py_XDECREF(member);
    for (int m = 0; m < memo_n; m++)
        Py_DECREF(memo[m]);
    Py_DECREF(done);
    Py_DECREF(sample);
    Py_DECREF(key);
    Py_DECREF(start);
    return NULL;
}

static PyMethodDef methods[] = {
    {"plain_members", plain_members, METH_VARARGS,
     "plain_members(buf, start, end, base, threshold, limit) -> (members, start): the plain regular "
     "members whole in buf[start:end] (see the module source); limit -1: unknown."},
    {"group_members", group_members, METH_VARARGS,
     "group_members(members, i, sample, key, start, url, local_path, lcase, suffixes) -> "
     "(done, i, sample, key, start): grouping.py's loop over members[i:] for its common case "
     "(see the module source)."},
    {NULL, NULL, 0, NULL},
};

/* No state: a call reads the caller's buffer and makes new objects, so threads may call it at
 * once, and a free-threaded CPython need not turn its GIL back on for this module. */
static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cmembers",
    "The tar reader's fast path for plain members and their grouping (reader.py and grouping.py "
    "keep the Python code).", 0, methods,
    slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__cmembers(void)
{
    return PyModuleDef_Init(&module);
}
