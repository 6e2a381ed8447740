#include "tb_raise.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tb_atom.h"

/* More than any message has: a format that names more terms is cut there,
 * and a longer run of text becomes several text segments. */
enum { TB_RAISE_MAX_SEGMENTS = 32, TB_RAISE_TEXT_CHUNK = 512 };

static ERL_NIF_TERM reason_atoms[TB_WHY_COUNT];

/* The reasons' atoms, from their table; the other atoms of an error are
 * tb_atom.h's. */
void tb_raise_load(ErlNifEnv *env)
{
#define TB_REASON_ATOM(id, atom) reason_atoms[TB_WHY_##id] = enif_make_atom(env, #atom);
    TB_REASONS(TB_REASON_ATOM)
#undef TB_REASON_ATOM
}

ERL_NIF_TERM tb_raise_reasons(ErlNifEnv *env)
{
    return enif_make_list_from_array(env, reason_atoms, TB_WHY_COUNT);
}

/* A C string as a binary. Our texts are ASCII; a byte past ASCII (from a
 * libtorch message, say) becomes '?', so that every text is valid UTF-8. */
static ERL_NIF_TERM ascii_binary(ErlNifEnv *env, const char *s, size_t n)
{
    ERL_NIF_TERM bin;
    unsigned char *bytes = enif_make_new_binary(env, n, &bin);
    for (size_t i = 0; i < n; i++)
        bytes[i] = (unsigned char)s[i] < 0x80 ? (unsigned char)s[i] : '?';
    return bin;
}

/* The segments of a message being built: text gathers in a buffer until a
 * term, a code or the end closes it. */
typedef struct {
    ErlNifEnv *env;
    ERL_NIF_TERM segments[TB_RAISE_MAX_SEGMENTS];
    unsigned count;
    char buffer[TB_RAISE_TEXT_CHUNK];
    size_t used;
} message;

static int full(const message *m)
{
    return m->count >= TB_RAISE_MAX_SEGMENTS;
}

static void flush_text(message *m)
{
    if (m->used > 0 && !full(m))
        m->segments[m->count++] = ascii_binary(m->env, m->buffer, m->used);
    m->used = 0;
}

static void add_text(message *m, const char *s, size_t n)
{
    while (n > 0) {
        if (m->used == sizeof m->buffer)
            flush_text(m);
        size_t room = sizeof m->buffer - m->used;
        size_t k = n < room ? n : room;
        memcpy(m->buffer + m->used, s, k);
        m->used += k;
        s += k;
        n -= k;
    }
}

static void add_segment(message *m, ERL_NIF_TERM segment)
{
    flush_text(m);
    if (!full(m))
        m->segments[m->count++] = segment;
}

/* An integer of conversion c (d, i, u or x) with longs l's, written into
 * number: its length, as snprintf gives it. */
static int format_integer(char c, int longs, int alternate, va_list *ap, char *number, size_t size)
{
    if (c == 'd' || c == 'i')
        return longs == 0   ? snprintf(number, size, "%d", va_arg(*ap, int))
               : longs == 1 ? snprintf(number, size, "%ld", va_arg(*ap, long))
                            : snprintf(number, size, "%lld", va_arg(*ap, long long));
    if (c == 'u')
        return longs == 0   ? snprintf(number, size, "%u", va_arg(*ap, unsigned))
               : longs == 1 ? snprintf(number, size, "%lu", va_arg(*ap, unsigned long))
                            : snprintf(number, size, "%llu", va_arg(*ap, unsigned long long));
    unsigned long long value = longs == 0   ? va_arg(*ap, unsigned)
                               : longs == 1 ? va_arg(*ap, unsigned long)
                                            : va_arg(*ap, unsigned long long);
    return snprintf(number, size, alternate ? "%#llx" : "%llx", value);
}

/* The conversion that starts at spec (its '%') added to m: where the
 * format goes on after it (its last character, or spec itself when it is
 * not a conversion of ours: the percent sign is kept as written, and what
 * follows it is read again as plain text). */
static const char *add_conversion(message *m, const char *spec, va_list *ap)
{
    const char *p = spec + 1;
    int alternate = 0, longs = 0;
    if (*p == '#') {
        alternate = 1;
        p++;
    }
    while (*p == 'l' && longs < 2) {
        longs++;
        p++;
    }
    char number[32];
    int n = -1;
    switch (*p) {
    case '%': add_text(m, "%", 1); break;
    case 'd':
    case 'i':
    case 'u':
    case 'x': n = format_integer(*p, longs, alternate, ap, number, sizeof number); break;
    case 's': {
        const char *s = va_arg(*ap, const char *);
        add_text(m, s, strlen(s));
        break;
    }
    case 'T': add_segment(m, enif_make_tuple2(m->env, tb_atoms.term, va_arg(*ap, ERL_NIF_TERM))); break;
    case 'C': {
        const char *erlang = va_arg(*ap, const char *);
        const char *elixir = va_arg(*ap, const char *);
        add_segment(m, enif_make_tuple3(m->env, tb_atoms.code, ascii_binary(m->env, erlang, strlen(erlang)),
                                        ascii_binary(m->env, elixir, strlen(elixir))));
        break;
    }
    default: add_text(m, "%", 1); return spec;
    }
    if (n > 0)
        add_text(m, number, (size_t)n < sizeof number ? (size_t)n : sizeof number - 1);
    return p;
}

/* Reads the printf-like format (tb_raise.h) into segments, and raises
 * {Kind, #{reason => Reason, argument => Argument, message => Segments}}. */
static ERL_NIF_TERM raise_v(ErlNifEnv *env, ERL_NIF_TERM kind, tb_reason reason, const char *argument, const char *fmt,
                            va_list *ap)
{
    message m = {.env = env, .count = 0, .used = 0};
    for (const char *p = fmt; *p && !full(&m); p++) {
        if (*p == '%')
            p = add_conversion(&m, p, ap);
        else
            add_text(&m, p, 1);
    }
    flush_text(&m);
    ERL_NIF_TERM keys[] = {tb_atoms.reason, tb_atoms.argument, tb_atoms.message};
    ERL_NIF_TERM values[] = {reason_atoms[reason], argument ? enif_make_atom(env, argument) : tb_atoms.none,
                             enif_make_list_from_array(env, m.segments, m.count)};
    ERL_NIF_TERM cause;
    enif_make_map_from_arrays(env, keys, values, 3, &cause);
    return enif_raise_exception(env, enif_make_tuple2(env, kind, cause));
}

ERL_NIF_TERM tb_raise_badarg(ErlNifEnv *env, tb_reason reason, const char *argument, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ERL_NIF_TERM r = raise_v(env, tb_atoms.badarg, reason, argument, fmt, &ap);
    va_end(ap);
    return r;
}

ERL_NIF_TERM tb_raise_error(ErlNifEnv *env, tb_reason reason, const char *argument, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ERL_NIF_TERM r = raise_v(env, tb_atoms.tensor_blob, reason, argument, fmt, &ap);
    va_end(ap);
    return r;
}
