/* The managed tensors this library makes (exports), their addresses while
 * handed out as integers, and the capsule resource that owns one export
 * until it is consumed or collected. The DLPack NIFs (nif/tb_dlpack.c)
 * and the door for other NIFs (nif/tb_bridge.c) work through these. */
#ifndef TB_DLPACK_EXPORT_H
#define TB_DLPACK_EXPORT_H

#include <erl_nif.h>
#include <stdatomic.h>
#include <stdint.h>

#include "tb_dlpack_check.h"
#include "tb_tensor.h"
#include "torch_shim.h"

/* ---- Exports ------------------------------------------------------------ */

/* A new DLManagedTensorVersioned (or legacy DLManagedTensor) over the
 * tensor's memory, holding its own libtorch reference until its deleter
 * runs. NULL when out of memory or the scalar type has no dtype. */
void *tb_dlpack_export(tb_shim_tensor *handle, int versioned, int read_only);
/* The same for a handle already described (tb_tensor_exported_of). */
void *tb_dlpack_export_of(tb_shim_tensor *handle, const tb_tensor_exported *x, int versioned, int read_only);

/* The DLTensor of a described tensor, over the given shape and strides
 * (x's own, or copies of them). */
void tb_dlpack_dltensor_of(const tb_tensor_exported *x, int64_t *shape, int64_t *strides, tb_DLTensor *out);

/* Exported managed tensors whose deleter has not run yet: in a capsule, or
 * consumed and held by a consumer. */
long tb_dlpack_live(void);

/* Whether m is our own writable export, still as we made it (so nobody
 * else has seen, or changed, the managed tensor): its tensor is at hand. */
int tb_dlpack_own_export(void *m, int versioned, int read_only);

/* Calls a managed tensor's deleter, if it has one (ours or a producer's). */
void tb_dlpack_release(void *managed, int versioned);

/* The same on the release thread (tb_release.h), for a producer whose
 * deleter may block (Python's takes the GIL); counted as deferred in
 * stats/0 until it has run. held: Python's, run inside the release
 * thread's hold of the GIL. */
void tb_dlpack_release_later(void *managed, int versioned, int held);

/* Checks a managed tensor as what it is said to hold (tb_dlpack_check.h). */
void tb_dlpack_check_managed(void *managed, int versioned, tb_dlpack_checked *chk);

/* ---- Addresses handed out ------------------------------------------------ */

/* What an address of ours was handed out as. Every build reads the flag as
 * "handed out" when it is not TB_HANDED_NO; a build before the version was
 * recorded set TB_HANDED_UNKNOWN, so the values keep that meaning and the
 * ABI stays (tb_state.h). */
enum { TB_HANDED_NO = 0, TB_HANDED_UNKNOWN = 1, TB_HANDED_VERSIONED = 2, TB_HANDED_LEGACY = 3 };

/* An export's address is given out as an integer: one import by address
 * may take it (from_dlpack refuses any other address unless the caller
 * vouches for it). What it holds (versioned or legacy) is recorded with it:
 * an import reads it as that, and refuses to read it as the other. */
void tb_dlpack_hand_out(void *managed, int versioned);

/* Hands out again an address claimed and left unread, as what it was
 * (handed: the TB_HANDED_ value its claim answered). */
void tb_dlpack_hand_back(void *managed, int handed);

/* When address is one of ours, handed out and unclaimed: it is now claimed
 * by the caller, who owes its deleter one call, and the answer is what it
 * was handed out as (a TB_HANDED_ value); TB_HANDED_NO otherwise. */
int tb_dlpack_claim(uintptr_t address);

/* ---- Capsules ------------------------------------------------------------ */

/* Owns one managed tensor until consumed. The pointer is swapped out
 * atomically, so of two racing consumers exactly one gets it. */
typedef struct {
    _Atomic(void *) managed; /* NULL once consumed */
    /* Held by consume and by dlpack_info, so metadata is never read from
     * a managed tensor that a consumer has just taken, and may have freed.
     * One per capsule: capsules of different tensors never contend. */
    atomic_flag busy;
    int versioned;
    /* The exported tensor, kept: a view pinning the capsule keeps the
     * memory alive whoever consumes it, and whenever; and an import of
     * the capsule as it is gives this tensor back. */
    tb_tensor *source;
} tb_capsule;

int tb_dlpack_open_type(ErlNifEnv *env, ErlNifResourceFlags flags);

/* A new capsule holding an export of t: the term, or the raised error
 * (return it at once). */
ERL_NIF_TERM tb_capsule_make(ErlNifEnv *env, tb_tensor *t, int versioned, int read_only);

/* The capsule a term is, or NULL. */
tb_capsule *tb_capsule_get(ErlNifEnv *env, ERL_NIF_TERM term);

/* The capsule a term is, or NULL with *exc set. */
tb_capsule *tb_capsule_arg(ErlNifEnv *env, ERL_NIF_TERM term, ERL_NIF_TERM *exc);

/* A capsule's managed tensor, or NULL with *exc set once it was consumed.
 * Held: dlpack_info may be reading it while an import frees it.
 * take: taken out, so that no second consumer gets it. chk: checked too. */
void *tb_capsule_managed(ErlNifEnv *env, tb_capsule *c, int take, tb_dlpack_checked *chk, ERL_NIF_TERM *exc);

#endif
