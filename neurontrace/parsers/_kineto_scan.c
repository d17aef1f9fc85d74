/* Columnar scanner for the traceEvents list of a Kineto (torch.profiler) Chrome trace.
 *
 * One pass over the bytes writes every event straight into column buffers: no Python object per
 * event. It is the fast path of neurontrace/parsers/_kineto_json.py and handles the common shape only: the
 * Python decoder there is the reference. Everything the scanner reads is checked as strictly as
 * JSON demands (RFC 8259: strings, escapes, numbers, literals, nesting), so it is also the
 * validator of the list; input that is not valid JSON, or that it is not sure about (a field of
 * an unexpected type, a number out of range, a non-object event), makes it raise UnsupportedError
 * and the caller decodes the document with the reference instead, which names the problem. It
 * never reads past the end of the buffer it was given.
 *
 * find_events(document) -> offset of the '[' of the top-level "traceEvents" list, or -1.
 * scan(data, start, end, max_bytes, first_index, device_categories[, final])
 *      -> (stop, rows, [(rows, columns)] * 4, closed)
 *   Scans events from byte `start` (after the '[' or a comma) to the list's ']' (closed is True)
 *   or, at the next event boundary, `max_bytes` later. Events are routed to four parts (route()).
 *   `final` False: the buffer is one chunk of a longer input, so an event that the buffer ends in
 *   (its object not closed, or nothing after it yet) is not an error: the scan stops at its '{'
 *   and `stop` says where the caller resumes once it has appended more bytes. An event whose object
 *   closes within the buffer and is still not valid is refused as always.
 *   `columns` maps a column name to its Arrow buffers: (validity bitmap or None, null count,
 *   values) for int64/float64 columns and (validity, null count, int32 offsets, utf-8 data) for
 *   string columns; a column without a single value in the chunk comes as (None, rows, None...).
 *   The column set and its meaning are those of _kineto_json._columns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h> /* 16 bytes at a time where the CPU has it (every x86-64) */
#define SIMD16 1
#endif

static PyObject *Unsupported;

typedef const unsigned char *Ptr;

/* ---- growable buffers and Arrow columns ------------------------------------------------------ */

/* Column buffers are bytearrays from the start, so Arrow can wrap them without a copy. */
typedef struct {
    PyObject *obj; /* bytearray owning p */
    char *p;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 1 << 12;
    while (cap < b->len + extra) cap *= 2;
    if (!b->obj) {
        b->obj = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)cap);
        if (!b->obj) return -1;
    } else if (PyByteArray_Resize(b->obj, (Py_ssize_t)cap) < 0) {
        return -1;
    }
    b->p = PyByteArray_AS_STRING(b->obj);
    b->cap = cap;
    return 0;
}

/* The buffer as a bytearray of its exact length (ownership passes to the caller). */
static PyObject *buf_take(Buf *b) {
    if (!b->obj) return PyByteArray_FromStringAndSize(NULL, 0);
    if (PyByteArray_Resize(b->obj, (Py_ssize_t)b->len) < 0) return NULL;
    PyObject *obj = b->obj;
    b->obj = NULL;
    b->p = NULL;
    b->len = b->cap = 0;
    return obj;
}

static void buf_free(Buf *b) {
    Py_CLEAR(b->obj);
}

typedef struct {
    Buf bits;      /* validity bitmap, bit i = row i */
    Buf values;    /* int64 or float64 values (fixed-width columns) */
    Buf offsets;   /* int32 offsets (string columns) */
    Buf data;      /* utf-8 bytes (string columns) */
    int64_t nulls;
    int64_t filled; /* rows written so far, values or null padding */
    int is_string;
} Col;

enum {
    C_PH, C_CAT, C_NAME, C_PID, C_TID, C_FLOW_ID, C_ARGS, C_TS, C_DUR,
    C_EXTERNAL_ID, C_EXTERNAL_ID_LEGACY, C_CORRELATION, C_DEVICE, C_STREAM, C_NBYTES, C_KIND,
    C_PYTHON_ID, C_PYTHON_PARENT_ID, C_CALL_STACK,
    C_MEM_DEVICE_TYPE, C_MEM_DEVICE_ID, C_MEM_BYTES, C_MEM_TOTAL_ALLOCATED, C_MEM_TOTAL_RESERVED,
    C_LABEL, C_LABELS, C_INDEX, N_COLS
};

static const char *COL_NAMES[N_COLS] = {
    "ph", "cat", "name", "pid", "tid", "flow_id", "args", "ts_ns", "dur_ns",
    "external_id", "external_id_legacy", "correlation", "device", "stream", "nbytes", "kind",
    "python_id", "python_parent_id", "call_stack",
    "mem_device_type", "mem_device_id", "mem_bytes", "mem_total_allocated", "mem_total_reserved",
    "label", "labels", "index",
};

static const char COL_IS_STRING[N_COLS] = {
    1, 1, 1, 1, 1, 1, 1, 0, 0,
    0, 0, 0, 1, 1, 0, 1,
    0, 0, 1,
    0, 0, 0, 0, 0,
    1, 1, 0,
};

typedef struct {
    Col cols[N_COLS];
    int64_t rows;
    Buf scratch; /* unescaped key names */
} Out;

/* Null cells are not written one by one: a column is padded with nulls in bulk when its next
 * value (or the end of the chunk) comes, since most args columns are null in most rows. */

static int col_end_string(Col *c) {
    if (c->data.len > INT32_MAX) {
        PyErr_SetString(Unsupported, "a chunk's string column exceeds 2 GiB");
        return -1;
    }
    if (buf_reserve(&c->offsets, 4) < 0) return -1;
    int32_t off = (int32_t)c->data.len;
    memcpy(c->offsets.p + c->offsets.len, &off, 4);
    c->offsets.len += 4;
    return 0;
}

/* The validity bitmap covers `rows` rows; new bytes are zero (null). */
static int col_bits(Col *c, int64_t rows) {
    size_t need = (size_t)((rows + 7) >> 3);
    if (need <= c->bits.len) return 0;
    if (buf_reserve(&c->bits, need - c->bits.len) < 0) return -1;
    memset(c->bits.p + c->bits.len, 0, need - c->bits.len);
    c->bits.len = need;
    return 0;
}

static int col_pad(Col *c, int64_t row) {
    int64_t gap = row - c->filled;
    if (gap <= 0) return 0;
    if (col_bits(c, row) < 0) return -1;
    if (c->is_string) {
        if (buf_reserve(&c->offsets, (size_t)gap * 4) < 0) return -1;
        int32_t off = (int32_t)c->data.len;
        for (int64_t i = 0; i < gap; i++) memcpy(c->offsets.p + c->offsets.len + 4 * i, &off, 4);
        c->offsets.len += (size_t)gap * 4;
    } else {
        if (buf_reserve(&c->values, (size_t)gap * 8) < 0) return -1;
        memset(c->values.p + c->values.len, 0, (size_t)gap * 8);
        c->values.len += (size_t)gap * 8;
    }
    c->nulls += gap;
    c->filled = row;
    return 0;
}

/* Marks `row` (the row just written) valid. */
static int col_set(Col *c, int64_t row) {
    if (col_bits(c, row + 1) < 0) return -1;
    c->bits.p[row >> 3] |= (char)(1 << (row & 7));
    c->filled = row + 1;
    return 0;
}

static int col_i64(Col *c, int64_t row, int64_t v) {
    if (col_pad(c, row) < 0 || buf_reserve(&c->values, 8) < 0) return -1;
    memcpy(c->values.p + c->values.len, &v, 8);
    c->values.len += 8;
    return col_set(c, row);
}

static int col_f64(Col *c, int64_t row, double v) {
    if (col_pad(c, row) < 0 || buf_reserve(&c->values, 8) < 0) return -1;
    memcpy(c->values.p + c->values.len, &v, 8);
    c->values.len += 8;
    return col_set(c, row);
}

/* Appends one string cell [p, p + n), unescaping it when asked. */
static int unescape_into(Buf *b, Ptr p, Ptr end);

static int col_text(Col *c, int64_t row, const unsigned char *p, size_t n, int escaped) {
    if (col_pad(c, row) < 0) return -1;
    if (escaped) {
        if (unescape_into(&c->data, p, p + n) < 0) return -1;
    } else if (n) {
        if (buf_reserve(&c->data, n) < 0) return -1;
        memcpy(c->data.p + c->data.len, p, n);
        c->data.len += n;
    }
    return col_end_string(c) < 0 ? -1 : col_set(c, row);
}

/* ---- JSON lexing ----------------------------------------------------------------------------- */

#ifdef SIMD16
static inline unsigned match16(__m128i v, char a, char b) {
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(a)), _mm_cmpeq_epi8(v, _mm_set1_epi8(b))));
}
#endif

static inline Ptr skip_ws(Ptr p, Ptr end) {
    /* most tokens follow the last directly or after one space */
    if (p < end && *p > ' ') return p;
    if (end - p >= 2 && *p == ' ' && p[1] > ' ') return p + 1;
#ifdef SIMD16
    /* pretty-printed traces indent every line ("\n" and spaces): a run of any whitespace 16 bytes at a time */
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\n'))),
                                  _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\r')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\t'))));
        unsigned other = ~(unsigned)_mm_movemask_epi8(ws) & 0xFFFFu;
        if (other) return p + __builtin_ctz(other);
        p += 16;
    }
#else
    /* pretty-printed traces indent every line: skip runs of spaces 8 bytes at a time */
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        if (w != 0x2020202020202020ULL) break;
        p += 8;
    }
#endif
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static int hexval(unsigned char ch);
static int read_hex4(Ptr p, Ptr end, uint32_t *out);

/* p at the opening quote; returns just past the closing quote, or NULL for a string that is cut
 * off or not valid JSON (a raw control character, an unknown escape). */
static inline Ptr skip_string(Ptr p, Ptr end, int *escaped) {
    p++;
    for (;;) {
#ifdef SIMD16
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            __m128i ctrl = _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(0x1F)), _mm_set1_epi8(0x1F));
            unsigned hit = match16(v, '"', '\\') | (unsigned)_mm_movemask_epi8(ctrl);
            if (hit) {
                p += __builtin_ctz(hit);
                break;
            }
            p += 16;
        }
#endif
        while (p < end && *p != '"' && *p != '\\' && *p >= 0x20) p++;
        if (p >= end || *p < 0x20) return NULL;
        if (*p == '"') return p + 1;
        *escaped = 1; /* a backslash */
        if (end - p < 2) return NULL;
        switch (p[1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            p += 2;
            break;
        case 'u': {
            /* as msgspec (the reference): a surrogate escape must be a high-low pair */
            uint32_t cp, lo;
            if (read_hex4(p + 2, end, &cp) < 0) return NULL;
            p += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return NULL;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || read_hex4(p + 2, end, &lo) < 0 || lo < 0xDC00 ||
                    lo > 0xDFFF)
                    return NULL;
                p += 6;
            }
            break;
        }
        default:
            return NULL;
        }
    }
}

/* A JSON number (RFC 8259 grammar); returns its end, or NULL. Sets *is_float for a fraction or
 * an exponent. */
static inline Ptr skip_number(Ptr p, Ptr end, int *is_float) {
    *is_float = 0;
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        *is_float = 1;
        Ptr digits = ++p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == digits) return NULL;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_float = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        Ptr digits = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == digits) return NULL;
    }
    return p;
}

static inline Ptr skip_literal(Ptr p, Ptr end, const char *lit, size_t n) {
    return (size_t)(end - p) >= n && memcmp(p, lit, n) == 0 ? p + n : NULL;
}

/* Any JSON value, checked strictly (the scanner is also the validator of what it reads); NULL
 * when it is not valid JSON or nests deeper than MAX_DEPTH. */
#define MAX_DEPTH 512

static Ptr skip_value_at(Ptr p, Ptr end, int depth) {
    if (p >= end) return NULL;
    int esc = 0, is_float;
    switch (*p) {
    case '"':
        return skip_string(p, end, &esc);
    case 't':
        return skip_literal(p, end, "true", 4);
    case 'f':
        return skip_literal(p, end, "false", 5);
    case 'n':
        return skip_literal(p, end, "null", 4);
    case '{':
    case '[': {
        if (depth >= MAX_DEPTH) return NULL;
        unsigned char close = *p == '{' ? '}' : ']';
        p = skip_ws(p + 1, end);
        if (p < end && *p == close) return p + 1;
        for (;;) {
            if (close == '}') { /* a member: "key": value */
                if (p >= end || *p != '"' || !(p = skip_string(p, end, &esc))) return NULL;
                p = skip_ws(p, end);
                if (p >= end || *p != ':') return NULL;
                p = skip_ws(p + 1, end);
            }
            if (!(p = skip_value_at(p, end, depth + 1))) return NULL;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            return p < end && *p == close ? p + 1 : NULL;
        }
    }
    default:
        return skip_number(p, end, &is_float);
    }
}

static Ptr skip_value(Ptr p, Ptr end) {
    return skip_value_at(p, end, 0);
}

static int hexval(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int read_hex4(Ptr p, Ptr end, uint32_t *out) {
    if (end - p < 4) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = (v << 4) | (uint32_t)h;
    }
    *out = v;
    return 0;
}

/* Appends the unescaped content of the string body [p, end) to b. */
static int unescape_into(Buf *b, Ptr p, Ptr end) {
    if (p >= end) return 0;
    if (buf_reserve(b, (size_t)(end - p)) < 0) return -1; /* unescaping never grows the text */
    char *o = b->p + b->len;
    while (p < end) {
        if (*p != '\\') {
            *o++ = (char)*p++;
            continue;
        }
        if (end - p < 2) goto bad;
        unsigned char e = p[1];
        p += 2;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (read_hex4(p, end, &cp) < 0) goto bad;
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair: \uD8xx\uDCxx */
                uint32_t lo;
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || read_hex4(p + 2, end, &lo) < 0 ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    goto bad;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                goto bad;
            }
            /* 6 escaped bytes always cover the at most 4 bytes of UTF-8 they stand for. */
            if (cp < 0x80) {
                *o++ = (char)cp;
            } else if (cp < 0x800) {
                *o++ = (char)(0xC0 | (cp >> 6));
                *o++ = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                *o++ = (char)(0xE0 | (cp >> 12));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                *o++ = (char)(0x80 | (cp & 0x3F));
            } else {
                *o++ = (char)(0xF0 | (cp >> 18));
                *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                *o++ = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            goto bad;
        }
    }
    b->len = (size_t)(o - b->p);
    return 0;
bad:
    PyErr_SetString(Unsupported, "a string with an escape this scanner does not handle");
    return -1;
}

/* ---- values ---------------------------------------------------------------------------------- */

enum { V_ABSENT, V_NULL, V_INT, V_FLOAT, V_STRING, V_OTHER };

typedef struct {
    int type;
    Ptr start, stop; /* the value's text (string: its body, without quotes) */
    int escaped;
} Val;

/* Reads one value at p into v; returns the byte after it. */
static Ptr read_value(Ptr p, Ptr end, Val *v) {
    v->start = p;
    v->escaped = 0;
    if (p >= end) return NULL;
    unsigned char ch = *p;
    if (ch == '"') {
        Ptr q = skip_string(p, end, &v->escaped);
        if (!q) return NULL;
        v->type = V_STRING;
        v->start = p + 1;
        v->stop = q - 1;
        return q;
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        int is_float;
        Ptr q = skip_number(p, end, &is_float);
        if (!q) return NULL;
        v->type = is_float ? V_FLOAT : V_INT;
        v->stop = q;
        return q;
    }
    Ptr q = skip_value(p, end);
    if (!q) return NULL;
    v->stop = q;
    v->type = ch == 'n' ? V_NULL : V_OTHER; /* null, or true, false, an object, an array */
    return q;
}

/* A JSON integer literal as int64; -1 when it does not fit. */
static int parse_i64(const Val *v, int64_t *out) {
    Ptr p = v->start;
    int neg = 0;
    if (p < v->stop && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= v->stop) return -1;
    uint64_t acc = 0;
    for (; p < v->stop; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (d > 9 || acc > (UINT64_MAX - d) / 10) return -1;
        acc = acc * 10 + d;
    }
    if (neg) {
        if (acc > (uint64_t)INT64_MAX + 1) return -1;
        *out = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
    } else {
        if (acc > (uint64_t)INT64_MAX) return -1;
        *out = (int64_t)acc;
    }
    return 0;
}

static int parse_f64(const Val *v, double *out) {
    char tmp[128];
    size_t n = (size_t)(v->stop - v->start);
    if (n == 0 || n >= sizeof tmp) return -1;
    memcpy(tmp, v->start, n);
    tmp[n] = 0;
    char *stop;
    *out = strtod(tmp, &stop);
    return stop == tmp + n ? 0 : -1;
}

static const uint64_t POW10[20] = {
    1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL, 100000000ULL,
    1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL, 10000000000000ULL,
    100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL,
    1000000000000000000ULL, 10000000000000000000ULL,
};

/* A number of microseconds, as printed, to exact int64 nanoseconds: the decimal digits are
 * scaled by 1000 in integer arithmetic and rounded half to even (no binary float in between).
 * Returns -1 for anything that does not fit or has too many digits. */
static int us_text_to_ns(const Val *v, int64_t *out) {
    Ptr p = v->start, end = v->stop;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    uint64_t mant = 0;
    int digits = 0, exp10 = 3, seen = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++, seen++) {
        if (mant == 0 && *p == '0') continue;
        if (++digits > 19) return -1;
        mant = mant * 10 + (uint64_t)(*p - '0');
    }
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++, seen++) {
            exp10--;
            if (mant == 0 && *p == '0') continue;
            if (++digits > 19) return -1;
            mant = mant * 10 + (uint64_t)(*p - '0');
        }
    }
    if (!seen) return -1;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0, e = 0;
        if (p < end && (*p == '+' || *p == '-')) eneg = *p++ == '-';
        if (p >= end) return -1;
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            if (e > 1000) return -1;
            e = e * 10 + (*p - '0');
        }
        exp10 += eneg ? -e : e;
    }
    if (p != end) return -1;
    uint64_t ns;
    if (mant == 0) {
        ns = 0;
    } else if (exp10 >= 0) {
        if (exp10 > 19 || mant > UINT64_MAX / POW10[exp10]) return -1;
        ns = mant * POW10[exp10];
    } else {
        int k = -exp10;
        if (k > 19) {
            ns = 0; /* below half a nanosecond: mant has at most 19 digits, so it is < 10^19 / 2 */
            if (k == 20 && mant >= 5000000000000000000ULL) return -1;
        } else {
            uint64_t d = POW10[k];
            ns = mant / d;
            uint64_t rem = mant % d, half = d / 2;
            if (rem > half || (rem == half && (ns & 1))) ns++;
        }
    }
    if (ns > (uint64_t)INT64_MAX) return -1;
    *out = neg ? -(int64_t)ns : (int64_t)ns;
    return 0;
}

/* ---- keys ------------------------------------------------------------------------------------ */

enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ID, K_ARGS, N_EVENT_KEYS };

/* args keys read by the normalizer (the msgspec structs of _kineto_json) */
enum {
    A_EXTERNAL_ID, A_EXTERNAL_ID_LEGACY, A_CORRELATION, A_DEVICE, A_STREAM, A_BYTES, A_KIND,
    A_CALL_STACK, A_PYTHON_ID, A_PYTHON_PARENT_ID, A_DEVICE_TYPE, A_DEVICE_ID, A_MEM_BYTES,
    A_TOTAL_ALLOCATED, A_TOTAL_RESERVED, A_NAME, A_LABELS, N_ARG_KEYS
};

typedef struct {
    const char *text;
    int id;
    size_t len;
} Key;

#define KEY(text, id) {text, id, sizeof(text) - 1}

static const Key EVENT_KEYS[] = {
    KEY("ph", K_PH), KEY("cat", K_CAT), KEY("name", K_NAME), KEY("pid", K_PID), KEY("tid", K_TID),
    KEY("ts", K_TS), KEY("dur", K_DUR), KEY("id", K_ID), KEY("args", K_ARGS), {NULL, -1, 0},
};

static const Key ARG_KEYS[] = {
    KEY("External id", A_EXTERNAL_ID), KEY("external id", A_EXTERNAL_ID_LEGACY),
    KEY("correlation", A_CORRELATION), KEY("device", A_DEVICE), KEY("stream", A_STREAM),
    KEY("bytes", A_BYTES), KEY("kind", A_KIND), KEY("Call stack", A_CALL_STACK),
    KEY("Python id", A_PYTHON_ID), KEY("Python parent id", A_PYTHON_PARENT_ID),
    KEY("Device Type", A_DEVICE_TYPE), KEY("Device Id", A_DEVICE_ID), KEY("Bytes", A_MEM_BYTES),
    KEY("Total Allocated", A_TOTAL_ALLOCATED), KEY("Total Reserved", A_TOTAL_RESERVED),
    KEY("name", A_NAME), KEY("labels", A_LABELS), {NULL, -1, 0},
};

/* Key lookup by (length, first byte): no two keys of a table share both, so one probe and one
 * memcmp tell whether a key is wanted. Filled once at import (key_index_build). */
#define KEY_MAX_LEN 32
#define KEY_MAX_KEYS 32
typedef struct {
    const Key *keys;
    signed char slot[KEY_MAX_LEN][256];
    uint64_t word[KEY_MAX_KEYS][2]; /* each key's first 16 bytes, zero padded, as two words */
} KeyIndex;

static KeyIndex EVENT_INDEX = {EVENT_KEYS, {{0}}, {{0}}}, ARG_INDEX = {ARG_KEYS, {{0}}, {{0}}};

static int key_index_build(KeyIndex *ix) {
    memset(ix->slot, -1, sizeof ix->slot);
    memset(ix->word, 0, sizeof ix->word);
    for (int i = 0; ix->keys[i].text; i++) {
        const Key *k = &ix->keys[i];
        if (k->len == 0 || k->len >= KEY_MAX_LEN || i >= KEY_MAX_KEYS) return -1;
        signed char *slot = &ix->slot[k->len][(unsigned char)k->text[0]];
        if (*slot >= 0) return -1;
        *slot = (signed char)i;
        memcpy(ix->word[i], k->text, k->len < 16 ? k->len : 16);
    }
    return 0;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KEY_WORDS 1 /* the first n bytes of a loaded word are its low n bytes */
#endif

/* Which key of the index the string body [p, stop) names; -1 for any other. `limit`: the end of the
 * buffer, how far the key's bytes may be loaded a word at a time. */
static int match_key(const KeyIndex *ix, Ptr p, Ptr stop, Ptr limit, int escaped, Buf *scratch) {
    if (escaped) { /* rare: compare the unescaped text */
        scratch->len = 0;
        if (unescape_into(scratch, p, stop) < 0) return -2;
        p = (Ptr)scratch->p;
        stop = p + scratch->len;
        limit = stop;
    }
    size_t n = (size_t)(stop - p);
    if (n == 0 || n >= KEY_MAX_LEN) return -1;
    int i = ix->slot[n][p[0]];
    if (i < 0) return -1;
#ifdef KEY_WORDS
    if (n <= 16 && limit - p >= 16) { /* two loads and masks instead of a loop over the bytes */
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, p + 8, 8);
        uint64_t m0 = n >= 8 ? ~0ULL : (1ULL << (8 * n)) - 1;
        uint64_t m1 = n >= 16 ? ~0ULL : n <= 8 ? 0 : (1ULL << (8 * (n - 8))) - 1;
        return (a & m0) == ix->word[i][0] && (b & m1) == ix->word[i][1] ? ix->keys[i].id : -1;
    }
#endif
    const char *k = ix->keys[i].text; /* short keys: a loop beats a call to memcmp */
    for (size_t j = 1; j < n; j++)
        if ((unsigned char)k[j] != p[j]) return -1;
    return ix->keys[i].id;
}

/* ---- one event ------------------------------------------------------------------------------- */

typedef struct {
    Val ev[N_EVENT_KEYS];
    Val args[N_ARG_KEYS];
    Ptr args_start, args_stop; /* raw text of an args object */
} Event;

static int unsupported(Ptr at, Ptr base, const char *what) {
    PyErr_Format(Unsupported, "%s (event at byte %zd)", what, (Py_ssize_t)(at - base));
    return -1;
}

/* The members of an object at p ('{'), each key looked up in `keys` and stored in vals. */
static Ptr read_object(Ptr p, Ptr end, const KeyIndex *keys, Val *vals, Buf *scratch) {
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') return p + 1;
    while (p < end) {
        if (*p != '"') return NULL;
        int esc = 0;
        Ptr kstop = skip_string(p, end, &esc);
        if (!kstop) return NULL;
        int id = match_key(keys, p + 1, kstop - 1, end, esc, scratch);
        if (id == -2) return NULL;
        p = skip_ws(kstop, end);
        if (p >= end || *p != ':') return NULL;
        p = skip_ws(p + 1, end);
        Val tmp;
        p = read_value(p, end, id >= 0 ? &vals[id] : &tmp);
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') return p + 1;
        return NULL;
    }
    return NULL;
}

/* How a field takes values of other types. Event fields are strict, as the reference's event
 * struct: anything unexpected is an error there, so it is left to the reference. Args fields are
 * loose, as the reference's fallback for odd args (_kineto_json._typed_args): a value that does
 * not convert becomes null, the raw args text keeps it. */
enum { STRICT_STR, STRICT_STR_OR_INT, LOOSE };

/* A string column cell: strings as unescaped text, integers as their digits (pids, tids, ids
 * and devices are ints or strings in the wild and are kept as text). */
static int put_text(Col *c, int64_t row, const Val *v, int mode) {
    if (v->type == V_ABSENT || v->type == V_NULL) return 0;
    if (v->type == V_STRING) return col_text(c, row, v->start, (size_t)(v->stop - v->start), v->escaped);
    if (v->type == V_INT && mode != STRICT_STR) {
        Ptr start = v->start;
        size_t n = (size_t)(v->stop - start);
        if (n == 2 && start[0] == '-' && start[1] == '0') { /* str(int("-0")) == "0" */
            start++;
            n = 1;
        }
        return col_text(c, row, start, n, 0);
    }
    if (v->type == V_OTHER && mode == LOOSE) return 0; /* bool, object, array: null */
    PyErr_SetString(Unsupported, "a text field holds a value of another type");
    return -1;
}

/* 1 when [p, p + n) is valid UTF-8 (RFC 3629: shortest forms, no surrogates, at most U+10FFFF). */
static int utf8_valid(Ptr p, size_t n) {
    Ptr end = p + n;
    while (p < end) {
        unsigned c = *p++;
        if (c < 0x80) continue;
        int more;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) more = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) more = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) more = 3, cp = c & 0x07;
        else return 0;
        if (end - p < more) return 0;
        for (int i = 0; i < more; i++) {
            if ((p[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        p += more;
        if ((more == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (more == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
    }
    return 1;
}

/* A string under a read key that the field does not take (it becomes null): the reference still
 * decodes it, and refuses one that is not UTF-8, so the scanner leaves such input to it. */
static int ignored_string(const Val *v) {
    if (v->type == V_STRING && !utf8_valid(v->start, (size_t)(v->stop - v->start))) {
        PyErr_SetString(Unsupported, "a string that is not valid UTF-8 under a key the decoder reads");
        return -1;
    }
    return 0;
}

/* int64 args field: integers in range, floats truncated toward zero (as int(v)); anything else,
 * and integers beyond int64 (which the raw args keep), null. */
static int put_int(Col *c, int64_t row, const Val *v) {
    int64_t x;
    if (v->type == V_INT && parse_i64(v, &x) == 0) return col_i64(c, row, x);
    if (v->type == V_FLOAT) {
        double f;
        if (parse_f64(v, &f) < 0 || !isfinite(f)) {
            PyErr_SetString(Unsupported, "a number out of the range of a double");
            return -1;
        }
        if (fabs(f) < 9223372036854775808.0) return col_i64(c, row, (int64_t)f);
    }
    return ignored_string(v);
}

/* float64 args field: any number; anything else null. */
static int put_float(Col *c, int64_t row, const Val *v) {
    if (v->type != V_INT && v->type != V_FLOAT) return ignored_string(v);
    double x;
    if (parse_f64(v, &x) < 0 || !isfinite(x)) {
        PyErr_SetString(Unsupported, "a number out of the range of a double");
        return -1;
    }
    return col_f64(c, row, x);
}

static int put_ns(Col *c, int64_t row, const Val *v) {
    if (v->type == V_ABSENT || v->type == V_NULL) return 0;
    int64_t ns;
    if ((v->type != V_INT && v->type != V_FLOAT) || us_text_to_ns(v, &ns) < 0) {
        PyErr_SetString(Unsupported, "a timestamp or duration that is not a number in range");
        return -1;
    }
    return col_i64(c, row, ns);
}

/* The last string written to a column equals `s` (callers know it was written for this row). */
static int last_is(const Col *c, const char *s) {
    size_t n = strlen(s);
    int32_t lo;
    memcpy(&lo, c->offsets.p + c->offsets.len - 8, 4);
    return c->data.len - (size_t)lo == n && memcmp(c->data.p + lo, s, n) == 0;
}

enum { KIND_OP, KIND_PYTHON, KIND_MEMORY, KIND_META };

static int write_event(Out *o, const Event *e, int64_t index) {
    int64_t row = o->rows;
    Col *c = o->cols;
    if (col_i64(&c[C_INDEX], row, index) < 0) return -1;
    const Val *ph = &e->ev[K_PH];
    if (ph->type == V_ABSENT) { /* a missing ph is "" (msgspec default), a null one is an error */
        if (col_text(&c[C_PH], row, (Ptr) "", 0, 0) < 0) return -1;
    } else if (ph->type != V_STRING || put_text(&c[C_PH], row, ph, STRICT_STR) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(Unsupported, "ph is not a string");
        return -1;
    }
    if (put_text(&c[C_CAT], row, &e->ev[K_CAT], STRICT_STR) < 0 ||
        put_text(&c[C_NAME], row, &e->ev[K_NAME], STRICT_STR) < 0 ||
        put_text(&c[C_PID], row, &e->ev[K_PID], STRICT_STR_OR_INT) < 0 ||
        put_text(&c[C_TID], row, &e->ev[K_TID], STRICT_STR_OR_INT) < 0 ||
        put_text(&c[C_FLOW_ID], row, &e->ev[K_ID], STRICT_STR_OR_INT) < 0 || put_ns(&c[C_TS], row, &e->ev[K_TS]) < 0 ||
        put_ns(&c[C_DUR], row, &e->ev[K_DUR]) < 0)
        return -1;

    /* args: raw text, null when absent, null or {} (as _kineto_json._raw_strings) */
    const Val *av = &e->ev[K_ARGS];
    Col *ac = &c[C_ARGS];
    size_t alen = av->type == V_OTHER ? (size_t)(e->args_stop - e->args_start) : 0;
    if (av->type == V_ABSENT || av->type == V_NULL || (alen == 2 && e->args_start[0] == '{')) {
        /* null */
    } else if (av->type == V_OTHER && e->args_start[0] == '{') {
        if (col_text(ac, row, e->args_start, alen, 0) < 0) return -1;
    } else {
        PyErr_SetString(Unsupported, "args is not an object");
        return -1;
    }

    /* Each kind of event reads its own args keys (the structs of _kineto_json). */
    int kind = KIND_OP;
    if (e->ev[K_CAT].type == V_STRING && last_is(&c[C_CAT], "python_function")) kind = KIND_PYTHON;
    if (e->ev[K_NAME].type == V_STRING &&
        (last_is(&c[C_NAME], "[memory]") || last_is(&c[C_NAME], "[OutOfMemory]")))
        kind = KIND_MEMORY;
    if (last_is(&c[C_PH], "M")) kind = KIND_META;
    static const Val none = {V_ABSENT, NULL, NULL, 0};
    const Val *a = e->args;
    int has_args = av->type == V_OTHER; /* an object: anything else was refused or is null */
#define ARG(k, which) (kind == (k) && has_args ? &a[which] : &none)
    if (put_int(&c[C_EXTERNAL_ID], row, ARG(KIND_OP, A_EXTERNAL_ID)) < 0 ||
        put_int(&c[C_EXTERNAL_ID_LEGACY], row, ARG(KIND_OP, A_EXTERNAL_ID_LEGACY)) < 0 ||
        put_int(&c[C_CORRELATION], row, ARG(KIND_OP, A_CORRELATION)) < 0 ||
        put_text(&c[C_DEVICE], row, ARG(KIND_OP, A_DEVICE), LOOSE) < 0 ||
        put_text(&c[C_STREAM], row, ARG(KIND_OP, A_STREAM), LOOSE) < 0 ||
        put_int(&c[C_NBYTES], row, ARG(KIND_OP, A_BYTES)) < 0 ||
        put_text(&c[C_KIND], row, ARG(KIND_OP, A_KIND), LOOSE) < 0 ||
        put_int(&c[C_PYTHON_ID], row, ARG(KIND_PYTHON, A_PYTHON_ID)) < 0 ||
        put_int(&c[C_PYTHON_PARENT_ID], row, ARG(KIND_PYTHON, A_PYTHON_PARENT_ID)) < 0 ||
        put_text(&c[C_CALL_STACK], row, ARG(KIND_OP, A_CALL_STACK), LOOSE) < 0 ||
        put_int(&c[C_MEM_DEVICE_TYPE], row, ARG(KIND_MEMORY, A_DEVICE_TYPE)) < 0 ||
        put_int(&c[C_MEM_DEVICE_ID], row, ARG(KIND_MEMORY, A_DEVICE_ID)) < 0 ||
        put_float(&c[C_MEM_BYTES], row, ARG(KIND_MEMORY, A_MEM_BYTES)) < 0 ||
        put_float(&c[C_MEM_TOTAL_ALLOCATED], row, ARG(KIND_MEMORY, A_TOTAL_ALLOCATED)) < 0 ||
        put_float(&c[C_MEM_TOTAL_RESERVED], row, ARG(KIND_MEMORY, A_TOTAL_RESERVED)) < 0 ||
        put_text(&c[C_LABEL], row, ARG(KIND_META, A_NAME), LOOSE) < 0 ||
        put_text(&c[C_LABELS], row, ARG(KIND_META, A_LABELS), LOOSE) < 0)
        return -1;
#undef ARG
    o->rows++;
    return 0;
}

/* ---- routing --------------------------------------------------------------------------------- */

/* Events go to one of four parts: host events, device events, allocator events, and the rest
 * (metadata, flows, counters, no timestamp, anything escaped). The normalizer still checks every
 * part with its own masks, so routing only decides which parts it can keep whole instead of
 * copying rows out. */
enum { PART_SYSTEM, PART_DEVICE, PART_MEMORY, PART_REST, N_PARTS };

typedef struct {
    const char *text;
    size_t len;
} Span;

typedef struct {
    Span *items;
    Py_ssize_t n;
} Spans;

static int is_plain(const Val *v, const char *s, size_t n) {
    return v->type == V_STRING && !v->escaped && (size_t)(v->stop - v->start) == n && memcmp(v->start, s, n) == 0;
}

static int route(const Event *e, const Spans *device_cats) {
    const Val *ph = &e->ev[K_PH], *cat = &e->ev[K_CAT], *name = &e->ev[K_NAME];
    int ts = e->ev[K_TS].type;
    if ((ts != V_INT && ts != V_FLOAT) || ph->type != V_STRING || ph->escaped || ph->stop - ph->start != 1)
        return PART_REST;
    switch (ph->start[0]) {
    case 'X':
        for (Py_ssize_t i = 0; i < device_cats->n; i++)
            if (is_plain(cat, device_cats->items[i].text, device_cats->items[i].len)) return PART_DEVICE;
        return cat->escaped || name->escaped ? PART_REST : PART_SYSTEM;
    case 'M': case 's': case 'f': case 't': case 'C':
        return PART_REST;
    case 'i': case 'I':
        if (is_plain(name, "[memory]", 8) || is_plain(name, "[OutOfMemory]", 13)) return PART_MEMORY;
        return name->escaped ? PART_REST : PART_SYSTEM;
    default:
        return cat->escaped ? PART_REST : PART_SYSTEM;
    }
}

/* ---- the scan -------------------------------------------------------------------------------- */

/* Whether the object or list at p closes before end (strings and their escapes skipped, nothing
 * else checked): an event that does not may only be cut by the end of a chunk. */
static int closes_before(Ptr p, Ptr end) {
    int64_t depth = 0;
    while (p < end) {
        unsigned char ch = *p++;
        if (ch == '"') {
            while (p < end && *p != '"') p += *p == '\\' ? 2 : 1;
            if (p >= end) return 0;
            p++;
        } else if (ch == '{' || ch == '[') {
            depth++;
        } else if ((ch == '}' || ch == ']') && --depth <= 0) {
            return 1;
        }
    }
    return 0;
}

/* Events from p (just after the array's '[' or a comma) until the array's ']' (*closed = 1),
 * the end of the buffer, or the first event boundary past max_bytes. Not `final`: an event the
 * buffer cuts ends the scan before it (*stop at its '{'), with nothing of it written. */
static int scan_events(Out *parts, const Spans *device_cats, Ptr base, Ptr p, Ptr end, Py_ssize_t max_bytes,
                       int64_t index, int final, Ptr *stop, int *closed) {
    Ptr limit = end - p > max_bytes ? p + max_bytes : end;
    Out *o = &parts[PART_REST]; /* its scratch buffer unescapes keys */
    Event e;
    *closed = 0;
#define CUT_OR(what) (!final && !closes_before(at, end) ? (*stop = at, 0) : unsupported(at, base, what))
    p = skip_ws(p, end);
    if (p < end && *p == ']' && index == 0) { /* [] */
        *closed = 1;
        *stop = p;
        return 0;
    }
    while (p < end) {
        if (p >= limit) break;
        Ptr at = p;
        if (*p != '{') return CUT_OR("an event that is not a JSON object");
        for (int i = 0; i < N_EVENT_KEYS; i++) e.ev[i].type = V_ABSENT;
        Ptr q = skip_ws(p + 1, end);
        if (q < end && *q == '}') {
            p = q + 1;
        } else {
            p = q;
            while (p < end) { /* the event's members */
                if (*p != '"') return CUT_OR("malformed event object");
                int esc = 0;
                Ptr kstop = skip_string(p, end, &esc);
                if (!kstop) return CUT_OR("cut-off key");
                int id = match_key(&EVENT_INDEX, p + 1, kstop - 1, end, esc, &o->scratch);
                if (id == -2) return -1;
                p = skip_ws(kstop, end);
                if (p >= end || *p != ':') return CUT_OR("malformed event object");
                p = skip_ws(p + 1, end);
                if (id == K_ARGS && p < end && *p == '{') {
                    for (int i = 0; i < N_ARG_KEYS; i++) e.args[i].type = V_ABSENT;
                    Ptr s = p;
                    p = read_object(p, end, &ARG_INDEX, e.args, &o->scratch);
                    if (!p) return PyErr_Occurred() ? -1 : CUT_OR("malformed args object");
                    e.ev[K_ARGS] = (Val){V_OTHER, s, p, 0};
                    e.args_start = s;
                    e.args_stop = p;
                } else {
                    Val tmp;
                    p = read_value(p, end, id >= 0 ? &e.ev[id] : &tmp);
                    if (!p) return CUT_OR("cut-off value");
                    if (id == K_ARGS) { /* not an object: write_event reads no keys from it */
                        e.args_start = e.ev[K_ARGS].start;
                        e.args_stop = p;
                    }
                }
                p = skip_ws(p, end);
                if (p < end && *p == ',') {
                    p = skip_ws(p + 1, end);
                    continue;
                }
                if (p < end && *p == '}') {
                    p++;
                    break;
                }
                return CUT_OR("malformed event object");
            }
        }
        if (!final && skip_ws(p, end) >= end) { /* what follows the event is not read yet */
            *stop = at;
            return 0;
        }
        if (write_event(&parts[route(&e, device_cats)], &e, index++) < 0) {
            if (PyErr_ExceptionMatches(Unsupported)) {
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyObject *s = PyObject_Str(value);
                PyErr_Format(Unsupported, "%U (event at byte %zd)", s, (Py_ssize_t)(at - base));
                Py_XDECREF(s);
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
            }
            return -1;
        }
        p = skip_ws(p, end);
        if (p < end && *p == ']') {
            *closed = 1;
            break;
        }
        if (p < end) {
            if (*p != ',') return unsupported(p, base, "events not separated by commas");
            p = skip_ws(p + 1, end);
            if (p < end && *p == ']') return unsupported(p, base, "a comma before the end of the list");
        }
    }
    *stop = p;
    return 0;
#undef CUT_OR
}

/* Offset of the value of the top-level key "traceEvents" (its '['), the members before it checked
 * as JSON; -1 when the document is not an object with such a list. */
static Py_ssize_t events_offset(Ptr base, Ptr end) {
    Ptr p = skip_ws(base, end);
    if (p >= end || *p != '{') return -1;
    p = skip_ws(p + 1, end);
    while (p < end && *p == '"') {
        int esc = 0;
        Ptr key = p + 1, kstop = skip_string(p, end, &esc);
        if (!kstop) return -1;
        p = skip_ws(kstop, end);
        if (p >= end || *p != ':') return -1;
        p = skip_ws(p + 1, end);
        if (!esc && kstop - 1 - key == 11 && memcmp(key, "traceEvents", 11) == 0)
            return p < end && *p == '[' ? p - base : -1;
        if (!(p = skip_value(p, end))) return -1;
        p = skip_ws(p, end);
        if (p >= end || *p != ',') return -1;
        p = skip_ws(p + 1, end);
    }
    return -1;
}

static PyObject *find_events(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    Py_ssize_t at = events_offset((Ptr)view.buf, (Ptr)view.buf + view.len);
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(at);
}

static void out_free(Out *o) {
    for (int i = 0; i < N_COLS; i++) {
        buf_free(&o->cols[i].bits);
        buf_free(&o->cols[i].values);
        buf_free(&o->cols[i].offsets);
        buf_free(&o->cols[i].data);
    }
    buf_free(&o->scratch);
}

static PyObject *columns_dict(Out *o) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int i = 0; i < N_COLS; i++) {
        Col *c = &o->cols[i];
        if (c->filled == 0 && o->rows > 0) { /* no value at all: (None, rows, None[, None]) */
            PyObject *t = c->is_string ? Py_BuildValue("(OLOO)", Py_None, (long long)o->rows, Py_None, Py_None)
                                       : Py_BuildValue("(OLO)", Py_None, (long long)o->rows, Py_None);
            if (!t || PyDict_SetItemString(d, COL_NAMES[i], t) < 0) {
                Py_XDECREF(t);
                Py_DECREF(d);
                return NULL;
            }
            Py_DECREF(t);
            continue;
        }
        if (col_pad(c, o->rows) < 0) {
            Py_DECREF(d);
            return NULL;
        }
        PyObject *bits = c->nulls ? buf_take(&c->bits) : Py_NewRef(Py_None);
        PyObject *t = c->is_string
            ? Py_BuildValue("(NLNN)", bits, (long long)c->nulls, buf_take(&c->offsets), buf_take(&c->data))
            : Py_BuildValue("(NLN)", bits, (long long)c->nulls, buf_take(&c->values));
        if (!t || PyDict_SetItemString(d, COL_NAMES[i], t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(t);
    }
    return d;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t start, end, max_bytes;
    long long first_index;
    PyObject *cats;
    int final = 1;
    if (!PyArg_ParseTuple(args, "y*nnnLO!|p", &view, &start, &end, &max_bytes, &first_index, &PyTuple_Type, &cats,
                          &final))
        return NULL;
    Out parts[N_PARTS];
    memset(parts, 0, sizeof parts);
    Spans device_cats = {NULL, PyTuple_GET_SIZE(cats)};
    PyObject *result = NULL, *lists = NULL;
    if (start < 0 || end > view.len || start > end || max_bytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "scan: range outside the buffer");
        goto done;
    }
    device_cats.items = PyMem_Calloc((size_t)device_cats.n + 1, sizeof(Span));
    if (!device_cats.items) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < device_cats.n; i++) {
        PyObject *item = PyTuple_GET_ITEM(cats, i);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "scan: device categories must be bytes");
            goto done;
        }
        device_cats.items[i] = (Span){PyBytes_AS_STRING(item), (size_t)PyBytes_GET_SIZE(item)};
    }
    for (int k = 0; k < N_PARTS; k++)
        for (int i = 0; i < N_COLS; i++) {
            parts[k].cols[i].is_string = COL_IS_STRING[i];
            if (COL_IS_STRING[i] && col_end_string(&parts[k].cols[i]) < 0) goto done; /* offsets start at 0 */
        }
    Ptr base = (Ptr)view.buf, stop = NULL;
    int closed = 0;
    if (scan_events(parts, &device_cats, base, base + start, base + end, max_bytes, first_index, final, &stop,
                    &closed) < 0)
        goto done;
    lists = PyList_New(N_PARTS);
    if (!lists) goto done;
    long long rows = 0;
    for (int k = 0; k < N_PARTS; k++) {
        PyObject *cols = columns_dict(&parts[k]);
        PyObject *part = cols ? Py_BuildValue("(LN)", (long long)parts[k].rows, cols) : NULL;
        if (!part) goto done;
        PyList_SET_ITEM(lists, k, part);
        rows += parts[k].rows;
    }
    result = Py_BuildValue("(nLOO)", (Py_ssize_t)(stop - base), rows, lists, closed ? Py_True : Py_False);
done:
    Py_XDECREF(lists);
    for (int k = 0; k < N_PARTS; k++) out_free(&parts[k]);
    PyMem_Free(device_cats.items);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, start, end, max_bytes, first_index, device_categories[, final]) -> (stop, rows, [(rows, columns)] * 4, "
     "closed)"},
    {"find_events", find_events, METH_VARARGS, "find_events(document) -> offset of the traceEvents list, or -1"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_kineto_scan",
    .m_doc = "Columnar scanner for Kineto traceEvents arrays.",
    .m_size = -1,
    .m_methods = METHODS,
};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    if (key_index_build(&EVENT_INDEX) < 0 || key_index_build(&ARG_INDEX) < 0) {
        PyErr_SetString(PyExc_ImportError, "_kineto_scan: two keys share a length and first byte");
        return NULL;
    }
    PyObject *m = PyModule_Create(&MODULE);
    if (!m) return NULL;
    Unsupported = PyErr_NewException("_kineto_scan.UnsupportedError", PyExc_ValueError, NULL);
    if (!Unsupported || PyModule_AddObjectRef(m, "UnsupportedError", Unsupported) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
