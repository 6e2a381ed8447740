/* Raising errors: near the bottom of the NIF (it includes no concern; its
 * atoms are tb_atom.h's).
 *
 * An error carries, as data, why it was raised (a reason: an atom of the
 * table below), the argument it is about (an atom naming the argument or
 * field, as its message names it first: shape, dtype, ptr, handle, ...; or
 * none) and its message. A raise gives
 *   error({Kind, #{reason => Reason, argument => Argument,
 *                  message => Segments}})
 * Code decides on the reason and the argument, never on the message's text.
 *
 * The NIF never renders a term into text: Erlang and Elixir callers print
 * terms differently, and only the facade knows which one is calling. The
 * message is a list of segments, each rendered by the facade of the
 * caller's language:
 *   Text                  a binary, shown as it is
 *   {term, Term}          a term, printed as the caller's language prints
 *                         terms (within limits: any term, however large or
 *                         deep, prints in bounded time)
 *   {code, Erlang, Elixir}  code, spelled in each language (binaries)
 * The Erlang facade (src/tensor_blob.erl) renders them into error({Kind,
 * Message}) and keeps reason, argument and segments in the stacktrace's
 * error_info; the Elixir facade (lib/tensor_blob/raise.ex) renders the same
 * segments. Nothing is built on success.
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

/* The reasons, one table for the NIF and both facades (tensor_blob:tables/0
 * gives their atoms, in this order): X(ID, atom). A reason says what a
 * caller may do about the error, so there are few; the argument and the
 * message say the rest. To add one: a row here (its atom, what it means),
 * then raise it; a facade that dispatches on it or raises it finds it in
 * tables/0 (scripts/check_errors.sh checks the atoms src/ and lib/ raise). */
#define TB_REASONS(X)                                                                                      \
    X(NOT_A_TENSOR, not_a_tensor)     /* a term given for a tensor is none (or one of another node) */     \
    X(BAD_VALUE, bad_value)           /* a value of the wrong type or form, or out of its range */         \
    X(MISSING, missing)               /* a key the call needs is not there */                              \
    X(BAD_OPTION, bad_option)         /* an unknown option, or options in a form the call does not take */ \
    X(BAD_DTYPE, bad_dtype)           /* a dtype (or DLPack type) that names no dtype, or the wrong one */ \
    X(BAD_SHAPE, bad_shape)           /* a shape that is no shape, or too large */                         \
    X(BAD_STRIDES, bad_strides)       /* strides that do not fit the shape, or overlap where written */    \
    X(NOT_CONTIGUOUS, not_contiguous) /* memory that is not row-major where the call needs it */           \
    X(OUT_OF_EXTENT, out_of_extent)   /* memory described past the memory there (owner, binary, region) */ \
    X(MISALIGNED, misaligned)         /* an address not aligned as the dtype or the format needs */        \
    X(WRONG_DEVICE, wrong_device)     /* memory on a device the call does not take */                      \
    X(NO_DEVICE, no_device)           /* no such device here */                                            \
    X(NO_REGION, no_region)           /* no shared memory of that name */                                  \
    X(GONE, gone)                     /* consumed, released or shrunk already (a capsule, a region) */     \
    X(READ_ONLY, read_only)           /* memory that may not be written (or is a binary's bytes) */        \
    X(UNSAFE, unsafe)                 /* refused: the VM could crash, or a reader see bytes change */      \
    X(UNSUPPORTED, unsupported)       /* this build, libtorch or format cannot do it */                    \
    X(NO_MEMORY, no_memory)           /* out of memory, or of room in shared memory */                     \
    X(LIBTORCH, libtorch)             /* libtorch refused or failed (its message follows) */               \
    X(RUNTIME, runtime)               /* a device runtime call failed (CUDA) */                            \
    X(SYSTEM, system)                 /* an operating-system call failed (its errno's text follows) */

typedef enum {
#define TB_REASON_ENUM(id, atom) TB_WHY_##id,
    TB_REASONS(TB_REASON_ENUM)
#undef TB_REASON_ENUM
        TB_WHY_COUNT
} tb_reason;

/* Makes this file's atoms (the reasons' too); called by load and upgrade. */
void tb_raise_load(ErlNifEnv *env);

/* The reasons' atoms, in table order. */
ERL_NIF_TERM tb_raise_reasons(ErlNifEnv *env);

/* error({badarg, ...}): bad input. error({tensor_blob, ...}): a failure that
 * is not the caller's. `argument`: the argument or field the error is about,
 * as the message names it (made an atom), or NULL for none. */
ERL_NIF_TERM tb_raise_badarg(ErlNifEnv *env, tb_reason reason, const char *argument, const char *fmt, ...);
ERL_NIF_TERM tb_raise_error(ErlNifEnv *env, tb_reason reason, const char *argument, const char *fmt, ...);

#endif
