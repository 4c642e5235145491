/* The columns of one chunk of Kineto trace text, read straight from the bytes (optional: fastscan.py).
 *
 * Why: decoding a chunk into a msgspec struct per event and then reading each struct's fields back in Python
 * (columns.ColumnBuilder) is most of a big trace's CPU time. This scanner reads the chunk's text once and
 * writes its complete ("X") events' columns directly, interning cat/name/pid/tid by their raw byte spans;
 * Python then decodes only the distinct spans (with msgspec, so every escape and code point is msgspec's).
 *
 * Exactness is by refusal: scan() returns None ("bail": the caller decodes the chunk the old way) on anything
 * outside the small subset it reads exactly, and on anything msgspec would reject. Everything it skips is
 * validated as strict JSON (string control characters, escapes, UTF-8, number grammar, literals, nesting,
 * trailing bytes), and it refuses more than JSON does where msgspec does (escaped surrogates, nesting deeper
 * than MAX_DEPTH). Accepting text that msgspec rejects would let the reader take a false event boundary.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define MAX_DEPTH 64    /* msgspec refuses ~1000 levels; far below that, and below any real trace's args */
#define MAX_NUM 64      /* a ts/dur literal longer than this is left to Python */

typedef const unsigned char *P;

/* ---------- growable buffers ---------- */
typedef struct { char *data; size_t len, cap; } Buf;

static int buf_put(Buf *b, const void *x, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, x, n);
    b->len += n;
    return 0;
}

/* ---------- interning by raw span (strings) or int64 value ---------- */
typedef struct { P p; Py_ssize_t len; int64_t v; int is_int; uint64_t h; } Key;
typedef struct { Key *keys; size_t n, cap; int32_t *slots; size_t nslots; } Intern;

static uint64_t mix(uint64_t h) {
    h ^= h >> 33; h *= 0xff51afd7ed558ccdULL; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ULL; h ^= h >> 33;
    return h;
}

static uint64_t hash_span(P p, Py_ssize_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    if (i < n) memcpy(&w, p + i, (size_t)(n - i));
    return mix(h ^ w);
}

static int intern_grow(Intern *t) {
    size_t ns = t->nslots ? t->nslots * 2 : 64;
    int32_t *s = malloc(ns * sizeof(int32_t));
    if (!s) return -1;
    for (size_t i = 0; i < ns; i++) s[i] = -1;
    for (size_t k = 0; k < t->n; k++) {
        size_t j = t->keys[k].h & (ns - 1);
        while (s[j] >= 0) j = (j + 1) & (ns - 1);
        s[j] = (int32_t)k;
    }
    free(t->slots);
    t->slots = s;
    t->nslots = ns;
    return 0;
}

/* the code of key (added in first-seen order if new); -1 on memory failure */
static int32_t intern(Intern *t, P p, Py_ssize_t len, int64_t v, int is_int) {
    if ((t->n + 1) * 2 > t->nslots && intern_grow(t) < 0) return -1;
    uint64_t h = is_int ? mix((uint64_t)v ^ 0x5bd1e995ULL) : hash_span(p, len);
    size_t j = h & (t->nslots - 1);
    for (;;) {
        int32_t c = t->slots[j];
        if (c < 0) break;
        Key *k = &t->keys[c];
        if (k->h == h && k->is_int == is_int &&
            (is_int ? k->v == v : (k->len == len && memcmp(k->p, p, (size_t)len) == 0)))
            return c;
        j = (j + 1) & (t->nslots - 1);
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        Key *k = realloc(t->keys, cap * sizeof(Key));
        if (!k) return -1;
        t->keys = k;
        t->cap = cap;
    }
    Key *k = &t->keys[t->n];
    k->p = p; k->len = len; k->v = v; k->is_int = is_int; k->h = h;
    t->slots[j] = (int32_t)t->n;
    return (int32_t)t->n++;
}

/* ---------- strict JSON validation ---------- */
/* Each returns the position after what it read, or NULL (bail). */

static inline P ws(P p, P end) {
    for (;;) {
        while (end - p >= 8) {  /* the indentation of a pretty-printed trace: 8 spaces at a time */
            uint64_t w;
            memcpy(&w, p, 8);
            if (w != 0x2020202020202020ULL) break;
            p += 8;
        }
        if (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) { p++; continue; }
        return p;
    }
}

/* strings 8 bytes at a time where the compiler has ctz and the machine is little-endian; else byte by byte */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define WORDS8 1
#else
#define WORDS8 0
#endif
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* The bytes of 8 that a string's reader must look at ('"', '\\', a control character, a non-ASCII byte), as
   their high bits: each test is the classic "has a byte less than n" word trick, whose lowest flag is always a
   true one (a false flag needs a borrow from a flagged byte below it), so the first such byte is exact. */
static inline uint64_t special8(uint64_t w) {
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    return ((w - ONES * 0x20) & ~w & HIGHS) | (w & HIGHS) | ((q - ONES) & ~q & HIGHS) | ((b - ONES) & ~b & HIGHS);
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* a string starting at its opening quote; *escaped set when it holds a backslash */
static P string(P p, P end, int *escaped) {
    p++;
    *escaped = 0;
    while (p < end) {
#if WORDS8
        if (end - p >= 8) {
            uint64_t w, m;
            memcpy(&w, p, 8);
            if (!(m = special8(w))) { p += 8; continue; }
            p += __builtin_ctzll(m) >> 3;  /* (little-endian: the lowest byte comes first) */
        }
#endif
        unsigned char c = *p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;            /* msgspec: "invalid character" */
        if (c == '\\') {
            *escaped = 1;
            if (++p >= end) return NULL;
            c = *p;
            if (c == 'u') {
                if (end - p < 5) return NULL;
                int v = 0;
                for (int i = 1; i <= 4; i++) {
                    int h = hexval(p[i]);
                    if (h < 0) return NULL;
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return NULL;  /* surrogates: the lone-surrogate repair's job */
                p += 5;
                continue;
            }
            if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't')
                return NULL;
            p++;
            continue;
        }
        if (c < 0x80) { p++; continue; }
        /* strict UTF-8, as Python's str(bytes, "utf-8") (no surrogates, no overlongs, ≤ U+10FFFF) */
        if (c >= 0xC2 && c <= 0xDF) {
            if (end - p < 2 || (p[1] & 0xC0) != 0x80) return NULL;
            p += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return NULL;
            if (c == 0xE0 && p[1] < 0xA0) return NULL;
            if (c == 0xED && p[1] > 0x9F) return NULL;
            p += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
                return NULL;
            if (c == 0xF0 && p[1] < 0x90) return NULL;
            if (c == 0xF4 && p[1] > 0x8F) return NULL;
            p += 4;
        } else {
            return NULL;
        }
    }
    return NULL;
}

/* a number by JSON's grammar; *is_int when it has no fraction and no exponent */
static P number(P p, P end, int *is_int) {
    *is_int = 1;
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
        *is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    /* a number must end at a delimiter (msgspec: "invalid number" for "1x", "01") */
    if (p < end && !(*p == ',' || *p == '}' || *p == ']' || *p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        return NULL;
    return p;
}

static P literal(P p, P end, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(end - p) < n || memcmp(p, word, n) != 0) return NULL;
    return p + n;
}

static P value(P p, P end, int depth);

static P object(P p, P end, int depth) {
    int esc;
    if (depth > MAX_DEPTH) return NULL;
    p = ws(p + 1, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        if (p >= end || *p != '"' || !(p = string(p, end, &esc))) return NULL;
        p = ws(p, end);
        if (p >= end || *p != ':') return NULL;
        if (!(p = value(ws(p + 1, end), end, depth))) return NULL;
        p = ws(p, end);
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = ws(p + 1, end);
    }
}

static P array(P p, P end, int depth) {
    if (depth > MAX_DEPTH) return NULL;
    p = ws(p + 1, end);
    if (p < end && *p == ']') return p + 1;
    for (;;) {
        if (!(p = value(p, end, depth))) return NULL;
        p = ws(p, end);
        if (p >= end) return NULL;
        if (*p == ']') return p + 1;
        if (*p != ',') return NULL;
        p = ws(p + 1, end);
    }
}

static P value(P p, P end, int depth) {
    int flag;
    if (p >= end) return NULL;
    switch (*p) {
    case '"': return string(p, end, &flag);
    case '{': return object(p, end, depth + 1);
    case '[': return array(p, end, depth + 1);
    case 't': return literal(p, end, "true");
    case 'f': return literal(p, end, "false");
    case 'n': return literal(p, end, "null");
    default: return number(p, end, &flag);
    }
}

/* ---------- the fields we keep ---------- */
typedef struct { P p, e; } Span;  /* a value's text; p == NULL: the key was absent */


/* A kept field's value: its span was read whole by value(), so a span that starts with '-' or a digit is a
   valid JSON number, and one of digits only (after the sign) is an integer literal. */

/* an integer literal of at most 18 digits (so it fits int64 with room); 0 where it is anything else */
static int small_int(Span s, int64_t *out) {
    P p = s.p;
    int neg = *p == '-';
    p += neg;
    if (p >= s.e || s.e - p > 18) return 0;
    int64_t v = 0;
    for (; p < s.e; p++) {
        if (*p < '0' || *p > '9') return 0;  /* (also a string, a literal, a fraction or an exponent) */
        v = v * 10 + (*p - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

/* ts/dur: NaN where absent or null, the literal's double otherwise; 0 (bail) for anything else */
static int float_field(Span s, double *out) {
    if (!s.p || *s.p == 'n') { *out = Py_NAN; return 1; }  /* (a value starting with 'n' is null) */
    int64_t v;
    if (small_int(s, &v)) {
        *out = (double)v;  /* as float(int): round half to even */
        return 1;
    }
    if (!(*s.p == '-' || (*s.p >= '0' && *s.p <= '9')) || s.e - s.p > MAX_NUM) return 0;
    int frac = 0;
    for (P p = s.p; p < s.e; p++) frac |= *p == '.' || *p == 'e' || *p == 'E';
    if (!frac) return 0;  /* an integer of more than 18 digits */
    char tmp[MAX_NUM + 1];
    memcpy(tmp, s.p, (size_t)(s.e - s.p));
    tmp[s.e - s.p] = 0;
    /* correctly rounded (Python's dtoa, as float(str)); the text is a valid number, and with a NULL
       overflow exception an overflow gives inf without raising */
    char *stop;
    double d = PyOS_string_to_double(tmp, &stop, NULL);
    if (stop != tmp + (s.e - s.p) || !isfinite(d)) return 0;  /* inf: msgspec says "out of range" */
    *out = d;
    return 1;
}

/* corr/stream/device as columns._ints: -1 where absent or null; an integer literal through float64 as
   numpy would take it (|v| >= 2**62 → -1); 0 (bail) for anything else */
static int int_field(Span s, int64_t *out) {
    if (!s.p || *s.p == 'n') { *out = -1; return 1; }
    int64_t v;
    if (!small_int(s, &v)) return 0;
    double d = (double)v;
    *out = fabs(d) < 4611686018427387904.0 ? (int64_t)d : -1;
    return 1;
}

enum { F_CAT, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_ARGS, F_PH, NF };
enum { A_CORR, A_STREAM, A_DEVICE, A_NAME, A_ITYPE, A_IDIMS, A_CINPUTS, NA };

/* which event field / args key a key's raw text is (-1: none): by its length, then fixed-size compares */
#define IS(k, lit) (memcmp((k), (lit), sizeof(lit) - 1) == 0)  /* a constant size: compiled inline */

static int field_of(P k, Py_ssize_t n) {
    switch (n) {
    case 2: return IS(k, "ts") ? F_TS : IS(k, "ph") ? F_PH : -1;
    case 3: return IS(k, "cat") ? F_CAT : IS(k, "pid") ? F_PID : IS(k, "tid") ? F_TID : IS(k, "dur") ? F_DUR : -1;
    case 4: return IS(k, "name") ? F_NAME : IS(k, "args") ? F_ARGS : -1;
    default: return -1;
    }
}

static int arg_of(P k, Py_ssize_t n) {
    switch (n) {
    case 4: return IS(k, "name") ? A_NAME : -1;
    case 6: return IS(k, "stream") ? A_STREAM : IS(k, "device") ? A_DEVICE : -1;
    case 10: return IS(k, "Input type") ? A_ITYPE : IS(k, "Input Dims") ? A_IDIMS : -1;
    case 11: return IS(k, "correlation") ? A_CORR : -1;
    case 15: return IS(k, "Concrete Inputs") ? A_CINPUTS : -1;
    default: return -1;
    }
}

typedef struct {
    Buf ts, dur, corr, stream, device, cat, name, pid, tid, mspans;
    Intern icat, iname, ipid, itid;
    Py_ssize_t nx, nother;
} Out;

/* the args object of an event: its known keys' spans; *odd set when the args would not be read exactly
   for a complete event (an escaped key, a repeated known key, shapes) */
static P args_object(P p, P end, Span *a, int *odd) {
    int esc;
    p = ws(p + 1, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        P k = p;
        if (p >= end || *p != '"' || !(p = string(p, end, &esc))) return NULL;
        Py_ssize_t kn = p - k - 2;
        p = ws(p, end);
        if (p >= end || *p != ':') return NULL;
        P v = ws(p + 1, end);
        if (!(p = value(v, end, 2))) return NULL;
        if (esc) *odd = 1;
        int i = arg_of(k + 1, kn);
        if (i >= 0) {
            if (a[i].p || i >= A_ITYPE) *odd = 1;
            a[i].p = v;
            a[i].e = p;
        }
        p = ws(p, end);
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = ws(p + 1, end);
    }
}

static const unsigned char EMPTY[] = "\"\"";

/* a cat/name value: its string span; the default "" where absent; 0 (bail) for anything but a string */
static int str_code(Span s, Intern *t, int32_t *code) {
    if (!s.p) {
        *code = intern(t, EMPTY, 2, 0, 0);
    } else {
        if (*s.p != '"') return 0;  /* (a string: value() has read it whole, s.e is its end) */
        *code = intern(t, s.p, s.e - s.p, 0, 0);
    }
    return 1;
}

/* a pid/tid value: a string span or an int64 literal; 0 where absent (the default); bail otherwise */
static int id_code(Span s, Intern *t, int32_t *code) {
    int64_t v = 0;
    if (s.p && *s.p == '"') return str_code(s, t, code);
    if (s.p && !small_int(s, &v)) return 0;
    *code = intern(t, NULL, 0, v, 1);
    return 1;
}

#define PUT(b, x) do { if (buf_put(&(b), &(x), sizeof(x)) < 0) return -2; } while (0)

/* one event object at p; returns 1 and sets *next, 0 to bail, -2 on memory failure */
static int event(P p, P end, P base, Out *o, P *next) {
    Span f[NF] = {{0}}, a[NA] = {{0}};
    int esc, odd = 0, args_kind = 0;  /* args_kind: 0 absent, 1 object, 2 null, 3 other */
    P start = p;
    p = ws(p + 1, end);
    if (p < end && *p == '}') return 0;  /* no "ph": the loose decoder's */
    for (;;) {
        P k = p;
        if (p >= end || *p != '"' || !(p = string(p, end, &esc)) || esc) return 0;
        Py_ssize_t kn = p - k - 2;
        p = ws(p, end);
        if (p >= end || *p != ':') return 0;
        P v = ws(p + 1, end);
        int which = field_of(k + 1, kn);
        if (which == F_ARGS && v < end && *v == '{') {
            args_kind = 1;
            p = args_object(v, end, a, &odd);
        } else {
            p = value(v, end, 1);
            if (which == F_ARGS) args_kind = (p && p - v == 4 && memcmp(v, "null", 4) == 0) ? 2 : 3;
        }
        if (!p) return 0;
        if (which >= 0) {
            if (f[which].p) return 0;  /* a repeated known key */
            f[which].p = v;
            f[which].e = p;
        }
        p = ws(p, end);
        if (p >= end) return 0;
        if (*p == '}') break;
        if (*p != ',') return 0;
        p = ws(p + 1, end);
    }
    *next = p + 1;
    Span ph = f[F_PH];
    if (!ph.p || ph.e - ph.p != 3 || ph.p[0] != '"' || ph.p[2] != '"') return 0;
    unsigned char c = ph.p[1];
    if (c == 'X') {
        if (odd || args_kind == 3) return 0;  /* args neither an object nor null: msgspec refuses the chunk */
        if (a[A_NAME].p && !(*a[A_NAME].p == '"' || (a[A_NAME].e - a[A_NAME].p == 4 &&
                                                     memcmp(a[A_NAME].p, "null", 4) == 0)))
            return 0;  /* kept as Any: leave a number (maybe out of range) or a structure to msgspec */
        double ts, dur;
        int64_t corr, stream, device;
        int32_t cat, name, pid, tid;
        if (!float_field(f[F_TS], &ts) || !float_field(f[F_DUR], &dur) || !int_field(a[A_CORR], &corr) ||
            !int_field(a[A_STREAM], &stream) || !int_field(a[A_DEVICE], &device) ||
            !str_code(f[F_CAT], &o->icat, &cat) || !str_code(f[F_NAME], &o->iname, &name) ||
            !id_code(f[F_PID], &o->ipid, &pid) || !id_code(f[F_TID], &o->itid, &tid))
            return 0;
        if (cat < 0 || name < 0 || pid < 0 || tid < 0) return -2;
        PUT(o->ts, ts); PUT(o->dur, dur); PUT(o->corr, corr); PUT(o->stream, stream); PUT(o->device, device);
        PUT(o->cat, cat); PUT(o->name, name); PUT(o->pid, pid); PUT(o->tid, tid);
        o->nx++;
        return 1;
    }
    if (c == 'M') {
        int64_t span[2] = {start - base, *next - base};
        if (buf_put(&o->mspans, span, sizeof span) < 0) return -2;
    } else if (!strchr("BEiICbnestfPNODVvRc()", c) || c == 0) {
        return 0;  /* an unknown phase: the loose decoder's */
    }
    o->nother++;
    return 1;
}

static void out_free(Out *o) {
    Buf *b[] = {&o->ts, &o->dur, &o->corr, &o->stream, &o->device, &o->cat, &o->name, &o->pid, &o->tid,
                &o->mspans};
    for (size_t i = 0; i < sizeof b / sizeof *b; i++) free(b[i]->data);
    Intern *t[] = {&o->icat, &o->iname, &o->ipid, &o->itid};
    for (size_t i = 0; i < 4; i++) { free(t[i]->keys); free(t[i]->slots); }
}

/* the whole chunk: "[" event ("," event)* "]" and nothing after; 1 read, 0 bail, -2 no memory */
static int chunk(P p, P end, Out *o) {
    P base = p;
    p = ws(p, end);
    if (p >= end || *p != '[') return 0;
    p = ws(p + 1, end);
    if (p < end && *p == ']') return 0;
    for (;;) {
        if (p >= end || *p != '{') return 0;
        int r = event(p, end, base, o, &p);
        if (r != 1) return r;
        p = ws(p, end);
        if (p >= end) return 0;
        if (*p == ']') break;
        if (*p != ',') return 0;
        p = ws(p + 1, end);
    }
    return ws(p + 1, end) == end;
}

static PyObject *bytes_of(Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

static PyObject *keys_of(Intern *t) {
    PyObject *list = PyList_New((Py_ssize_t)t->n);
    if (!list) return NULL;
    for (size_t i = 0; i < t->n; i++) {
        Key *k = &t->keys[i];
        PyObject *x = k->is_int ? PyLong_FromLongLong(k->v) : PyBytes_FromStringAndSize((const char *)k->p, k->len);
        if (!x) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, (Py_ssize_t)i, x);
    }
    return list;
}

static PyObject *scan(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Out o;
    memset(&o, 0, sizeof o);
    int r;
    P p = (P)view.buf;
    /* (the GIL stays held: PyOS_string_to_double's allocator needs it; zlib on the decompressing thread
       releases it by itself) */
    r = chunk(p, p + view.len, &o);
    PyObject *res = NULL;
    if (PyErr_Occurred()) {
        /* (a MemoryError inside PyOS_string_to_double) */
    } else if (r == -2) {
        PyErr_NoMemory();
    } else if (r == 0) {
        res = Py_NewRef(Py_None);
    } else {
        res = Py_BuildValue("(nnNNNNNNNNNNNNNN)", o.nx, o.nother,
                            bytes_of(&o.ts), bytes_of(&o.dur), bytes_of(&o.corr), bytes_of(&o.stream),
                            bytes_of(&o.device), bytes_of(&o.cat), bytes_of(&o.name), bytes_of(&o.pid),
                            bytes_of(&o.tid), keys_of(&o.icat), keys_of(&o.iname), keys_of(&o.ipid),
                            keys_of(&o.itid), bytes_of(&o.mspans));
    }
    out_free(&o);
    PyBuffer_Release(&view);
    return res;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O,
     "scan(text) -> None (read it the msgspec way) or (n_complete, n_other, ts, dur, corr, stream, device, "
     "cat, name, pid, tid codes, cat/name/pid/tid keys, metadata spans)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
