/* Raising errors: the very bottom of the NIF (it includes no concern).
 *
 * The NIF never renders a term into text: Erlang and Elixir callers print
 * terms differently, and only the facade knows which one is calling. A
 * raise gives error({Kind, {format, Format, Args}}): Format is an io_lib
 * format, Args its arguments. The Erlang facade (src/tensor_blob.erl)
 * renders it with io_lib into error({Kind, Message}) and keeps the cause in
 * the stacktrace's error_info; the Elixir facade renders the same cause with
 * inspect/2. Nothing is formatted on success, and here only the format and
 * the argument list are built.
 *
 * The format given here is printf-like, so call sites read as messages:
 *   %s          a C string (shown as text)
 *   %d %i %u    int, unsigned (with l: long, unsigned long), shown in decimal
 *   %#lx %lx    unsigned long, shown in hexadecimal (with #: 0x first)
 *   %T          a term, printed as the caller's language prints terms
 *   %C          two C strings: the same code spelled in Erlang, then Elixir
 *               (`#{copy => true}` / `copy: true`)
 *   %%          a percent sign
 * The term returned is enif_raise_exception's: return it from the NIF at
 * once, or store it in *exc; never test it. */
#ifndef TB_RAISE_H
#define TB_RAISE_H

#include <erl_nif.h>

/* Makes this file's atoms; called by load and upgrade. */
void tb_raise_load(ErlNifEnv *env);

/* error({badarg, ...}): bad input. error({tensor_blob, ...}): a failure that
 * is not the caller's. */
ERL_NIF_TERM tb_raise_badarg(ErlNifEnv *env, const char *fmt, ...);
ERL_NIF_TERM tb_raise_error(ErlNifEnv *env, const char *fmt, ...);

#endif
