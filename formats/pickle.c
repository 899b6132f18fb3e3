/* pickle.c: the restricted unpickler of pickle.h. A stack machine over the protocol-2 opcodes
 * that torch.save emits for a checkpoint dict; each opcode checks its operands' kinds and every
 * length against what is left of the input before it reads. Objects live in one arena freed at
 * once, so memo references (and cycles made through them) need no ownership rules. */
#include "formats/pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vil/common.h"

#define BLOCK 4096 /* objects per arena block */
#define MAX_ITEMS (1 << 23) /* container slots in all, however they were pushed */
#define MAX_KEY 64          /* a storage key: a decimal number in torch's files */

struct VilPickle {
    VilPkObj **blocks;
    int n_blocks;
    long n_objects; /* in all blocks */
    VilPkObj *root;
};

typedef struct {
    const unsigned char *base, *p, *end;
    VilPickle *pk;
    VilPkObj **stack;
    size_t sp, scap;
    size_t marks[VIL_PK_MAX_MARKS];
    int nmarks;
    VilPkObj **memo;
    size_t memo_cap;
    long items;
    size_t at; /* offset of the opcode being run, for messages */
} Rd;

static const struct {
    const char *name;
    size_t size;
} DTYPES[] = {[VIL_PK_F32] = {"F32", 4}, [VIL_PK_F16] = {"F16", 2}, [VIL_PK_BF16] = {"BF16", 2},
              [VIL_PK_F64] = {"F64", 8}, [VIL_PK_I64] = {"I64", 8}, [VIL_PK_I32] = {"I32", 4},
              [VIL_PK_BOOLT] = {"BOOL", 1}};

size_t vil_pk_dtype_size(VilPkDtype d) { return DTYPES[d].size; }
const char *vil_pk_dtype_name(VilPkDtype d) { return DTYPES[d].name; }

/* the globals a checkpoint may name: anything else is refused, whatever it would do */
static const struct {
    const char *module, *name;
    VilPkClass cls;
    VilPkDtype dtype;
} ALLOWED[] = {
    {"torch._utils", "_rebuild_tensor_v2", VIL_PK_CLS_REBUILD_TENSOR, 0},
    {"collections", "OrderedDict", VIL_PK_CLS_ORDERED_DICT, 0},
    {"argparse", "Namespace", VIL_PK_CLS_NAMESPACE, 0},
    {"torch", "FloatStorage", VIL_PK_CLS_STORAGE, VIL_PK_F32},
    {"torch", "HalfStorage", VIL_PK_CLS_STORAGE, VIL_PK_F16},
    {"torch", "BFloat16Storage", VIL_PK_CLS_STORAGE, VIL_PK_BF16},
    {"torch", "DoubleStorage", VIL_PK_CLS_STORAGE, VIL_PK_F64},
    {"torch", "LongStorage", VIL_PK_CLS_STORAGE, VIL_PK_I64},
    {"torch", "IntStorage", VIL_PK_CLS_STORAGE, VIL_PK_I32},
    {"torch", "BoolStorage", VIL_PK_CLS_STORAGE, VIL_PK_BOOLT},
};

/* every opcode of pickle protocols 0-5, so that a refusal can name the one it met */
static const char *op_name(unsigned op) {
    static const struct {
        unsigned char op;
        const char *name;
    } T[] = {{'(', "MARK"},        {'.', "STOP"},          {'0', "POP"},
             {'1', "POP_MARK"},    {'2', "DUP"},           {'F', "FLOAT"},
             {'I', "INT"},         {'J', "BININT"},        {'K', "BININT1"},
             {'L', "LONG"},        {'M', "BININT2"},       {'N', "NONE"},
             {'P', "PERSID"},      {'Q', "BINPERSID"},     {'R', "REDUCE"},
             {'S', "STRING"},      {'T', "BINSTRING"},     {'U', "SHORT_BINSTRING"},
             {'V', "UNICODE"},     {'X', "BINUNICODE"},    {'a', "APPEND"},
             {'b', "BUILD"},       {'c', "GLOBAL"},        {'d', "DICT"},
             {'}', "EMPTY_DICT"},  {'e', "APPENDS"},       {'g', "GET"},
             {'h', "BINGET"},      {'i', "INST"},          {'j', "LONG_BINGET"},
             {'l', "LIST"},        {']', "EMPTY_LIST"},    {'o', "OBJ"},
             {'p', "PUT"},         {'q', "BINPUT"},        {'r', "LONG_BINPUT"},
             {'s', "SETITEM"},     {'t', "TUPLE"},         {')', "EMPTY_TUPLE"},
             {'u', "SETITEMS"},    {'G', "BINFLOAT"},      {0x80, "PROTO"},
             {0x81, "NEWOBJ"},     {0x82, "EXT1"},         {0x83, "EXT2"},
             {0x84, "EXT4"},       {0x85, "TUPLE1"},       {0x86, "TUPLE2"},
             {0x87, "TUPLE3"},     {0x88, "NEWTRUE"},      {0x89, "NEWFALSE"},
             {0x8a, "LONG1"},      {0x8b, "LONG4"},        {'B', "BINBYTES"},
             {'C', "SHORT_BINBYTES"}, {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"},
             {0x8e, "BINBYTES8"},  {0x8f, "EMPTY_SET"},    {0x90, "ADDITEMS"},
             {0x91, "FROZENSET"},  {0x92, "NEWOBJ_EX"},    {0x93, "STACK_GLOBAL"},
             {0x94, "MEMOIZE"},    {0x95, "FRAME"},        {0x96, "BYTEARRAY8"},
             {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (T[i].op == op) return T[i].name;
    return "not a pickle opcode";
}

static int fail(Rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Rd *r, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    vil_error("pickle byte %zu: %s", r->at, msg);
    return -1;
}

const char *vil_pk_kind_name(const VilPkObj *o) {
    if (!o) return "nothing";
    switch (o->kind) {
    case VIL_PK_NONE: return "None";
    case VIL_PK_BOOL: return "a bool";
    case VIL_PK_INT: return "an int";
    case VIL_PK_FLOAT: return "a float";
    case VIL_PK_STR: return "a string";
    case VIL_PK_TUPLE: return "a tuple";
    case VIL_PK_LIST: return "a list";
    case VIL_PK_DICT:
        return o->cls == VIL_PK_CLS_NAMESPACE      ? "an argparse.Namespace"
               : o->cls == VIL_PK_CLS_ORDERED_DICT ? "an OrderedDict"
                                                   : "a dict";
    case VIL_PK_STORAGE: return "a storage";
    case VIL_PK_TENSOR: return "a tensor";
    case VIL_PK_CLASS: return "a class or function";
    }
    return "?";
}

static VilPkObj *new_obj(Rd *r, VilPkKind kind) {
    VilPickle *pk = r->pk;
    if (pk->n_objects >= VIL_PK_MAX_OBJECTS) {
        fail(r, "more than %d objects", VIL_PK_MAX_OBJECTS);
        return NULL;
    }
    if (pk->n_objects % BLOCK == 0) {
        VilPkObj **blocks = vil_try_realloc(pk->blocks, (size_t)(pk->n_blocks + 1) * sizeof *pk->blocks);
        if (blocks) pk->blocks = blocks;
        VilPkObj *b = blocks ? vil_try_calloc(BLOCK, sizeof(VilPkObj)) : NULL;
        if (!b) {
            fail(r, "no memory for %ld objects", pk->n_objects + 1);
            return NULL;
        }
        pk->blocks[pk->n_blocks++] = b;
    }
    VilPkObj *o = &pk->blocks[pk->n_blocks - 1][pk->n_objects++ % BLOCK];
    o->kind = kind;
    return o;
}

static int push(Rd *r, VilPkObj *o) {
    if (!o) return -1;
    if (r->sp == VIL_PK_MAX_STACK) return fail(r, "more than %d objects on the stack", VIL_PK_MAX_STACK);
    if (r->sp == r->scap) {
        size_t cap = r->scap ? 2 * r->scap : 256;
        VilPkObj **stack = vil_try_realloc(r->stack, cap * sizeof *r->stack);
        if (!stack) return fail(r, "no memory for a stack of %zu objects", cap);
        r->stack = stack, r->scap = cap;
    }
    r->stack[r->sp++] = o;
    return 0;
}

static VilPkObj *pop(Rd *r) {
    if (r->sp == 0 || (r->nmarks && r->sp == r->marks[r->nmarks - 1])) {
        fail(r, "%s needs an object but the stack is empty", op_name(r->base[r->at]));
        return NULL;
    }
    return r->stack[--r->sp];
}

static VilPkObj *top(Rd *r) {
    if (r->sp == 0 || (r->nmarks && r->sp == r->marks[r->nmarks - 1])) {
        fail(r, "%s needs an object but the stack is empty", op_name(r->base[r->at]));
        return NULL;
    }
    return r->stack[r->sp - 1];
}

/* the position of the last MARK, which is removed; -1 without one */
static long pop_mark(Rd *r) {
    if (r->nmarks == 0) return fail(r, "%s without a MARK", op_name(r->base[r->at]));
    return (long)r->marks[--r->nmarks];
}

static int add_item(Rd *r, VilPkObj *c, VilPkObj *o) {
    if (++r->items > MAX_ITEMS) return fail(r, "more than %d container items", MAX_ITEMS);
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 4;
        VilPkObj **items = vil_try_realloc(c->items, (size_t)cap * sizeof *c->items);
        if (!items) return fail(r, "no memory for a container of %d items", cap);
        c->items = items, c->cap = cap;
    }
    c->items[c->n++] = o;
    return 0;
}

static int need(Rd *r, size_t n) {
    if ((size_t)(r->end - r->p) < n)
        return fail(r, "%s needs %zu bytes but the pickle ends (truncated?)", op_name(r->base[r->at]), n);
    return 0;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int push_int(Rd *r, int64_t v) {
    VilPkObj *o = new_obj(r, VIL_PK_INT);
    if (o) o->i = v;
    return push(r, o);
}

static int memo_put(Rd *r, uint64_t idx) {
    if (idx >= VIL_PK_MAX_MEMO) return fail(r, "memo index %llu is over the limit %d", (unsigned long long)idx, VIL_PK_MAX_MEMO);
    VilPkObj *o = top(r);
    if (!o) return -1;
    if (idx >= r->memo_cap) {
        size_t cap = r->memo_cap ? r->memo_cap : 256;
        while (cap <= idx) cap *= 2;
        VilPkObj **memo = vil_try_realloc(r->memo, cap * sizeof *r->memo);
        if (!memo) return fail(r, "no memory for a memo of %zu entries", cap);
        r->memo = memo;
        memset(r->memo + r->memo_cap, 0, (cap - r->memo_cap) * sizeof *r->memo);
        r->memo_cap = cap;
    }
    r->memo[idx] = o;
    return 0;
}

static int memo_get(Rd *r, uint64_t idx) {
    if (idx >= r->memo_cap || !r->memo[idx]) return fail(r, "memo index %llu was never stored", (unsigned long long)idx);
    return push(r, r->memo[idx]);
}

/* a GLOBAL's module or name: printable ASCII up to '\n' */
static int read_line(Rd *r, char *out) {
    size_t k = 0;
    for (;;) {
        if (r->p >= r->end) return fail(r, "GLOBAL ends before its newline (truncated?)");
        unsigned char c = *r->p++;
        if (c == '\n') break;
        if (c < 0x20 || c > 0x7e) return fail(r, "GLOBAL holds byte 0x%02x", c);
        if (k == VIL_PK_MAX_GLOBAL) return fail(r, "GLOBAL name longer than %d bytes", VIL_PK_MAX_GLOBAL);
        out[k++] = (char)c;
    }
    out[k] = 0;
    return 0;
}

static int op_global(Rd *r) {
    char mod[VIL_PK_MAX_GLOBAL + 1], name[VIL_PK_MAX_GLOBAL + 1];
    if (read_line(r, mod) != 0 || read_line(r, name) != 0) return -1;
    for (size_t i = 0; i < sizeof ALLOWED / sizeof ALLOWED[0]; i++)
        if (strcmp(mod, ALLOWED[i].module) == 0 && strcmp(name, ALLOWED[i].name) == 0) {
            VilPkObj *o = new_obj(r, VIL_PK_CLASS);
            if (!o) return -1;
            o->cls = ALLOWED[i].cls;
            o->dtype = ALLOWED[i].dtype;
            return push(r, o);
        }
    return fail(r, "global '%s.%s' is not allowed: a checkpoint may name only torch's tensor "
                   "rebuilder and storage types, OrderedDict and argparse.Namespace (vil never "
                   "imports or calls anything a file names)", mod, name);
}

static int is_int(const VilPkObj *o) { return o && (o->kind == VIL_PK_INT || o->kind == VIL_PK_BOOL); }

/* ('storage', torch.XStorage, key, location, numel) -> a storage */
static int op_persid(Rd *r) {
    VilPkObj *t = pop(r);
    if (!t) return -1;
    if (t->kind != VIL_PK_TUPLE || t->n != 5 || t->items[0]->kind != VIL_PK_STR ||
        strcmp(t->items[0]->s, "storage") != 0)
        return fail(r, "persistent id is %s, not ('storage', type, key, location, numel)", vil_pk_kind_name(t));
    const VilPkObj *ty = t->items[1], *key = t->items[2], *loc = t->items[3], *n = t->items[4];
    if (ty->kind != VIL_PK_CLASS || ty->cls != VIL_PK_CLS_STORAGE)
        return fail(r, "persistent id names %s, not a storage type", vil_pk_kind_name(ty));
    if (key->kind != VIL_PK_STR || key->len == 0 || key->len > MAX_KEY)
        return fail(r, "storage key is %s, not a short string", vil_pk_kind_name(key));
    for (size_t i = 0; i < key->len; i++) {
        char c = key->s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'))
            return fail(r, "storage key '%.*s' holds a character other than [A-Za-z0-9_]", MAX_KEY, key->s);
    }
    if (loc->kind != VIL_PK_STR) return fail(r, "storage location is %s, not a string", vil_pk_kind_name(loc));
    if (!is_int(n) || n->i < 0 || n->i > ((int64_t)1 << 40))
        return fail(r, "storage '%s' has a bad element count", key->s);
    VilPkObj *s = new_obj(r, VIL_PK_STORAGE);
    if (!s) return -1;
    s->dtype = ty->dtype;
    s->s = key->s; /* the arena keeps key alive */
    s->len = key->len;
    s->i = n->i;
    return push(r, s);
}

static int int_tuple(Rd *r, const VilPkObj *t, const char *what, int64_t *out) {
    if (t->kind != VIL_PK_TUPLE) return fail(r, "tensor %s is %s, not a tuple", what, vil_pk_kind_name(t));
    if (t->n > VIL_PK_MAX_DIMS) return fail(r, "tensor %s has %d dimensions (at most %d)", what, t->n, VIL_PK_MAX_DIMS);
    for (int i = 0; i < t->n; i++) {
        if (t->items[i]->kind != VIL_PK_INT || t->items[i]->i < 0)
            return fail(r, "tensor %s[%d] is not a non-negative int", what, i);
        out[i] = t->items[i]->i;
    }
    return 0;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks[, metadata]):
 * the view must lie inside its storage */
static VilPkObj *rebuild_tensor(Rd *r, const VilPkObj *a) {
    if (a->n != 6 && a->n != 7) {
        fail(r, "_rebuild_tensor_v2 takes 6 or 7 arguments, not %d", a->n);
        return NULL;
    }
    const VilPkObj *st = a->items[0], *off = a->items[1], *hooks = a->items[5];
    if (st->kind != VIL_PK_STORAGE) {
        fail(r, "_rebuild_tensor_v2 on %s, not a storage", vil_pk_kind_name(st));
        return NULL;
    }
    if (off->kind != VIL_PK_INT || off->i < 0) {
        fail(r, "tensor offset is not a non-negative int");
        return NULL;
    }
    if (a->items[4]->kind != VIL_PK_BOOL) {
        fail(r, "tensor requires_grad is %s, not a bool", vil_pk_kind_name(a->items[4]));
        return NULL;
    }
    if (hooks->kind != VIL_PK_DICT || hooks->n != 0 || (a->n == 7 && a->items[6]->kind != VIL_PK_DICT)) {
        fail(r, "tensor backward hooks or metadata are not empty dicts");
        return NULL;
    }
    VilPkTensor t = {.storage = st, .offset = off->i, .ndim = a->items[2]->n};
    if (int_tuple(r, a->items[2], "size", t.size) != 0 || int_tuple(r, a->items[3], "stride", t.stride) != 0)
        return NULL;
    if (a->items[3]->n != t.ndim) {
        fail(r, "tensor size has %d dimensions but stride %d", t.ndim, a->items[3]->n);
        return NULL;
    }
    /* numel and the last element's index, refusing overflow (every value is below 2^63) */
    int64_t numel = 1, last = t.offset;
    for (int i = 0; i < t.ndim; i++) {
        if (t.size[i] && numel > INT64_MAX / t.size[i]) numel = -1;
        if (numel >= 0) numel *= t.size[i];
    }
    if (numel < 0) {
        fail(r, "tensor size overflows");
        return NULL;
    }
    for (int i = 0; numel > 0 && i < t.ndim; i++) {
        if (t.stride[i] && t.size[i] - 1 > (INT64_MAX - last) / t.stride[i]) {
            fail(r, "tensor strides overflow");
            return NULL;
        }
        last += (t.size[i] - 1) * t.stride[i];
    }
    if (numel > 0 ? last >= st->i : t.offset > st->i) {
        fail(r, "tensor of %lld elements at offset %lld reaches element %lld of storage '%s', "
                "which has %lld", (long long)numel, (long long)t.offset, (long long)last,
             st->s, (long long)st->i);
        return NULL;
    }
    t.numel = numel;
    VilPkObj *o = new_obj(r, VIL_PK_TENSOR);
    if (!o) return NULL;
    if (!(o->tensor = vil_try_malloc(sizeof t))) return NULL;
    *o->tensor = t;
    o->dtype = st->dtype;
    return o;
}

static int op_reduce(Rd *r) {
    VilPkObj *args = pop(r), *fn = args ? pop(r) : NULL;
    if (!fn) return -1;
    if (fn->kind != VIL_PK_CLASS)
        return fail(r, "REDUCE calls %s: only the allowed globals can be applied", vil_pk_kind_name(fn));
    if (args->kind != VIL_PK_TUPLE) return fail(r, "REDUCE arguments are %s, not a tuple", vil_pk_kind_name(args));
    switch (fn->cls) {
    case VIL_PK_CLS_REBUILD_TENSOR: return push(r, rebuild_tensor(r, args));
    case VIL_PK_CLS_ORDERED_DICT: {
        if (args->n != 0) return fail(r, "OrderedDict called with %d arguments (torch.save passes none)", args->n);
        VilPkObj *d = new_obj(r, VIL_PK_DICT);
        if (d) d->cls = VIL_PK_CLS_ORDERED_DICT;
        return push(r, d);
    }
    default: return fail(r, "REDUCE on a storage type or Namespace: not how torch.save writes them");
    }
}

static int op_newobj(Rd *r) {
    VilPkObj *args = pop(r), *cls = args ? pop(r) : NULL;
    if (!cls) return -1;
    if (cls->kind != VIL_PK_CLASS || cls->cls != VIL_PK_CLS_NAMESPACE || args->kind != VIL_PK_TUPLE || args->n != 0)
        return fail(r, "NEWOBJ is allowed only for argparse.Namespace()");
    VilPkObj *d = new_obj(r, VIL_PK_DICT);
    if (d) d->cls = VIL_PK_CLS_NAMESPACE;
    return push(r, d);
}

/* BUILD sets an object's state: a Namespace's attributes; an OrderedDict's attributes
 * (state_dict()'s _metadata: version numbers vil has no use for) are dropped */
static int op_build(Rd *r) {
    VilPkObj *state = pop(r), *o = state ? top(r) : NULL;
    if (!o) return -1;
    if (o->kind == VIL_PK_DICT && o->cls == VIL_PK_CLS_ORDERED_DICT &&
        (state->kind == VIL_PK_DICT || state->kind == VIL_PK_NONE))
        return 0;
    if (o->kind == VIL_PK_DICT && o->cls == VIL_PK_CLS_NAMESPACE && state->kind == VIL_PK_DICT) {
        for (int i = 0; i < state->n; i++)
            if (add_item(r, o, state->items[i]) != 0) return -1;
        return 0;
    }
    return fail(r, "BUILD of %s with %s: only a Namespace or an OrderedDict takes a state",
                vil_pk_kind_name(o), vil_pk_kind_name(state));
}

/* SETITEMS / APPENDS / TUPLE: the objects above the last mark */
static int op_collect(Rd *r, unsigned op) {
    long k = pop_mark(r);
    if (k < 0) return -1;
    size_t n = r->sp - (size_t)k;
    VilPkObj **items = r->stack + k;
    if (op == 't') {
        if (n > INT32_MAX / 2) return fail(r, "TUPLE of %zu items", n);
        VilPkObj *t = new_obj(r, VIL_PK_TUPLE);
        if (!t) return -1;
        for (size_t i = 0; i < n; i++)
            if (add_item(r, t, items[i]) != 0) return -1;
        r->sp = (size_t)k;
        return push(r, t);
    }
    if (k == 0 || (r->nmarks && r->marks[r->nmarks - 1] == (size_t)k))
        return fail(r, "%s has no container below its MARK", op_name(op));
    VilPkObj *c = r->stack[k - 1];
    if (op == 'u' && (c->kind != VIL_PK_DICT || n % 2))
        return fail(r, "SETITEMS on %s with %zu objects", vil_pk_kind_name(c), n);
    if (op == 'e' && c->kind != VIL_PK_LIST) return fail(r, "APPENDS on %s", vil_pk_kind_name(c));
    for (size_t i = 0; i < n; i++)
        if (add_item(r, c, items[i]) != 0) return -1;
    r->sp = (size_t)k;
    return 0;
}

static int op_str(Rd *r) {
    if (need(r, 4) != 0) return -1;
    uint64_t n = le(r->p, 4);
    r->p += 4;
    if (need(r, (size_t)n) != 0) return -1;
    size_t bad = vil_utf8_invalid_at(r->p, (size_t)n);
    if (bad != n) return fail(r, "BINUNICODE string is not valid UTF-8 (byte %zu)", bad);
    VilPkObj *o = new_obj(r, VIL_PK_STR);
    if (!o) return -1;
    if (!(o->s = vil_try_malloc((size_t)n + 1))) return -1; /* n of the pickle's bytes */
    memcpy(o->s, r->p, (size_t)n);
    o->s[n] = 0;
    o->len = (size_t)n;
    r->p += n;
    return push(r, o);
}

/* one opcode; 1 after STOP */
static int step(Rd *r) {
    r->at = (size_t)(r->p - r->base);
    if (r->p >= r->end) return fail(r, "the pickle ends without STOP (truncated?)");
    unsigned op = *r->p++;
    VilPkObj *o, *k, *v;
    switch (op) {
    case 0x80:
        if (need(r, 1) != 0) return -1;
        if (r->at != 0) return fail(r, "PROTO after the start");
        if (*r->p != 2)
            return fail(r, "pickle protocol %d: vil reads protocol 2, which torch.save writes by "
                           "default (re-save without pickle_protocol)", *r->p);
        r->p++;
        return 0;
    case '.':
        if (r->nmarks) return fail(r, "STOP inside an unfinished container (MARK left open)");
        if (r->sp != 1) return fail(r, "STOP with %zu objects on the stack (one expected)", r->sp);
        r->pk->root = r->stack[0];
        return 1;
    case '}': return push(r, new_obj(r, VIL_PK_DICT));
    case ']': return push(r, new_obj(r, VIL_PK_LIST));
    case ')': return push(r, new_obj(r, VIL_PK_TUPLE));
    case 'N': return push(r, new_obj(r, VIL_PK_NONE));
    case 0x88:
    case 0x89:
        o = new_obj(r, VIL_PK_BOOL);
        if (o) o->i = op == 0x88;
        return push(r, o);
    case '(':
        if (r->nmarks == VIL_PK_MAX_MARKS) return fail(r, "containers nested deeper than %d", VIL_PK_MAX_MARKS);
        r->marks[r->nmarks++] = r->sp;
        return 0;
    case 'u':
    case 'e':
    case 't': return op_collect(r, op);
    case 's':
        v = pop(r);
        k = v ? pop(r) : NULL;
        o = k ? top(r) : NULL;
        if (!o) return -1;
        if (o->kind != VIL_PK_DICT) return fail(r, "SETITEM on %s", vil_pk_kind_name(o));
        return add_item(r, o, k) || add_item(r, o, v) ? -1 : 0;
    case 'a':
        v = pop(r);
        o = v ? top(r) : NULL;
        if (!o) return -1;
        if (o->kind != VIL_PK_LIST) return fail(r, "APPEND on %s", vil_pk_kind_name(o));
        return add_item(r, o, v);
    case 0x85:
    case 0x86:
    case 0x87: {
        int n = (int)(op - 0x84);
        if (r->sp < (size_t)n || (r->nmarks && r->sp - r->marks[r->nmarks - 1] < (size_t)n))
            return fail(r, "%s needs %d objects on the stack", op_name(op), n);
        o = new_obj(r, VIL_PK_TUPLE);
        if (!o) return -1;
        for (int i = 0; i < n; i++)
            if (add_item(r, o, r->stack[r->sp - n + i]) != 0) return -1;
        r->sp -= (size_t)n;
        return push(r, o);
    }
    case 'q':
    case 'r':
    case 'h':
    case 'j': {
        int w = op == 'q' || op == 'h' ? 1 : 4;
        if (need(r, (size_t)w) != 0) return -1;
        uint64_t idx = le(r->p, w);
        r->p += w;
        return op == 'q' || op == 'r' ? memo_put(r, idx) : memo_get(r, idx);
    }
    case 'X': return op_str(r);
    case 'J':
    case 'K':
    case 'M': {
        int w = op == 'J' ? 4 : op == 'K' ? 1 : 2;
        if (need(r, (size_t)w) != 0) return -1;
        uint64_t u = le(r->p, w);
        r->p += w;
        return push_int(r, op == 'J' ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u);
    }
    case 0x8a: {
        if (need(r, 1) != 0) return -1;
        int w = *r->p++;
        if (w > 8) return fail(r, "LONG1 of %d bytes: integers past 64 bits are not taken", w);
        if (need(r, (size_t)w) != 0) return -1;
        uint64_t u = le(r->p, w);
        if (w > 0 && w < 8 && (r->p[w - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * w); /* sign */
        r->p += w;
        return push_int(r, (int64_t)u);
    }
    case 'G': {
        if (need(r, 8) != 0) return -1;
        uint64_t u = 0;
        for (int i = 0; i < 8; i++) u = u << 8 | r->p[i]; /* big-endian */
        r->p += 8;
        o = new_obj(r, VIL_PK_FLOAT);
        if (o) memcpy(&o->f, &u, sizeof u);
        return push(r, o);
    }
    case 'c': return op_global(r);
    case 'R': return op_reduce(r);
    case 0x81: return op_newobj(r);
    case 'b': return op_build(r);
    case 'Q': return op_persid(r);
    default:
        return fail(r, "opcode %s (0x%02x) is not one torch.save writes for a checkpoint", op_name(op), op);
    }
}

VilPickle *vil_pickle_load(const unsigned char *buf, size_t n) {
    Rd r = {.base = buf, .p = buf, .end = buf + n};
    r.pk = vil_calloc(1, sizeof *r.pk);
    r.scap = 256; /* never NULL: TUPLE after a MARK on an empty stack takes stack + 0 */
    r.stack = vil_malloc(r.scap * sizeof *r.stack);
    int rc = 0;
    if (n > VIL_PK_MAX_BYTES) rc = fail(&r, "the pickle is %zu bytes, over the %u-byte limit", n, VIL_PK_MAX_BYTES);
    while (rc == 0) rc = step(&r);
    free(r.stack);
    free(r.memo);
    if (rc < 0) {
        vil_pickle_free(r.pk);
        return NULL;
    }
    return r.pk;
}

const VilPkObj *vil_pickle_root(const VilPickle *p) { return p->root; }

void vil_pickle_free(VilPickle *p) {
    if (!p) return;
    for (long i = 0; i < p->n_objects; i++) {
        VilPkObj *o = &p->blocks[i / BLOCK][i % BLOCK];
        if (o->kind == VIL_PK_STR) free(o->s);
        free(o->items);
        free(o->tensor);
    }
    for (int b = 0; b < p->n_blocks; b++) free(p->blocks[b]);
    free(p->blocks);
    free(p);
}

const VilPkObj *vil_pk_get(const VilPkObj *d, const char *key) {
    if (!d || d->kind != VIL_PK_DICT) return NULL;
    for (int i = d->n / 2 - 1; i >= 0; i--) { /* the last assignment wins, as in Python */
        const VilPkObj *k = d->items[2 * i];
        if (k->kind == VIL_PK_STR && strcmp(k->s, key) == 0) return d->items[2 * i + 1];
    }
    return NULL;
}
