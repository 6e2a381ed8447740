/* Pins: what keeps an owner alive while libtorch uses memory it holds.
 * Each is a storage (tb_storage.h) handed to libtorch as the deleter
 * context of the view's storage, released when libtorch frees it. */
#ifndef TB_PIN_H
#define TB_PIN_H

#include <erl_nif.h>

#include "tb_storage.h"
#include "tb_tensor.h"

/* A pin of any term: a copy in a process-independent env. Copying keeps
 * the resources and off-heap binaries inside the term alive without
 * copying their bytes. */
typedef struct tb_pin {
    tb_storage header;
    ErlNifEnv *env;
    struct tb_pin *next_free; /* in its thread's pool, once released */
    ERL_NIF_TERM owner;       /* the copy, living in env */
    /* A binary owner's bytes, read once when pinned: env is only read
     * after that, by any thread. */
    int is_binary;
    ErlNifBinary bytes;
} tb_pin;

/* Pins a term. A binary is pinned as TB_MEMORY_BINARY: read-only, and its
 * bytes registered as memory never written. NULL when out of memory. */
tb_pin *tb_pin_term(ERL_NIF_TERM owner);
/* The bytes of a pinned binary; 0 when the owner is no binary. */
int tb_pin_binary(const tb_pin *pin, ErlNifBinary *bin);
/* When storage is this build's pin of a binary, the part of that binary
 * holding [span->lo, span->hi), as a sub-binary term in env: the bytes a
 * tensor views are the binary's own, so no new binary need be made. */
int tb_pin_binary_part(ErlNifEnv *env, const tb_storage *storage, const tb_range *span, ERL_NIF_TERM *out);

/* 1 when the term is small enough to copy and walk on a normal scheduler
 * (at most TB_PIN_SMALL_TERMS terms, nested at most 64 deep); the count
 * stops as soon as it knows, so it costs little whatever the term. */
#define TB_PIN_SMALL_TERMS 4096
int tb_pin_term_is_small(ErlNifEnv *env, ERL_NIF_TERM term);

/* 1 when a binary inside a pinned term (a tuple, list or map holding it, at
 * any depth) has bytes in [lo, hi): a view of them is read-only, as a view
 * pinning the binary itself is. */
int tb_pin_holds_binary_over(tb_pin *pin, uintptr_t lo, uintptr_t hi);

/* Pins one of our tensors: keeping its resource is enough, and far cheaper
 * than copying a term. read_only marks the view's memory read-only. */
tb_storage *tb_pin_tensor(tb_tensor *owner, int read_only);

/* The storage of an unpinned view: the caller answers for the memory. */
tb_storage *tb_pin_none(int read_only);

long tb_pin_live(void);

#endif
