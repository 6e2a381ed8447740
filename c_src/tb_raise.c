#include "tb_raise.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* More than any message has; a format that named more would be cut there. */
enum { TB_RAISE_MAX_ARGS = 16, TB_RAISE_MAX_FORMAT = 1024 };

static ERL_NIF_TERM atom_badarg, atom_tensor_blob, atom_format, atom_code;

void tb_raise_load(ErlNifEnv *env)
{
    atom_badarg = enif_make_atom(env, "badarg");
    atom_tensor_blob = enif_make_atom(env, "tensor_blob");
    atom_format = enif_make_atom(env, "format");
    atom_code = enif_make_atom(env, "code");
}

/* A C string as a binary shown with ~ts. Our texts are ASCII; a byte past
 * ASCII (from a libtorch message, say) becomes '?', as io_lib refuses a ~ts
 * argument that is not UTF-8. */
static ERL_NIF_TERM text(ErlNifEnv *env, const char *s)
{
    size_t n = strlen(s);
    ERL_NIF_TERM bin;
    unsigned char *bytes = enif_make_new_binary(env, n, &bin);
    for (size_t i = 0; i < n; i++)
        bytes[i] = (unsigned char)s[i] < 0x80 ? (unsigned char)s[i] : '?';
    return bin;
}

/* Translates the printf-like format (tb_raise.h) into an io_lib format and
 * the list of its arguments, and raises {Kind, {format, Format, Args}}. */
static ERL_NIF_TERM raise_v(ErlNifEnv *env, ERL_NIF_TERM kind, const char *fmt, va_list ap)
{
    char out[TB_RAISE_MAX_FORMAT];
    size_t o = 0;
    ERL_NIF_TERM args[TB_RAISE_MAX_ARGS];
    unsigned nargs = 0;
    /* Each step writes at most 4 bytes (~0tp); stop before the buffer or
     * the arguments run out, so the format and its arguments always agree. */
    for (const char *p = fmt; *p && o + 4 < sizeof out && nargs < TB_RAISE_MAX_ARGS; p++) {
        if (*p == '~') {
            out[o++] = '~';
            out[o++] = '~';
            continue;
        }
        if (*p != '%') {
            out[o++] = *p;
            continue;
        }
        const char *spec = p++;
        int alternate = 0, longs = 0;
        if (*p == '#') {
            alternate = 1;
            p++;
        }
        while (*p == 'l' && longs < 2) {
            longs++;
            p++;
        }
        const char *directive = "~b";
        switch (*p) {
        case '%':
            out[o++] = '%';
            continue;
        case 'd':
        case 'i':
            args[nargs++] = longs == 0   ? enif_make_int(env, va_arg(ap, int))
                            : longs == 1 ? enif_make_long(env, va_arg(ap, long))
                                         : enif_make_int64(env, (ErlNifSInt64)va_arg(ap, long long));
            break;
        case 'u':
            args[nargs++] = longs == 0   ? enif_make_uint(env, va_arg(ap, unsigned))
                            : longs == 1 ? enif_make_ulong(env, va_arg(ap, unsigned long))
                                         : enif_make_uint64(env, (ErlNifUInt64)va_arg(ap, unsigned long long));
            break;
        case 'x': {
            unsigned long long value = longs == 0   ? va_arg(ap, unsigned)
                                       : longs == 1 ? va_arg(ap, unsigned long)
                                                    : va_arg(ap, unsigned long long);
            char hex[32];
            snprintf(hex, sizeof hex, alternate ? "%#llx" : "%llx", value);
            args[nargs++] = text(env, hex);
            directive = "~ts";
            break;
        }
        case 's':
            args[nargs++] = text(env, va_arg(ap, const char *));
            directive = "~ts";
            break;
        case 'T':
            args[nargs++] = va_arg(ap, ERL_NIF_TERM);
            /* One line, whatever the width; the facades cap its length. */
            directive = "~0tp";
            break;
        case 'C': {
            const char *erlang = va_arg(ap, const char *);
            const char *elixir = va_arg(ap, const char *);
            args[nargs++] = enif_make_tuple3(env, atom_code, text(env, erlang), text(env, elixir));
            directive = "~ts";
            break;
        }
        default:
            /* Not a conversion of ours: the percent sign is kept as written,
             * and what follows it is read again as plain text. */
            out[o++] = '%';
            p = spec;
            continue;
        }
        size_t n = strlen(directive);
        memcpy(out + o, directive, n);
        o += n;
    }
    ERL_NIF_TERM format;
    memcpy(enif_make_new_binary(env, o, &format), out, o);
    ERL_NIF_TERM cause = enif_make_tuple3(env, atom_format, format, enif_make_list_from_array(env, args, nargs));
    return enif_raise_exception(env, enif_make_tuple2(env, kind, cause));
}

ERL_NIF_TERM tb_raise_badarg(ErlNifEnv *env, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ERL_NIF_TERM r = raise_v(env, atom_badarg, fmt, ap);
    va_end(ap);
    return r;
}

ERL_NIF_TERM tb_raise_error(ErlNifEnv *env, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ERL_NIF_TERM r = raise_v(env, atom_tensor_blob, fmt, ap);
    va_end(ap);
    return r;
}
