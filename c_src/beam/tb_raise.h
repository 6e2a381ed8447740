/* Raising errors: the very bottom of the NIF (it includes no concern).
 *
 * The NIF never renders a term into text: Erlang and Elixir callers print
 * terms differently, and only the facade knows which one is calling. A
 * raise gives error({Kind, {message, Segments}}), the message as a list of
 * segments, each rendered by the facade of the caller's language:
 *   Text                  a binary, shown as it is
 *   {term, Term}          a term, printed as the caller's language prints
 *                         terms (within limits: any term, however large or
 *                         deep, prints in bounded time)
 *   {code, Erlang, Elixir}  code, spelled in each language (binaries)
 * The Erlang facade (src/tensor_blob.erl) renders them into error({Kind,
 * Message}) and keeps them in the stacktrace's error_info; the Elixir facade
 * (lib/tensor_blob/raise.ex) renders the same segments. Nothing is built on
 * success.
 *
 * The format given here is printf-like, so call sites read as messages:
 *   %s          a C string (text)
 *   %d %i %u    int, unsigned (with l: long, unsigned long; ll: long long,
 *               unsigned long long), as decimal text
 *   %#lx %lx    unsigned (long, long long), as hexadecimal text (#: 0x first)
 *   %T          a term: {term, Term}
 *   %C          two C strings: the same code spelled in Erlang, then Elixir
 *               (`#{copy => true}` / `copy: true`): {code, Erlang, Elixir}
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
