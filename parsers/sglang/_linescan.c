/*
 * The compiled line reader of the SGLang parser (optional: parsers/sglang/native.py loads it,
 * and without it the parser runs its polars path, which gives the same rows).
 *
 * One pass over a chunk of valid UTF-8 without NUL bytes (any other chunk is left to the
 * polars path whole: scan() returns None; that path counts what decoding it changes). The
 * chunk is split at LF as
 * parsers/sglang/text.py splits it (one trailing LF dropped, then every LF ends a line). Each
 * line that is a `Decode batch` / `Prefill batch` line in SGLang's plain layout
 *
 *     [YYYY-MM-DD HH:MM:SS( TAGn)*] Decode batch( [N])?[.,] key: value(, key: value)*[, ]*
 *
 * with every key one of the tables configure() was given (a column, a graph key, or a key
 * whose value goes to `extra`), each key once, and every value a plain number (digits, an
 * optional fraction; integer columns: digits only, short enough to be exact) or True/False
 * for the graph key, becomes a typed row of the decode or prefill table. Every other line
 * (metrics lines off that layout included) goes to the `other` table with its line number,
 * and the polars path reads it as before, but for uvicorn's access lines and the `WARNING:`
 * lines of the plain prefix, which become rows of the `bulk` table (configure_bulk, below). So this code decides only what it can decide
 * exactly as the polars path would; anything else is handed back.
 *
 * Values: integers are exact (at most 9 digits for Int32, 15 for Int64: below 2**53, where
 * the polars path's cast through Float64 is exact); floats go through strtod, correctly
 * rounded as polars' cast(Float64) is, and Float32 columns through the double as polars'
 * cast does. Timestamps are checked (a real date and time) and given in microseconds.
 *
 * The tables come back through the Arrow C data interface: each is a struct array exported
 * as a pair of PyCapsules ("arrow_schema", "arrow_array"), which polars imports without a
 * copy of the numbers (numpy is not needed). The scan runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h> /* (part of every x86-64: no flag needed) */
#endif

/* ---- the Arrow C data interface (https://arrow.apache.org/docs/format/CDataInterface.html) */
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

#define ARROW_FLAG_NULLABLE 2

/* ---- growable byte buffers ------------------------------------------------------------ */
typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_reserve_slow(Buf *b, size_t extra) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_reserve(Buf *b, size_t extra) {
    return b->len + extra <= b->cap ? 0 : buf_reserve_slow(b, extra);
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n)) return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

/* ---- columns and tables --------------------------------------------------------------- */
/* column types: 'l' int64, 'i' int32, 'f' float32, 't' timestamp (us), 'b' bool, 's' utf8 */
typedef struct {
    char type;
    char *name;
    Buf data;    /* the values (a byte per row for 'b' until export; the bytes for 's') */
    Buf offs;    /* 's': int32 offsets, n + 1 of them */
    Buf valid;   /* a byte per row: 1 valid, 0 null (packed to bits at export) */
    int64_t nulls;
} Col;

typedef struct {
    int ncols;
    Col *cols;
    int64_t n;
    int64_t cap; /* rows every column has room for (table_reserve) */
} Table;

static int col_width(char type) {
    switch (type) {
    case 'l': case 't': return 8;
    case 'i': case 'f': return 4;
    case 'b': return 1;
    default: return 0;
    }
}

static int table_init(Table *t, int ncols, const char *types, char **names) {
    t->ncols = ncols;
    t->n = t->cap = 0;
    t->cols = calloc((size_t)ncols, sizeof(Col));
    if (!t->cols) return -1;
    for (int i = 0; i < ncols; i++) {
        t->cols[i].type = types[i];
        t->cols[i].name = strdup(names[i]);
        if (!t->cols[i].name) return -1;
        if (types[i] == 's') {
            int32_t zero = 0;
            if (buf_put(&t->cols[i].offs, &zero, 4)) return -1;
        }
    }
    return 0;
}

static void table_free(Table *t) {
    if (!t->cols) return;
    for (int i = 0; i < t->ncols; i++) {
        free(t->cols[i].name);
        free(t->cols[i].data.p);
        free(t->cols[i].offs.p);
        free(t->cols[i].valid.p);
    }
    free(t->cols);
    t->cols = NULL;
}

/* one value into a column: `v` points at the value (NULL: a null), `n` its length for 's' */
static int col_put(Col *c, const void *v, size_t n) {
    uint8_t ok = v != NULL;
    if (buf_reserve(&c->valid, 1) || buf_reserve(&c->data, 8)) return -1;
    c->valid.p[c->valid.len++] = ok;
    if (!ok) c->nulls++;
    if (c->type == 's') {
        if (ok && buf_put(&c->data, v, n)) return -1;
        if (c->data.len > INT32_MAX) return -1;
        int32_t end = (int32_t)c->data.len;
        return buf_put(&c->offs, &end, 4);
    }
    char *d = c->data.p + c->data.len;
    switch (col_width(c->type)) { /* fixed sizes: plain moves, no call */
    case 8: { uint64_t x = 0; if (ok) memcpy(&x, v, 8); memcpy(d, &x, 8); c->data.len += 8; break; }
    case 4: { uint32_t x = 0; if (ok) memcpy(&x, v, 4); memcpy(d, &x, 4); c->data.len += 4; break; }
    default: *d = ok ? *(const char *)v : 0; c->data.len += 1;
    }
    return 0;
}

/* room for `rows` more rows in every column of a table (the strings' bytes excepted): the
   puts below write without a check (a metrics row: ~16 of them). put_row grows a table as it
   fills (no guess up front: reserving a chunk's worth of rows raised an ingest's peak RSS by
   ~15 MB for ~0.01 s of CPU per 100 MB) */
static int table_reserve(Table *t, int64_t rows) {
    for (int i = 0; i < t->ncols; i++) {
        Col *c = &t->cols[i];
        size_t w = c->type == 's' ? 0 : (size_t)col_width(c->type);
        if (buf_reserve(&c->valid, (size_t)rows) || buf_reserve(&c->data, w * (size_t)rows) ||
            (c->type == 's' && buf_reserve(&c->offs, 4 * (size_t)rows)))
            return -1;
    }
    t->cap = t->n + rows;
    return 0;
}

/* unchecked puts of a fixed-width value or a null (after table_reserve) */
static inline void put_fixed(Col *c, const void *v, size_t w) {
    c->valid.p[c->valid.len++] = 1;
    memcpy(c->data.p + c->data.len, v, w);
    c->data.len += w;
}

static inline void put_null(Col *c) {
    c->valid.p[c->valid.len++] = 0;
    c->nulls++;
    if (c->type == 's') {
        int32_t end = (int32_t)c->data.len;
        memcpy(c->offs.p + c->offs.len, &end, 4);
        c->offs.len += 4;
    } else {
        size_t w = (size_t)col_width(c->type);
        memset(c->data.p + c->data.len, 0, w);
        c->data.len += w;
    }
}

/* a string (its bytes checked, its offset not) */
static inline int put_str(Col *c, const char *v, size_t n) {
    if (buf_put(&c->data, v, n) || c->data.len > INT32_MAX) return -1;
    c->valid.p[c->valid.len++] = 1;
    int32_t end = (int32_t)c->data.len;
    memcpy(c->offs.p + c->offs.len, &end, 4);
    c->offs.len += 4;
    return 0;
}

/* a byte per row -> Arrow's bits (LSB first); NULL when out of memory */
static uint8_t *pack_bits(const Buf *bytes, int64_t n) {
    uint8_t *bits = calloc((size_t)(n / 8 + 1), 1);
    if (!bits) return NULL;
    for (int64_t i = 0; i < n; i++)
        if (bytes->p[i]) bits[i / 8] |= (uint8_t)(1u << (i % 8));
    return bits;
}

/* ---- export: a table -> a struct array, its children the columns ---------------------- */
typedef struct {
    void *mem[3];
    const void *bufs[3];
} ChildData;

static void release_child(struct ArrowArray *a) {
    ChildData *d = a->private_data;
    for (int i = 0; i < 3; i++) free(d->mem[i]);
    free(d);
    a->release = NULL;
}

static void release_parent(struct ArrowArray *a) {
    for (int64_t i = 0; a->children && i < a->n_children; i++) {
        struct ArrowArray *c = a->children[i];
        if (c && c->release) c->release(c);
        free(c);
    }
    free(a->children);
    free(a->buffers);
    a->release = NULL;
}

static void release_schema(struct ArrowSchema *s) {
    for (int64_t i = 0; s->children && i < s->n_children; i++) {
        struct ArrowSchema *c = s->children[i];
        if (c && c->release) c->release(c);
        free(c);
    }
    free(s->children);
    free((void *)s->name);
    s->release = NULL;
}

static const char *arrow_format(char type) {
    switch (type) {
    case 'l': return "l";
    case 'i': return "i";
    case 'f': return "f";
    case 't': return "tsu:";
    case 'b': return "b";
    default: return "u";
    }
}

/* a buffer cut to its length: the doubling growth leaves up to half of it unused, and a
   typed chunk's columns are held until its rows are written (the ingest's staging) */
static void shrink(void **mem, size_t len) {
    if (!len || !*mem) return;
    void *p = realloc(*mem, len);
    if (p) *mem = p;
}

/* the column's buffers move into the child array (the column is left empty) */
static int export_col(Col *c, int64_t n, struct ArrowArray *a, struct ArrowSchema *s) {
    ChildData *d = calloc(1, sizeof(ChildData));
    if (!d) return -1;
    if (c->nulls) {
        d->mem[0] = pack_bits(&c->valid, n);
        if (!d->mem[0]) { free(d); return -1; }
    }
    int nb = 2;
    if (c->type == 's') {
        d->mem[1] = c->offs.p;
        d->mem[2] = c->data.p ? c->data.p : malloc(1);
        c->offs.p = c->data.p = NULL;
        nb = 3;
    } else if (c->type == 'b') {
        d->mem[1] = pack_bits(&c->data, n);
        free(c->data.p);
        c->data.p = NULL;
    } else {
        d->mem[1] = c->data.p ? c->data.p : malloc(8);
        c->data.p = NULL;
    }
    if (c->type == 's') {
        shrink(&d->mem[1], c->offs.len);
        shrink(&d->mem[2], c->data.len);
    } else if (c->type != 'b') {
        shrink(&d->mem[1], c->data.len);
    }
    for (int i = 0; i < 3; i++) d->bufs[i] = d->mem[i];
    *a = (struct ArrowArray){n, c->nulls, 0, nb, 0, d->bufs, NULL, NULL, release_child, d};
    *s = (struct ArrowSchema){arrow_format(c->type), strdup(c->name), NULL, ARROW_FLAG_NULLABLE,
                              0, NULL, NULL, release_schema, NULL};
    return (d->mem[1] && s->name) ? 0 : -1;
}

static void capsule_schema_free(PyObject *cap) {
    struct ArrowSchema *s = PyCapsule_GetPointer(cap, "arrow_schema");
    if (s && s->release) s->release(s);
    free(s);
}

static void capsule_array_free(PyObject *cap) {
    struct ArrowArray *a = PyCapsule_GetPointer(cap, "arrow_array");
    if (a && a->release) a->release(a);
    free(a);
}

/* a table -> (schema capsule, array capsule); the table is emptied */
static PyObject *export_table(Table *t) {
    int nc = t->ncols;
    struct ArrowSchema *s = calloc(1, sizeof *s);
    struct ArrowArray *a = calloc(1, sizeof *a);
    if (!s || !a) goto fail;
    *s = (struct ArrowSchema){"+s", strdup(""), NULL, 0, nc, calloc((size_t)nc, sizeof(void *)),
                              NULL, release_schema, NULL};
    *a = (struct ArrowArray){t->n, 0, 0, 1, nc, calloc(1, sizeof(void *)),
                             calloc((size_t)nc, sizeof(void *)), NULL, release_parent, NULL};
    if (!s->children || !a->children || !a->buffers || !s->name) goto fail;
    for (int i = 0; i < nc; i++) {
        s->children[i] = calloc(1, sizeof(struct ArrowSchema));
        a->children[i] = calloc(1, sizeof(struct ArrowArray));
        if (!s->children[i] || !a->children[i]) goto fail;
        if (export_col(&t->cols[i], t->n, a->children[i], s->children[i])) goto fail;
    }
    PyObject *cs = PyCapsule_New(s, "arrow_schema", capsule_schema_free);
    if (!cs) goto fail;
    PyObject *ca = PyCapsule_New(a, "arrow_array", capsule_array_free);
    if (!ca) { Py_DECREF(cs); return NULL; } /* s is freed by its capsule; a leaks on OOM */
    return Py_BuildValue("(NN)", cs, ca);
fail:
    if (s && s->release) s->release(s);
    if (a && a->release) a->release(a);
    free(s);
    free(a);
    return PyErr_NoMemory();
}

/* ---- the layout tables (configure) ---------------------------------------------------- */
#define MAX_KEYS 64
#define MAX_COLS 48
enum { K_COL = 0, K_GRAPH = 1, K_EXTRA = 2 };

typedef struct {
    char *text;
    size_t len;
    int role; /* K_COL, K_GRAPH, K_EXTRA */
    int col;  /* K_COL: the field's index in the kind's fields */
} Key;

typedef struct {
    char *head; /* "Decode batch" */
    size_t head_len;
    int nfields;
    char ftype[MAX_COLS]; /* 'i' / 'l' / 'f' per field */
    char *fname[MAX_COLS];
    int nkeys;
    Key keys[MAX_KEYS];
} Kind;

static Kind kinds[2];
static int nkinds = 0;
static char *tags[16];
static size_t tag_len[16];
static int ntags = 0;

/* ---- one metrics line ----------------------------------------------------------------- */
#define EXTRA_MAX 512
typedef struct {
    int kind;
    int64_t ts;
    const char *rank;
    size_t rank_len;
    int64_t iter; /* -1: none */
    int has[MAX_COLS];
    int64_t ival[MAX_COLS];
    double fval[MAX_COLS];
    int graph; /* -1 none, 0 False, 1 True */
    char extra[EXTRA_MAX];
    size_t extra_len;
} Row;

static int digits(const char *p, const char *end, int max) {
    int n = 0;
    while (p + n < end && p[n] >= '0' && p[n] <= '9') n++;
    return n <= max ? n : -1;
}

static int num2(const char *p) { return (p[0] - '0') * 10 + (p[1] - '0'); }

static int64_t days_from_civil(int y, int m, int d) {
    y -= m <= 2;
    int era = (y >= 0 ? y : y - 399) / 400;
    int yoe = y - era * 400;
    int doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return (int64_t)era * 146097 + doe - 719468;
}

/* the last date read_ts found valid (the date bytes of `[YYYY-MM-DD`, its day number): a
   chunk's lines mostly share one or two dates (a scan's own: no state between calls) */
typedef struct {
    char date[10];
    int64_t days;
    int set;
} DateCache;

/* the 8 bytes at p against a mask: where `digit` has 0xff a digit, elsewhere the byte of `lit`
   (0 where a digit goes). A digit is 0x30..0x39: its high nibble 3, and still 3 after adding 6
   (no byte carries into the next: all are below 0x40 when the first test holds). Bytewise, so
   the same on either byte order (the masks are loaded as the bytes are). */
static inline int word_shape(const char *p, const char *digit, const char *lit) {
    uint64_t x, dm, l;
    memcpy(&x, p, 8);
    memcpy(&dm, digit, 8);
    memcpy(&l, lit, 8);
    const uint64_t hi = 0xf0f0f0f0f0f0f0f0ull & dm, three = 0x3030303030303030ull & dm;
    uint64_t d = x & dm;
    return (x & ~dm) == l && (d & hi) == three && ((d + (0x0606060606060606ull & dm)) & hi) == three;
}

/* `[0000-00-00 00:00:00` (0: a digit) at p, 20 bytes: three overlapping words */
static inline int ts_shape(const char *p) {
    static const char digit[20] = {0, -1, -1, -1, -1, 0, -1, -1, 0, -1,
                                   -1, 0, -1, -1, 0, -1, -1, 0, -1, -1};
    static const char lit[20] = "[\0\0\0\0-\0\0-\0\0 \0\0:\0\0:\0";
    return word_shape(p, digit, lit) && word_shape(p + 8, digit + 8, lit + 8) &&
           word_shape(p + 12, digit + 12, lit + 12);
}

/* `[YYYY-MM-DD HH:MM:SS` at p (20 bytes): a real date and time -> microseconds, else -1 */
static int read_ts(const char *p, const char *end, int64_t *out, DateCache *dc) {
    if (end - p < 20 || !ts_shape(p)) return -1;
    int h = num2(p + 12), mi = num2(p + 15), s = num2(p + 18);
    if (h > 23 || mi > 59 || s > 59) return -1;
    if (!dc->set || memcmp(dc->date, p + 1, 10) != 0) {
        int y = num2(p + 1) * 100 + num2(p + 3), mo = num2(p + 6), d = num2(p + 9);
        static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        if (y < 1000 || mo < 1 || mo > 12 || d < 1) return -1;
        int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        if (d > mdays[mo - 1] + (mo == 2 && leap)) return -1;
        memcpy(dc->date, p + 1, 10);
        dc->days = days_from_civil(y, mo, d);
        dc->set = 1;
    }
    *out = ((dc->days * 86400) + h * 3600 + mi * 60 + s) * 1000000LL;
    return 0;
}

/* a plain number `[0-9]+(\.[0-9]+)?` at p -> its length, else -1 */
static int plain_number(const char *p, const char *end) {
    int n = digits(p, end, 30);
    if (n <= 0) return -1;
    if (p + n < end && p[n] == '.') {
        int f = digits(p + n + 1, end, 30);
        if (f <= 0) return -1;
        n += 1 + f;
    }
    return n <= 30 ? n : -1;
}

/* a plain number `[0-9]+(\.[0-9]+)?` at v (at most 30 digits) -> its length and, in *out,
 * the double nearest to it, as strtod (and polars) give it; -1: not a plain number.
 * With at most 15 significant digits the digits are an exact double m, and 10**k (k <= 22)
 * is exact too, so m / 10**k, one IEEE division, is the correctly rounded value (Clinger's
 * fast path); other numbers go through strtod, correctly rounded in glibc. */
static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                               1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int read_double_long(const char *v, const char *end, double *out) {
    int64_t m = 0;
    int ndig = 0, frac = 0;
    const char *p = v;
    for (int part = 0; part < 2; part++) { /* the digits, then those after a `.` */
        int k = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (ndig <= 15) {
                m = m * 10 + (*p - '0');
                if (m) ndig++; /* significant digits (leading zeros are not) */
            }
            p++;
            k++;
        }
        if (k == 0) return -1;
        if (part) frac = k;
        if (part || p >= end || *p != '.') break;
        p++;
    }
    int whole = (int)(p - v);
    if (whole > 30) return -1; /* (the dot counted, as plain_number counts it) */
    if (ndig <= 15 && frac <= 22) {
        *out = (double)m / pow10[frac];
    } else {
        char tmp[32];
        memcpy(tmp, v, (size_t)whole);
        tmp[whole] = 0;
        *out = strtod(tmp, NULL);
    }
    return whole;
}

/* the same, in one pass where the number has at most 15 digits in all (the common case: then
   it has at most 15 significant ones, and read_double_long would divide the same m) */
static inline int read_double(const char *v, const char *end, double *out) {
    const char *p = v;
    uint64_t m = 0;
    while (p < end && (unsigned)(*p - '0') < 10 && p - v < 16) m = m * 10 + (unsigned)(*p++ - '0');
    int ki = (int)(p - v), frac = 0;
    if (ki == 0 || ki > 15) return read_double_long(v, end, out);
    if (p < end && *p == '.') {
        const char *f = ++p;
        while (p < end && (unsigned)(*p - '0') < 10 && ki + (p - f) < 16)
            m = m * 10 + (unsigned)(*p++ - '0');
        frac = (int)(p - f);
        if (frac == 0 || ki + frac > 15) return read_double_long(v, end, out);
    }
    *out = (double)m / pow10[frac];
    return (int)(p - v);
}

/* the same bytes (a key of a table against the line's) */
static inline int same_word(const char *a, const char *b) {
    uint64_t x, y;
    memcpy(&x, a, 8);
    memcpy(&y, b, 8);
    return x == y;
}

static inline int same(const char *a, const char *b, size_t n) {
    if (n >= 8) { /* words, the last one overlapping the one before (no byte loop) */
        for (size_t i = 0; i + 8 < n; i += 8)
            if (!same_word(a + i, b + i)) return 0;
        return same_word(a + n - 8, b + n - 8);
    }
    if (n >= 4) {
        uint32_t x, y, u, w;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        memcpy(&u, a + n - 4, 4);
        memcpy(&w, b + n - 4, 4);
        return x == y && u == w;
    }
    while (n--)
        if (*a++ != *b++) return 0;
    return 1;
}

static const Key *find_key(const Kind *k, const char *p, size_t n, int *hint) {
    if (*hint >= 0 && *hint < k->nkeys) {
        const Key *h = &k->keys[*hint];
        if (h->len == n && same(h->text, p, n)) return h;
    }
    for (int i = 0; i < k->nkeys; i++) {
        if (k->keys[i].len == n && same(k->keys[i].text, p, n)) {
            *hint = i;
            return &k->keys[i];
        }
    }
    return NULL;
}

/* `key: value` fields from p to end into r (1: all of them read, 0: off the layout) */
static int read_fields(const Kind *k, const char *p, const char *end, Row *r, int *hints) {
    uint64_t seen = 0;
    int nf = 0;
    for (;;) {
        int *hint = &hints[nf < MAX_KEYS ? nf : 0];
        const Key *key = NULL;
        const char *colon;
        if (*hint >= 0 && *hint < k->nkeys) { /* the key the last line had here, followed by
                                                 `: ` (no key holds a `:`: it is the first) */
            const Key *h = &k->keys[*hint];
            if ((size_t)(end - p) > h->len + 1 && same(h->text, p, h->len) &&
                p[h->len] == ':' && p[h->len + 1] == ' ')
                key = h;
        }
        if (key) {
            colon = p + key->len;
        } else {
            colon = memchr(p, ':', (size_t)(end - p));
            if (!colon || colon == p || colon + 1 >= end || colon[1] != ' ') return 0;
            key = find_key(k, p, (size_t)(colon - p), hint);
            if (!key) return 0;
        }
        int id = (int)(key - k->keys);
        if (seen & (1ull << id)) return 0;
        seen |= 1ull << id;
        const char *v = colon + 2;
        int n;
        if (key->role == K_GRAPH) {
            if (r->graph >= 0) return 0; /* two graph keys: the polars paths differ */
            if (end - v >= 4 && memcmp(v, "True", 4) == 0) { r->graph = 1; n = 4; }
            else if (end - v >= 5 && memcmp(v, "False", 5) == 0) { r->graph = 0; n = 5; }
            else return 0;
        } else if (key->role == K_COL && k->ftype[key->col] != 'f') {
            uint64_t x = 0; /* (unsigned: a long run wraps, and is refused below) */
            n = 0;
            while (v + n < end && (unsigned)(v[n] - '0') < 10) x = x * 10 + (unsigned)(v[n++] - '0');
            if (n <= 0 || n > (k->ftype[key->col] == 'i' ? 9 : 15)) return 0;
            r->ival[key->col] = (int64_t)x;
            r->has[key->col] = 1;
        } else {
            if (key->role == K_COL) {
                n = read_double(v, end, &r->fval[key->col]);
                if (n < 0) return 0;
                r->has[key->col] = 1;
            } else { /* `"key": value` into extra (keys hold no quote or backslash) */
                n = plain_number(v, end);
                if (n < 0) return 0;
                size_t need = key->len + (size_t)n + 8;
                if (r->extra_len + need >= EXTRA_MAX) return 0;
                char *e = r->extra + r->extra_len;
                *e++ = r->extra_len ? ',' : '{';
                if (r->extra_len) *e++ = ' ';
                *e++ = '"';
                memcpy(e, key->text, key->len);
                e += key->len;
                *e++ = '"'; *e++ = ':'; *e++ = ' ';
                memcpy(e, v, (size_t)n);
                e += n;
                r->extra_len = (size_t)(e - r->extra);
            }
        }
        nf++;
        p = v + n;
        if (end - p >= 3 && p[0] == ',' && p[1] == ' ' && p[2] != ' ' && p[2] != ',') {
            p += 2; /* `, ` and the next key (the common case, tested first) */
            continue;
        }
        while (p < end && (*p == ',' || *p == ' ')) p++;
        return p == end; /* the end, maybe after a ragged ", "; else off the layout */
    }
}

/* `[YYYY-MM-DD HH:MM:SS( TAGn)*] ` at p (SGLang's plain prefix): the message's start, the
   time in *ts and the tags (`TP3`, `DP1 TP3`) in rank / rank_len; NULL: another shape */
static const char *read_prefix(const char *p, const char *end, int64_t *ts, const char **rank,
                               size_t *rank_len, DateCache *dc) {
    if (read_ts(p, end, ts, dc)) return NULL;
    const char *q = p + 20;
    *rank = q + 1;
    while (q < end && *q == ' ') { /* rank tags: ` TP3`, ` DP1 TP3` */
        q++;
        int t;
        for (t = 0; t < ntags; t++)
            if ((size_t)(end - q) > tag_len[t] && same(q, tags[t], tag_len[t])) break;
        if (t == ntags) return NULL;
        q += tag_len[t];
        int n = digits(q, end, 9);
        if (n <= 0) return NULL;
        q += n;
    }
    *rank_len = q > p + 20 ? (size_t)(q - *rank) : 0;
    if (end - q < 2 || q[0] != ']' || q[1] != ' ') return NULL;
    return q + 2;
}

/* one line: a metrics line of the plain layout -> 1 and r filled; else 0 */
static int read_metrics(const char *p, const char *end, Row *r, int hints[][MAX_KEYS],
                        DateCache *dc) {
    if (end - p < 40) return 0;
    const char *q = read_prefix(p, end, &r->ts, &r->rank, &r->rank_len, dc);
    if (!q) return 0;
    for (r->kind = 0; r->kind < nkinds; r->kind++) {
        const Kind *k = &kinds[r->kind];
        if ((size_t)(end - q) > k->head_len && same(q, k->head, k->head_len)) break;
    }
    if (r->kind == nkinds) return 0;
    q += kinds[r->kind].head_len;
    r->iter = -1;
    if (end - q > 2 && q[0] == ' ' && q[1] == '[') { /* `[N]` iteration tag */
        int n = digits(q + 2, end, 18);
        if (n <= 0 || q + 2 + n >= end || q[2 + n] != ']') return 0;
        r->iter = 0;
        for (int i = 0; i < n; i++) r->iter = r->iter * 10 + (q[2 + i] - '0');
        q += 3 + n;
    }
    if (end - q < 3 || (q[0] != '.' && q[0] != ',') || q[1] != ' ') return 0;
    const Kind *k = &kinds[r->kind];
    memset(r->has, 0, sizeof(int) * (size_t)k->nfields);
    r->graph = -1;
    r->extra_len = 0;
    if (!read_fields(k, q + 2, end, r, hints[r->kind])) return 0;
    if (r->extra_len) r->extra[r->extra_len++] = '}';
    return 1;
}

/* the row into its kind's table: line, ts, rank, iter, the fields, cuda_graph, extra */
static int put_row(Table *t, const Kind *k, int64_t line, const Row *r, int64_t done, int64_t left) {
    /* full: room for the rows the rest of the chunk (`left` bytes, `done` read) holds at the
       rate so far, and a tenth more (shrink() cuts what is left over at export) */
    if (t->n == t->cap && table_reserve(t, (int64_t)(1.1 * (double)t->n * left / done) + 256))
        return -1;
    Col *c = t->cols;
    put_fixed(&c[0], &line, 8);
    put_fixed(&c[1], &r->ts, 8);
    if (put_str(&c[2], r->rank, r->rank_len)) return -1;
    if (r->iter >= 0) put_fixed(&c[3], &r->iter, 8);
    else put_null(&c[3]);
    for (int i = 0; i < k->nfields; i++) {
        Col *f = &c[4 + i];
        if (!r->has[i]) { put_null(f); continue; }
        int32_t i32 = (int32_t)r->ival[i];
        float f32 = (float)r->fval[i];
        if (k->ftype[i] == 'i') put_fixed(f, &i32, 4);
        else if (k->ftype[i] == 'l') put_fixed(f, &r->ival[i], 8);
        else put_fixed(f, &f32, 4);
    }
    uint8_t g = r->graph == 1;
    if (r->graph >= 0) put_fixed(&c[4 + k->nfields], &g, 1);
    else put_null(&c[4 + k->nfields]);
    Col *x = &c[5 + k->nfields];
    if (r->extra_len) {
        if (put_str(x, r->extra, r->extra_len)) return -1;
    } else {
        put_null(x);
    }
    t->n++;
    return 0;
}

static int kind_table(Table *t, const Kind *k) {
    char types[MAX_COLS + 8];
    char *names[MAX_COLS + 8];
    static char *fixed[] = {"line", "ts", "rank", "iter"};
    memcpy(types, "ltsl", 4);
    for (int i = 0; i < 4; i++) names[i] = fixed[i];
    for (int i = 0; i < k->nfields; i++) {
        types[4 + i] = k->ftype[i];
        names[4 + i] = k->fname[i];
    }
    types[4 + k->nfields] = 'b';
    names[4 + k->nfields] = "cuda_graph";
    types[5 + k->nfields] = 's';
    names[5 + k->nfields] = "extra";
    return table_init(t, k->nfields + 6, types, names);
}

/* ---- the access and warning lines (configure_bulk) ------------------------------------ */
/* A line with SGLang's plain prefix, every byte printable ASCII, whose message has the shape
 * of the rule `uvicorn_access` or `uvicorn_warning` (native.py pins both patterns to the
 * readers below), becomes a row of the `bulk` table (line, kind, ts, rank, msg, flag, dt): the
 * row parsers/sglang/bulk.py gives such a line, and `dt`, its time in microseconds (what
 * polars' to_datetime makes of `ts`: the `lines` table's). Whether an earlier rule of the
 * table, or the secrets step, would take the line is not decided here: their patterns are
 * Python's. What is known is what text each needs (parsers/regex_literals.py reads it from
 * their own patterns): a line holding none of an earlier rule's literals has no earlier rule
 * (flag 0); one that does gets flag bit 1, one holding a literal of the secrets sieve bit 2,
 * and native.py decides those lines with the patterns themselves. A line holding a literal of
 * a metrics head (the polars path reads it as a metrics line) or of a PEM key's BEGIN (that
 * path reads the whole chunk) is left in `other`. */
#define MAX_LITS 512
typedef struct {
    char *text; /* lower case when icase */
    int len, icase, anchored;
    int scope; /* 0: the message, 1: the whole line */
} Lit;

typedef struct {
    int nclauses;
    uint64_t *masks; /* nclauses * lit_words: the literals of each clause, one must occur */
    int *ids, *cut;  /* the same as lists: clause k's are ids[cut[k]] .. ids[cut[k + 1] - 1] */
} Conj;

/* the literals a line holds: a bit each, and where the first ends and the last starts */
typedef struct {
    uint64_t bits[MAX_LITS / 64];
    int32_t first_end[MAX_LITS], last_start[MAX_LITS];
} Found;

typedef struct {
    int nalts;
    Conj *alts; /* one alternative: all of its clauses hold */
    /* the alternatives by the literals of their first clause (one of them must be found):
       literal id's are alt_ids[start[id]] .. alt_ids[start[id + 1] - 1]; keys: those literals */
    int *start, *alt_ids;
    uint64_t keys[MAX_LITS / 64];
} Dnf;

enum { G_ACCESS = 0, G_WARNING = 1, G_SECRET = 2, G_HEAD = 3, NGROUPS = 4 };
static Lit lits[MAX_LITS];
static int nlits = 0, lit_words = 1;
/* the literals by their first byte (lower case): anchored ones of the message and of the line,
   one-byte ones; the others by their first two bytes (key2: which pairs begin one) */
static int16_t head_msg[256], head_line[256], head1[256], head2[65536], lnext[MAX_LITS];
static uint64_t key2[65536 / 64];
static Dnf groups[NGROUPS];
static char *bulk_kind[2];
static size_t bulk_kind_len[2];
static Py_ssize_t bulk_max_line = 0;
static int bulk_on = 0;

static inline unsigned char low(unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static inline int lit_at(const Lit *l, const char *p, const char *end) {
    if (end - p < l->len) return 0;
    if (!l->icase) return memcmp(p, l->text, (size_t)l->len) == 0;
    for (int i = 0; i < l->len; i++)
        if (low((unsigned char)p[i]) != (unsigned char)l->text[i]) return 0;
    return 1;
}

static inline void mark_chain(int id, const char *p, const char *line, const char *msg,
                              const char *end, Found *f) {
    for (; id >= 0; id = lnext[id]) {
        const Lit *l = &lits[id];
        if ((l->scope || p >= msg) && lit_at(l, p, end)) {
            uint64_t bit = 1ull << (id % 64);
            if (!(f->bits[id / 64] & bit)) f->first_end[id] = (int32_t)(p - line) + l->len;
            f->bits[id / 64] |= bit;
            f->last_start[id] = (int32_t)(p - line);
        }
    }
}

/* the literals of [line, end) into found (a bit per literal; a message's from msg on) */
static void find_lits(const char *line, const char *msg, const char *end, Found *found) {
    memset(found->bits, 0, sizeof(uint64_t) * (size_t)lit_words);
    if (msg < end) mark_chain(head_msg[low((unsigned char)*msg)], msg, line, msg, end, found);
    if (line < end) mark_chain(head_line[low((unsigned char)*line)], line, line, msg, end, found);
    unsigned a = line < end ? low((unsigned char)*line) : 0;
    for (const char *p = line; p < end; p++) {
        unsigned b = p + 1 < end ? low((unsigned char)p[1]) : 0, k = a << 8 | b;
        if (head1[a] >= 0) mark_chain(head1[a], p, line, msg, end, found);
        if (key2[k / 64] >> (k % 64) & 1) mark_chain(head2[k], p, line, msg, end, found);
        a = b;
    }
}

/* whether a line may match an alternative: each clause of it holds, and in order (the
   clauses of a pattern's parts, left to right: one ends before the next begins) */
static int alt_hit(const Conj *c, const Found *f) {
    int32_t end_before = -1; /* where the previous clause's first literal ends */
    for (int k = 0; k < c->nclauses; k++) {
        int32_t last = -1, first = INT32_MAX;
        for (int i = c->cut[k]; i < c->cut[k + 1]; i++) {
            int id = c->ids[i];
            if (!(f->bits[id / 64] >> (id % 64) & 1)) continue;
            if (f->last_start[id] > last) last = f->last_start[id];
            if (f->first_end[id] < first) first = f->first_end[id];
        }
        if (last < 0 || last < end_before) return 0;
        end_before = first;
    }
    return 1;
}

/* whether a line may match some alternative of d (those a literal found leads to) */
static int dnf_hit(const Dnf *d, const Found *f) {
    for (int w = 0; w < lit_words; w++) {
        for (uint64_t bits = f->bits[w] & d->keys[w]; bits; bits &= bits - 1) {
            int id = w * 64 + __builtin_ctzll(bits);
            for (int i = d->start[id]; i < d->start[id + 1]; i++)
                if (alt_hit(&d->alts[d->alt_ids[i]], f)) return 1;
        }
    }
    return 0;
}

/* the message of the rule `uvicorn_access`: ^INFO: +\S+ - \"[A-Z]+ \S+ HTTP/[\d.]+\" \d{3}
   (on printable ASCII, where \S is not a space and \d a digit: each `+` takes the longest
   run, the only one the next literal can follow) */
static int access_shape(const char *p, const char *end) {
    const char *q;
    if (end - p < 6 || memcmp(p, "INFO: ", 6) != 0) return 0;
    for (p += 6; p < end && *p == ' '; p++) {}
    for (q = p; p < end && *p != ' '; p++) {}
    if (p == q || end - p < 4 || memcmp(p, " - \"", 4) != 0) return 0;
    for (p += 4, q = p; p < end && *p >= 'A' && *p <= 'Z'; p++) {}
    if (p == q || p >= end || *p != ' ') return 0;
    for (q = ++p; p < end && *p != ' '; p++) {}
    if (p == q || end - p < 6 || memcmp(p, " HTTP/", 6) != 0) return 0;
    for (p += 6, q = p; p < end && ((*p >= '0' && *p <= '9') || *p == '.'); p++) {}
    if (p == q || end - p < 5 || p[0] != '"' || p[1] != ' ') return 0;
    for (int i = 2; i < 5; i++)
        if (p[i] < '0' || p[i] > '9') return 0;
    return 1;
}

/* the message of the rule `uvicorn_warning`: ^WARNING: + */
static int warning_shape(const char *p, const char *end) {
    return end - p >= 9 && memcmp(p, "WARNING: ", 9) == 0;
}

/* one line [p, end) into the bulk table (1), or not a bulk line (0); -1 out of memory */
static int read_bulk(const char *p, const char *end, int64_t line, Table *t, DateCache *dc,
                     Found *found) {
    int64_t ts;
    const char *rank;
    size_t rank_len;
    if (end - p < 30 || end - p > bulk_max_line) return 0;
    const char *m = read_prefix(p, end, &ts, &rank, &rank_len, dc);
    if (!m) return 0;
    int kind = access_shape(m, end) ? G_ACCESS : warning_shape(m, end) ? G_WARNING : -1;
    if (kind < 0) return 0;
    for (const char *c = p; c < end; c++)
        if (*c < 0x20 || *c > 0x7e) return 0;
    find_lits(p, m, end, found);
    if (dnf_hit(&groups[G_HEAD], found)) return 0;
    int32_t flag = dnf_hit(&groups[kind], found) | dnf_hit(&groups[G_SECRET], found) << 1;
    Col *c = t->cols;
    if (col_put(&c[0], &line, 0) || col_put(&c[1], bulk_kind[kind], bulk_kind_len[kind]) ||
        col_put(&c[2], p + 1, 19) || col_put(&c[3], rank, rank_len) ||
        col_put(&c[4], m, (size_t)(end - m)) || col_put(&c[5], &flag, 0) ||
        col_put(&c[6], &ts, 0))
        return -1;
    t->n++;
    return 1;
}

/* ---- scan(data, first_line) ----------------------------------------------------------- */
/* valid UTF-8 (as Python's strict decoder takes it) without NUL: 1, else 0 */
static int plain_text(const char *s, Py_ssize_t n) {
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
#ifdef __SSE2__
        /* 32 ASCII bytes, none of them NUL, at once (the high bit: movemask; NUL: cmpeq) */
        const __m128i zero = _mm_setzero_si128();
        while (end - p >= 32) {
            __m128i a = _mm_loadu_si128((const __m128i *)p);
            __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
            __m128i z = _mm_or_si128(_mm_cmpeq_epi8(a, zero), _mm_cmpeq_epi8(b, zero));
            if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(a, b), z))) break;
            p += 32;
        }
#endif
        uint64_t w; /* eight ASCII bytes, none of them NUL, at once */
        while (end - p >= 8) {
            memcpy(&w, p, 8);
            if ((w | ((w - 0x0101010101010101ull) & ~w)) & 0x8080808080808080ull) break;
            p += 8;
        }
        if (p == end) break;
        unsigned char c = *p;
        if (c < 0x80) {
            if (c == 0) return 0;
            p++;
            continue;
        }
        int len;
        unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
        if (c >= 0xc2 && c <= 0xdf) len = 2;
        else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            if (c == 0xe0) lo = 0xa0;      /* no overlong form */
            else if (c == 0xed) hi = 0x9f; /* no surrogate */
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            if (c == 0xf0) lo = 0x90;
            else if (c == 0xf4) hi = 0x8f; /* at most U+10FFFF */
        } else return 0;
        if (end - p < len || p[1] < lo || p[1] > hi) return 0;
        for (int i = 2; i < len; i++)
            if (p[i] < 0x80 || p[i] > 0xbf) return 0;
        p += len;
    }
    return 1;
}

/* the lines of [p, p+n) into the tables (out: decode, prefill, bulk); -1 out of memory */
static int scan_lines(const char *p, Py_ssize_t n, int64_t first, Table *other, Table *out) {
    const char *start = p, *end = p + n;
    if (n && end[-1] == '\n') end--; /* one trailing LF ends the last line */
    int hints[2][MAX_KEYS];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < MAX_KEYS; j++) hints[i][j] = -1;
    Row r;
    DateCache dc = {{0}, 0, 0};
    Found *found = bulk_on ? malloc(sizeof(Found)) : NULL;
    if (bulk_on && !found) return -1;
    int64_t line = first;
    for (;;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        if (read_metrics(p, e, &r, hints, &dc)) {
            if (put_row(&out[r.kind], &kinds[r.kind], line, &r, e + 1 - start, end - e)) {
                free(found);
                return -1;
            }
        } else {
            int b = bulk_on ? read_bulk(p, e, line, &out[2], &dc, found) : 0;
            if (b < 0) { free(found); return -1; }
            if (!b && (col_put(&other->cols[0], &line, 0) ||
                       col_put(&other->cols[1], p, (size_t)(e - p))))
                return -1;
            other->n += !b;
        }
        line++;
        if (!nl) break;
        p = nl + 1;
    }
    free(found);
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    long long first;
    if (!PyArg_ParseTuple(args, "y*L", &buf, &first)) return NULL;
    if (nkinds != 2) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_RuntimeError, "_linescan: configure() was not called");
        return NULL;
    }
    const char *p = buf.buf;
    Py_ssize_t n = buf.len;
    Table other = {0}, out[3] = {{0}, {0}, {0}};
    static char *other_names[] = {"line", "text"};
    static char *bulk_names[] = {"line", "kind", "ts", "rank", "msg", "flag", "dt"};
    int ok = 0, oom = 0;
    Py_BEGIN_ALLOW_THREADS
    if (n > 0 && n < INT32_MAX && plain_text(p, n)) {
        ok = 1;
        oom = table_init(&other, 2, "ls", other_names) || kind_table(&out[0], &kinds[0]) ||
              kind_table(&out[1], &kinds[1]) || table_init(&out[2], 7, "lssssit", bulk_names) ||
              scan_lines(p, n, first, &other, out);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyObject *res = NULL;
    if (oom) {
        PyErr_NoMemory();
    } else if (!ok) {
        res = Py_NewRef(Py_None);
    } else {
        PyObject *a = export_table(&other);
        PyObject *b = a ? export_table(&out[0]) : NULL;
        PyObject *c = b ? export_table(&out[1]) : NULL;
        PyObject *d = c ? export_table(&out[2]) : NULL;
        if (d) res = Py_BuildValue("(NNNN)", a, b, c, d);
        else { Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(c); }
    }
    table_free(&other);
    for (int i = 0; i < 3; i++) table_free(&out[i]);
    return res;
}

/* ---- configure(kinds, graph_keys, extra_keys, tags) ----------------------------------- */
static char *dup_str(PyObject *o, size_t *len) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s) return NULL;
    char *d = malloc((size_t)n + 1);
    if (!d) return (char *)PyErr_NoMemory();
    memcpy(d, s, (size_t)n + 1);
    if (len) *len = (size_t)n;
    return d;
}

static int add_key(Kind *k, PyObject *text, int role, int col) {
    if (k->nkeys >= MAX_KEYS) {
        PyErr_SetString(PyExc_ValueError, "_linescan: too many keys");
        return -1;
    }
    Key *key = &k->keys[k->nkeys];
    key->text = dup_str(text, &key->len);
    if (!key->text) return -1;
    if (!key->len || memchr(key->text, ':', key->len)) { /* (read_fields' first `:` ends it) */
        PyErr_SetString(PyExc_ValueError, "_linescan: a key is empty or holds a ':'");
        return -1;
    }
    key->role = role;
    key->col = col;
    k->nkeys++;
    return 0;
}

/* kinds: [(head, [(column, key, type), ...]), ...] (two: decode, prefill) */
static int configure_kind(Kind *k, PyObject *spec, PyObject *graph, PyObject *extra) {
    PyObject *head, *fields;
    if (!PyArg_ParseTuple(spec, "UO!", &head, &PyList_Type, &fields)) return -1;
    k->head = dup_str(head, &k->head_len);
    if (!k->head) return -1;
    k->nfields = (int)PyList_GET_SIZE(fields);
    if (k->nfields > MAX_COLS) {
        PyErr_SetString(PyExc_ValueError, "_linescan: too many fields");
        return -1;
    }
    for (int i = 0; i < k->nfields; i++) {
        PyObject *name, *key;
        const char *type;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(fields, i), "UUs", &name, &key, &type)) return -1;
        if (strlen(type) != 1 || !strchr("ilf", type[0])) {
            PyErr_SetString(PyExc_ValueError, "_linescan: a field's type is one of i, l, f");
            return -1;
        }
        k->ftype[i] = type[0];
        k->fname[i] = dup_str(name, NULL);
        if (!k->fname[i] || add_key(k, key, K_COL, i)) return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(graph); i++)
        if (add_key(k, PyList_GET_ITEM(graph, i), K_GRAPH, -1)) return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(extra); i++)
        if (add_key(k, PyList_GET_ITEM(extra, i), K_EXTRA, -1)) return -1;
    return 0;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *spec, *graph, *extra, *tag_list;
    if (!PyArg_ParseTuple(args, "O!O!O!O!", &PyList_Type, &spec, &PyList_Type, &graph,
                          &PyList_Type, &extra, &PyList_Type, &tag_list))
        return NULL;
    if (nkinds || PyList_GET_SIZE(spec) != 2 || PyList_GET_SIZE(tag_list) > 16) {
        PyErr_SetString(PyExc_ValueError, "_linescan: configured once, with two kinds");
        return NULL;
    }
    for (int i = 0; i < 2; i++)
        if (configure_kind(&kinds[i], PyList_GET_ITEM(spec, i), graph, extra)) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tag_list); i++) {
        tags[i] = dup_str(PyList_GET_ITEM(tag_list, i), &tag_len[i]);
        if (!tags[i]) return NULL;
        ntags++;
    }
    nkinds = 2;
    Py_RETURN_NONE;
}

/* ---- configure_bulk(max_line, literals, groups, kinds) -------------------------------- */
/* literals: [(bytes, icase, anchored, scope)]; groups: four (before access, before warning,
   the secrets sieve, a metrics head), each [[[literal id, ...] (a clause), ...] (an
   alternative), ...]; kinds: the two rules' names */
/* d's alternatives by the literals of their first clause (an alternative without a clause:
   none, and read_dnf refuses it: native.py gives none) */
static int index_dnf(Dnf *d) {
    d->start = calloc((size_t)nlits + 2, sizeof(int));
    int total = 0;
    for (int a = 0; a < d->nalts; a++) total += d->alts[a].cut[1];
    d->alt_ids = calloc((size_t)total + 1, sizeof(int));
    int *fill = calloc((size_t)nlits + 1, sizeof(int));
    if (!d->start || !d->alt_ids || !fill) { free(fill); return -1; }
    for (int a = 0; a < d->nalts; a++)
        for (int i = 0; i < d->alts[a].cut[1]; i++) d->start[d->alts[a].ids[i] + 1]++;
    for (int id = 0; id < nlits; id++) d->start[id + 1] += d->start[id];
    for (int a = 0; a < d->nalts; a++)
        for (int i = 0; i < d->alts[a].cut[1]; i++) {
            int id = d->alts[a].ids[i];
            d->alt_ids[d->start[id] + fill[id]++] = a;
            d->keys[id / 64] |= 1ull << (id % 64);
        }
    free(fill);
    return 0;
}

static int read_dnf(PyObject *spec, Dnf *d) {
    if (!PyList_Check(spec)) return -1;
    d->nalts = (int)PyList_GET_SIZE(spec);
    d->alts = calloc((size_t)d->nalts + 1, sizeof(Conj));
    if (!d->alts) return -1;
    for (int a = 0; a < d->nalts; a++) {
        PyObject *alt = PyList_GET_ITEM(spec, a);
        if (!PyList_Check(alt)) return -1;
        Conj *c = &d->alts[a];
        c->nclauses = (int)PyList_GET_SIZE(alt);
        if (c->nclauses < 1) return -1; /* (it would match any line: native.py gives none) */
        c->masks = calloc((size_t)c->nclauses * (size_t)lit_words + 1, sizeof(uint64_t));
        c->cut = calloc((size_t)c->nclauses + 1, sizeof(int));
        if (!c->masks || !c->cut) return -1;
        for (int k = 0; k < c->nclauses; k++) {
            PyObject *clause = PyList_GET_ITEM(alt, k);
            if (!PyList_Check(clause)) return -1;
            c->cut[k + 1] = c->cut[k] + (int)PyList_GET_SIZE(clause);
        }
        c->ids = calloc((size_t)c->cut[c->nclauses] + 1, sizeof(int));
        if (!c->ids) return -1;
        for (int k = 0; k < c->nclauses; k++) {
            PyObject *clause = PyList_GET_ITEM(alt, k);
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(clause); i++) {
                long id = PyLong_AsLong(PyList_GET_ITEM(clause, i));
                if (id < 0 || id >= nlits) return -1;
                c->masks[(size_t)k * (size_t)lit_words + (size_t)id / 64] |= 1ull << (id % 64);
                c->ids[c->cut[k] + i] = (int)id;
            }
        }
    }
    return index_dnf(d);
}

static int add_lit(PyObject *spec) {
    const char *text;
    Py_ssize_t len;
    int icase, anchored, scope;
    if (!PyArg_ParseTuple(spec, "y#ppi", &text, &len, &icase, &anchored, &scope)) return -1;
    if (len < 1 || len > 255 || nlits >= MAX_LITS) return -1;
    int id = nlits;
    Lit *l = &lits[id];
    l->text = malloc((size_t)len);
    if (!l->text) return -1;
    for (Py_ssize_t i = 0; i < len; i++)
        l->text[i] = icase ? (char)low((unsigned char)text[i]) : text[i];
    *l = (Lit){l->text, (int)len, icase, anchored, scope != 0};
    if (anchored) {
        int16_t *head = scope ? head_line : head_msg;
        lnext[id] = head[low((unsigned char)l->text[0])];
        head[low((unsigned char)l->text[0])] = (int16_t)id;
    } else if (len == 1) {
        lnext[id] = head1[low((unsigned char)l->text[0])];
        head1[low((unsigned char)l->text[0])] = (int16_t)id;
    } else {
        unsigned k = low((unsigned char)l->text[0]) << 8 | low((unsigned char)l->text[1]);
        lnext[id] = head2[k];
        head2[k] = (int16_t)id;
        key2[k / 64] |= 1ull << (k % 64);
    }
    nlits++;
    return 0;
}

static PyObject *configure_bulk(PyObject *self, PyObject *args) {
    Py_ssize_t max_line;
    PyObject *lit_list, *group_list, *kind_list;
    if (!PyArg_ParseTuple(args, "nO!O!O!", &max_line, &PyList_Type, &lit_list, &PyList_Type,
                          &group_list, &PyList_Type, &kind_list))
        return NULL;
    if (bulk_on || PyList_GET_SIZE(lit_list) > MAX_LITS || PyList_GET_SIZE(group_list) != NGROUPS ||
        PyList_GET_SIZE(kind_list) != 2) {
        PyErr_SetString(PyExc_ValueError, "_linescan: configure_bulk once, four groups, two kinds");
        return NULL;
    }
    memset(head_msg, 0xff, sizeof head_msg);
    memset(head_line, 0xff, sizeof head_line);
    memset(head1, 0xff, sizeof head1);
    memset(head2, 0xff, sizeof head2);
    lit_words = PyList_GET_SIZE(lit_list) ? (int)(PyList_GET_SIZE(lit_list) + 63) / 64 : 1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lit_list); i++)
        if (add_lit(PyList_GET_ITEM(lit_list, i))) goto bad;
    for (int g = 0; g < NGROUPS; g++)
        if (read_dnf(PyList_GET_ITEM(group_list, g), &groups[g])) goto bad;
    for (int k = 0; k < 2; k++) {
        bulk_kind[k] = dup_str(PyList_GET_ITEM(kind_list, k), &bulk_kind_len[k]);
        if (!bulk_kind[k]) return NULL;
    }
    bulk_max_line = max_line;
    bulk_on = 1;
    Py_RETURN_NONE;
bad:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "_linescan: a bad literal or group");
    return NULL;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(kinds, graph_keys, extra_keys, tags): the layout tables (once)."},
    {"configure_bulk", configure_bulk, METH_VARARGS,
     "configure_bulk(max_line, literals, groups, kinds): the access and warning lines (once)."},
    {"scan", scan, METH_VARARGS,
     "scan(data, first_line) -> None (not UTF-8, or a NUL) or (other, decode, prefill, bulk), "
     "each a (schema, array) pair of Arrow C data capsules."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_linescan",
                                    "The compiled line reader of the SGLang parser.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__linescan(void) { return PyModule_Create(&module); }
