#include "tb_json.h"

#include <string.h>

int tb_json_fail(tb_json_reader *r, tb_safetensors_error e)
{
    if (r->h->error == TB_ST_OK) {
        r->h->error = e;
        r->h->at = (size_t)(r->p - r->start);
    }
    return 0;
}

void tb_json_skip_space(tb_json_reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

int tb_json_expect(tb_json_reader *r, char c)
{
    tb_json_skip_space(r);
    if (r->p >= r->end || *r->p != c)
        return tb_json_fail(r, TB_ST_BAD_JSON);
    r->p++;
    return 1;
}

int tb_json_take(tb_json_reader *r, char c)
{
    if (!tb_json_peek(r, c))
        return 0;
    r->p++;
    return 1;
}

int tb_json_peek(tb_json_reader *r, char c)
{
    tb_json_skip_space(r);
    return r->p < r->end && *r->p == c;
}

/* ---- Strings --------------------------------------------------------- */

static int hex4(tb_json_reader *r, unsigned *out)
{
    if (r->end - r->p < 4)
        return tb_json_fail(r, TB_ST_BAD_JSON);
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *r->p++;
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return tb_json_fail(r, TB_ST_BAD_JSON);
    }
    *out = v;
    return 1;
}

static void put_utf8(tb_json_reader *r, unsigned cp)
{
    unsigned char *o = (unsigned char *)r->out;
    if (cp < 0x80) {
        *o++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *o++ = (unsigned char)(0xC0 | cp >> 6);
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (unsigned char)(0xE0 | cp >> 12);
        *o++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (unsigned char)(0xF0 | cp >> 18);
        *o++ = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    r->out = (char *)o;
}

/* The code point of \uXXXX (after the u), a surrogate pair read as one. */
static int unicode_escape(tb_json_reader *r, unsigned *out)
{
    unsigned cp;
    if (!hex4(r, &cp))
        return 0;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return tb_json_fail(r, TB_ST_BAD_JSON); /* a lone low surrogate */
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        unsigned lo;
        if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u')
            return tb_json_fail(r, TB_ST_BAD_JSON);
        r->p += 2;
        if (!hex4(r, &lo))
            return 0;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return tb_json_fail(r, TB_ST_BAD_JSON);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    *out = cp;
    return 1;
}

/* The code point of the escape after a backslash. */
static int escape(tb_json_reader *r, unsigned *cp)
{
    if (r->p >= r->end)
        return tb_json_fail(r, TB_ST_BAD_JSON);
    switch (*r->p++) {
    case '"': *cp = '"'; return 1;
    case '\\': *cp = '\\'; return 1;
    case '/': *cp = '/'; return 1;
    case 'b': *cp = '\b'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'n': *cp = '\n'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'u': return unicode_escape(r, cp);
    default: return tb_json_fail(r, TB_ST_BAD_JSON);
    }
}

int tb_json_string(tb_json_reader *r, tb_safetensors_string *s)
{
    if (!tb_json_expect(r, '"'))
        return 0;
    s->ptr = r->out;
    for (;;) {
        if (r->p >= r->end)
            return tb_json_fail(r, TB_ST_BAD_JSON);
        unsigned char c = (unsigned char)*r->p++;
        if (c == '"')
            break;
        if (c < 0x20)
            return tb_json_fail(r, TB_ST_BAD_JSON);
        if (c != '\\') {
            *r->out++ = (char)c;
            continue;
        }
        unsigned cp = 0;
        if (!escape(r, &cp))
            return 0;
        put_utf8(r, cp);
    }
    s->len = (size_t)(r->out - s->ptr);
    return 1;
}

/* ---- Numbers and literals -------------------------------------------- */

int tb_json_size(tb_json_reader *r, uint64_t max, uint64_t *out)
{
    tb_json_skip_space(r);
    const char *at = r->p;
    uint64_t v = 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        unsigned d = (unsigned)(*r->p - '0');
        if (v > (max - d) / 10)
            return tb_json_fail(r, TB_ST_OVERFLOW);
        v = v * 10 + d;
        r->p++;
    }
    if (r->p == at || (r->p - at > 1 && *at == '0'))
        return tb_json_fail(r, TB_ST_BAD_ENTRY);
    if (r->p < r->end && (*r->p == '.' || *r->p == 'e' || *r->p == 'E'))
        return tb_json_fail(r, TB_ST_BAD_ENTRY);
    *out = v;
    return 1;
}

int tb_json_literal(tb_json_reader *r, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return tb_json_fail(r, TB_ST_BAD_JSON);
    r->p += n;
    return 1;
}

/* Past a run of digits (maybe none): where it started. */
static const char *digits(tb_json_reader *r)
{
    const char *at = r->p;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
        r->p++;
    return at;
}

static int number(tb_json_reader *r)
{
    const char *at = r->p;
    if (r->p < r->end && *r->p == '-')
        r->p++;
    const char *integer = digits(r);
    if (r->p == integer || (r->p - integer > 1 && *integer == '0'))
        return tb_json_fail(r, TB_ST_BAD_JSON);
    if (r->p < r->end && *r->p == '.') {
        r->p++;
        const char *fraction = digits(r);
        if (r->p == fraction)
            return tb_json_fail(r, TB_ST_BAD_JSON);
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        r->p++;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
            r->p++;
        const char *exponent = digits(r);
        if (r->p == exponent)
            return tb_json_fail(r, TB_ST_BAD_JSON);
    }
    return at != r->p;
}

/* ---- Values passed over ---------------------------------------------- */

/* A string or a key, its text dropped from the store. */
static int skip_string(tb_json_reader *r)
{
    tb_safetensors_string s;
    char *mark = r->out;
    int ok = tb_json_string(r, &s);
    r->out = mark;
    return ok;
}

/* The members of an object or the elements of an array, after its opening
 * bracket, through its closing one. */
static int skip_members(tb_json_reader *r, char open, int depth)
{
    char close = open == '{' ? '}' : ']';
    if (tb_json_take(r, close))
        return 1;
    for (;;) {
        if (open == '{' && !(skip_string(r) && tb_json_expect(r, ':')))
            return 0;
        if (!tb_json_skip_value(r, depth + 1))
            return 0;
        if (tb_json_take(r, ','))
            continue;
        return tb_json_expect(r, close);
    }
}

int tb_json_skip_value(tb_json_reader *r, int depth)
{
    tb_json_skip_space(r);
    if (r->p >= r->end)
        return tb_json_fail(r, TB_ST_BAD_JSON);
    char c = *r->p;
    if (c == '"')
        return skip_string(r);
    if (c == '{' || c == '[') {
        if (depth >= TB_ST_MAX_DEPTH)
            return tb_json_fail(r, TB_ST_TOO_DEEP);
        r->p++;
        return skip_members(r, c, depth);
    }
    if (c == 't')
        return tb_json_literal(r, "true");
    if (c == 'f')
        return tb_json_literal(r, "false");
    if (c == 'n')
        return tb_json_literal(r, "null");
    return number(r);
}
