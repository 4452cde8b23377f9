/*
 * _record_walk: the per-record walk of record_validator.py, compiled.
 *
 * Theory of operation
 * -------------------
 * `walk()` reads the records of one magic-2 batch (the bytes after the batch header, or the inflated
 * records of a compressed batch) exactly as `record_validator._walk` does, and is tested against it
 * (kafkacompat/log/_tests/test_record_walk.py). It mirrors that function step by step, including which
 * reads are bounded by the end of the records and which by the end of the record: the one- and two-byte
 * varints the Python walk decodes inline read up to the end of the data (a read past it is the
 * Python walk's IndexError), every longer varint goes through `read_varint`, bounded by the end of the
 * record for fields inside a record and by the end of the data for the record length.
 *
 * The C side holds no wording and no error codes. It returns a 5-tuple
 *
 *     (fault, index, a, b, flagged)
 *
 * `fault` 0 means every record read well: `index` is the number of records read, `a` the largest
 * timestamp delta among them (the caller adds the base timestamp, so no sum can overflow here) and
 * `flagged` None or a list of (index, key is null, timestamp delta, offset delta) for every record the
 * caller must look at again: a null key on a compacted topic, or (with a timestamp window) a timestamp
 * outside [low, high] or outside int64. The caller re-applies its own rules to those records, so this
 * side may flag more than it refuses but never less. Any other `fault` is one of the FAULT_* kinds
 * below: the walk stopped at record `index`, and `a`, `b` are the numbers the caller's message for that
 * kind needs (listed beside each kind). record_walk.py turns them into record_validator's
 * `InvalidRecords`.
 *
 * The data is taken through the buffer protocol (bytes, bytearray, memoryview) without a copy, and the
 * GIL is held: a walk is microseconds per batch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum {
    FAULT_NONE = 0,
    FAULT_PREMATURE_EOF = 1,       /* fewer records than the count (index: records present) */
    FAULT_RUNS_PAST_END = 2,       /* a read past the end of the data */
    FAULT_ENDS_INSIDE_VARINT = 3,  /* a varint cut by its limit */
    FAULT_LENGTH_OVERLONG = 4,     /* the record length varint is longer than 5 bytes */
    FAULT_VARINT_OVERLONG = 5,     /* any other varint longer than 5 bytes */
    FAULT_VARLONG_OVERLONG = 6,    /* a varlong longer than 10 bytes */
    FAULT_VARINT_OVERFLOW = 7,     /* a varint past int32 */
    FAULT_VARLONG_OVERFLOW = 8,    /* a varlong past int64 */
    FAULT_RECORD_SIZE = 9,         /* a: record length, b: bytes remaining */
    FAULT_KEY_LENGTH = 10,         /* a: key length */
    FAULT_VALUE_LENGTH = 11,       /* a: value length */
    FAULT_VALUE_LENGTH_SHORT = 12, /* a negative value length in two bytes */
    FAULT_PAST_RECORD_END = 13,    /* key or value past the record's end */
    FAULT_HEADERS_NEGATIVE = 14,   /* a: header count */
    FAULT_HEADERS_TOO_MANY = 15,   /* a: header count */
    FAULT_HEADER_KEY_LENGTH = 16,  /* a: header key length */
    FAULT_HEADER_VALUE_LENGTH = 17,/* a: header value length */
    FAULT_RECORD_END = 18,         /* a: record length, b: bytes read for it */
    FAULT_OFFSET_DELTA_INDEX = 19, /* a: offset delta (from a client: not the record's index) */
    FAULT_OFFSET_DELTA_ORDER = 20, /* a: offset delta (not increasing within [0, last offset delta]) */
    FAULT_TRAILING = 21,           /* a: bytes after the counted records */
};

static inline int64_t
zigzag(uint64_t raw)
{
    return (int64_t)((raw >> 1) ^ (0 - (raw & 1)));
}

/*
 * A zigzag varint (int32, at most 5 bytes) or varlong (`wide`: int64, at most 10 bytes) at *pos, read
 * below `limit` (record_validator._varint_slow). Returns FAULT_NONE and advances *pos, or a fault.
 */
static int
read_varint(const uint8_t *data, int64_t *pos, int64_t limit, int wide, int64_t *out)
{
    uint64_t raw = 0;
    int shift = 0;
    const int last_shift = wide ? 63 : 28;
    int64_t p = *pos;
    for (;;) {
        if (p >= limit)
            return FAULT_ENDS_INSIDE_VARINT;
        const uint8_t byte = data[p++];
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            /* the bits the 64-bit accumulator cannot hold: those past bit 63 of the tenth byte */
            if (wide ? (shift == 63 && (byte & 0x7F) > 1) : (raw >> 32) != 0)
                return wide ? FAULT_VARLONG_OVERFLOW : FAULT_VARINT_OVERFLOW;
            break;
        }
        if (shift == last_shift)
            return wide ? FAULT_VARLONG_OVERLONG : FAULT_VARINT_OVERLONG;
        shift += 7;
    }
    *pos = p;
    *out = zigzag(raw);
    return FAULT_NONE;
}

/* Whether base + delta lies outside [low, high] or outside int64. */
static inline int
timestamp_outside(int64_t base, int64_t delta, int64_t low, int64_t high)
{
    if ((delta > 0 && base > INT64_MAX - delta) || (delta < 0 && base < INT64_MIN - delta))
        return 1;
    const int64_t ts = base + delta;
    return ts < low || ts > high;
}

typedef struct {
    int64_t count, base_timestamp, last_offset_delta, low, high;
    int from_client, compacted, window, partial;
} walk_args;

typedef struct {
    int64_t index, a, b;
} walk_result;

/* The walk proper; `flagged` collects records for the caller (a list, created on first use). */
static int
walk_records(const uint8_t *data, int64_t end, const walk_args *args, walk_result *res, PyObject **flagged)
{
    int64_t pos = 0, index = 0, previous_delta = -1, max_delta = INT64_MIN;
    int f;
    uint8_t b, b2;
    int64_t length, record_end, ts_delta, offset_delta, size, headers, i;
    int key_null;

#define FAIL(kind, x, y)        \
    do {                        \
        res->index = index;     \
        res->a = (x);           \
        res->b = (y);           \
        return (kind);          \
    } while (0)
#define NEED(p)                                     \
    do {                                            \
        if ((p) >= end)                             \
            FAIL(FAULT_RUNS_PAST_END, 0, 0);        \
    } while (0)
#define VARINT(limit, wide, out)                                \
    do {                                                        \
        f = read_varint(data, &pos, (limit), (wide), &(out));   \
        if (f)                                                  \
            FAIL(f, 0, 0);                                      \
    } while (0)

    while (index < args->count) {
        if (pos >= end) {
            if (args->partial)
                break;
            FAIL(FAULT_PREMATURE_EOF, 0, 0);
        }
        /* record length (varint) */
        b = data[pos];
        if (b < 0x80) {
            length = zigzag(b);
            pos += 1;
        } else {
            if (pos + 1 >= end) {
                f = FAULT_RUNS_PAST_END;
            } else {
                b2 = data[pos + 1];
                if (b2 < 0x80) {
                    length = zigzag((uint64_t)(b & 0x7F) | ((uint64_t)b2 << 7));
                    pos += 2;
                    f = FAULT_NONE;
                } else {
                    f = read_varint(data, &pos, end, 0, &length);
                }
            }
            if (f) {
                if (args->partial)
                    break;
                FAIL(f == FAULT_VARINT_OVERLONG ? FAULT_LENGTH_OVERLONG : f, 0, 0);
            }
        }
        if (length < 0 || length > end - pos) {
            if (args->partial && length >= 0)
                break;
            FAIL(FAULT_RECORD_SIZE, length, end - pos);
        }
        record_end = pos + length;
        pos += 1; /* attributes (unused in v2) */
        /* timestamp delta (varlong) */
        NEED(pos);
        b = data[pos];
        if (b < 0x80) {
            ts_delta = zigzag(b);
            pos += 1;
        } else {
            VARINT(record_end, 1, ts_delta);
        }
        /* offset delta (varint) */
        NEED(pos);
        b = data[pos];
        if (b < 0x80) {
            offset_delta = zigzag(b);
            pos += 1;
        } else {
            VARINT(record_end, 0, offset_delta);
        }
        /* key (varint length; -1 is null) */
        NEED(pos);
        b = data[pos];
        if (b < 0x80) {
            pos += 1;
            if (b & 1) {
                if (b != 1)
                    FAIL(FAULT_KEY_LENGTH, zigzag(b), 0);
                key_null = 1;
            } else {
                pos += b >> 1;
                key_null = 0;
            }
        } else {
            VARINT(record_end, 0, size);
            if (size < 0)
                FAIL(FAULT_KEY_LENGTH, size, 0);
            pos += size;
            key_null = 0;
        }
        /* value */
        NEED(pos);
        b = data[pos];
        if (b < 0x80) {
            pos += 1;
            if (b & 1) {
                if (b != 1)
                    FAIL(FAULT_VALUE_LENGTH, zigzag(b), 0);
            } else {
                pos += b >> 1;
            }
        } else {
            NEED(pos + 1);
            b2 = data[pos + 1];
            if (b2 < 0x80) {
                if (b & 1)
                    FAIL(FAULT_VALUE_LENGTH_SHORT, 0, 0);
                pos += 2 + (int64_t)((((unsigned)b & 0x7F) | ((unsigned)b2 << 7)) >> 1);
            } else {
                VARINT(record_end, 0, size);
                if (size < -1)
                    FAIL(FAULT_VALUE_LENGTH, size, 0);
                if (size > 0)
                    pos += size;
            }
        }
        if (pos >= record_end)
            FAIL(FAULT_PAST_RECORD_END, 0, 0);
        /* headers */
        if (data[pos] == 0) {
            pos += 1;
        } else {
            VARINT(record_end, 0, headers);
            if (headers < 0)
                FAIL(FAULT_HEADERS_NEGATIVE, headers, 0);
            if (headers > record_end - pos)
                FAIL(FAULT_HEADERS_TOO_MANY, headers, 0);
            for (i = 0; i < headers; i++) {
                VARINT(record_end, 0, size);
                if (size < 0)
                    FAIL(FAULT_HEADER_KEY_LENGTH, size, 0);
                pos += size;
                VARINT(record_end, 0, size);
                if (size < -1)
                    FAIL(FAULT_HEADER_VALUE_LENGTH, size, 0);
                if (size > 0)
                    pos += size;
            }
        }
        if (pos != record_end)
            FAIL(FAULT_RECORD_END, length, length + pos - record_end);
        if (args->from_client) {
            if (offset_delta != index)
                FAIL(FAULT_OFFSET_DELTA_INDEX, offset_delta, 0);
        } else {
            if (offset_delta <= previous_delta || offset_delta > args->last_offset_delta)
                FAIL(FAULT_OFFSET_DELTA_ORDER, offset_delta, 0);
            previous_delta = offset_delta;
        }
        if ((args->compacted && key_null)
            || (args->window
                && timestamp_outside(args->base_timestamp, ts_delta, args->low, args->high))) {
            PyObject *entry = Py_BuildValue("(LiLL)", (long long)index, key_null, (long long)ts_delta,
                                            (long long)offset_delta);
            if (entry == NULL)
                return -1;
            if (*flagged == NULL && (*flagged = PyList_New(0)) == NULL) {
                Py_DECREF(entry);
                return -1;
            }
            f = PyList_Append(*flagged, entry);
            Py_DECREF(entry);
            if (f < 0)
                return -1;
        }
        if (ts_delta > max_delta)
            max_delta = ts_delta;
        index += 1;
    }
    if (pos != end && index == args->count)
        FAIL(FAULT_TRAILING, end - pos, 0);
    res->index = index;
    res->a = index ? max_delta : 0;
    res->b = 0;
    return FAULT_NONE;
#undef FAIL
#undef NEED
#undef VARINT
}

static int
as_int64(PyObject *obj, int64_t *out)
{
    long long value = PyLong_AsLongLong(obj);
    if (value == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)value;
    return 0;
}

static int
as_flag(PyObject *obj, int *out)
{
    int value = PyObject_IsTrue(obj);
    if (value < 0)
        return -1;
    *out = value;
    return 0;
}

PyDoc_STRVAR(walk_doc,
"walk(data, count, base_timestamp, last_offset_delta, from_client, compacted, window, low, high,\n"
"     partial, /) -> (fault, index, a, b, flagged)\n"
"\n"
"Walk `count` magic-2 records in `data` (any contiguous buffer). fault 0: every record read well;\n"
"index is the number read, a the largest timestamp delta, flagged None or a list of\n"
"(index, key_is_null, timestamp_delta, offset_delta) for keyless records on a compacted topic and\n"
"(with `window`) timestamps outside [low, high]. Otherwise fault is the kind of the first fault,\n"
"index its record and a, b the numbers that describe it (see the module source).");

static PyObject *
walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    walk_args wa;
    walk_result res = {0, 0, 0};
    Py_buffer view;
    PyObject *flagged = NULL;
    int fault;
    (void)module;

    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "walk() takes 10 positional arguments (%zd given)", nargs);
        return NULL;
    }
    if (as_int64(args[1], &wa.count) < 0 || as_int64(args[2], &wa.base_timestamp) < 0
        || as_int64(args[3], &wa.last_offset_delta) < 0 || as_flag(args[4], &wa.from_client) < 0
        || as_flag(args[5], &wa.compacted) < 0 || as_flag(args[6], &wa.window) < 0
        || as_int64(args[7], &wa.low) < 0 || as_int64(args[8], &wa.high) < 0
        || as_flag(args[9], &wa.partial) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    fault = walk_records((const uint8_t *)view.buf, (int64_t)view.len, &wa, &res, &flagged);
    PyBuffer_Release(&view);
    if (fault < 0) {
        Py_XDECREF(flagged);
        return NULL;
    }
    if (fault != FAULT_NONE)
        Py_CLEAR(flagged);
    if (flagged == NULL)
        flagged = Py_NewRef(Py_None);
    return Py_BuildValue("(iLLLN)", fault, (long long)res.index, (long long)res.a, (long long)res.b, flagged);
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL, walk_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef_Slot slots[] = {
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kafkacompat.log._record_walk",
    .m_doc = "The per-record walk of record_validator.py, compiled (see record_walk.py).",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__record_walk(void)
{
    return PyModuleDef_Init(&module_def);
}
