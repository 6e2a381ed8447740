/* A pin keeps an owner term alive while libtorch uses memory the owner holds. */
#ifndef TB_PIN_H
#define TB_PIN_H

#include <erl_nif.h>

typedef struct {
    ErlNifEnv *env;     /* process-independent */
    ERL_NIF_TERM owner; /* the copy of the owner, living in env */
} tb_pin;

/* Copies owner into a new process-independent env. Copying keeps the
 * resources and off-heap binaries inside the term alive without copying
 * their bytes. NULL when out of memory. */
tb_pin *tb_pin_new(ERL_NIF_TERM owner);

/* Frees a pin: the storage deleter of every pinned view. Safe on any thread. */
void tb_pin_release(void *pin);

/* When the owner is one of our tensors, keeping its resource is enough and
 * far cheaper than copying a term: the context is the resource itself. */
void tb_pin_keep_resource(void *resource);
void tb_pin_release_resource(void *resource);

/* The same, for memory that must not be written through the view: the
 * bytes of a BEAM binary, or a read-only tensor's. */
void tb_pin_release_read_only(void *pin);
void tb_pin_release_resource_read_only(void *resource);

/* 1 when a storage deleter is one of the pins'. */
int tb_pin_is_pin_deleter(void (*deleter)(void *));
/* 1 when it is one of the read-only pins'. */
int tb_pin_is_read_only_deleter(void (*deleter)(void *));

/* The storage deleter of an unpinned view: the caller answers for the memory. */
void tb_pin_none(void *ctx);

long tb_pin_live(void);

#endif
