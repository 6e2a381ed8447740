#include "tb_pin.h"

#include <stdlib.h>

#include "tb_count.h"

/* Pins released on a BEAM thread, with their envs cleared, kept for the
 * next pins made there: an env allocated and freed costs about 350 ns more
 * than one cleared and reused. A collection frees its dead pins at once,
 * hundreds after a major one, so the pool is deep: 1,024 envs, about 1 MiB
 * per thread at most, measured (a pool of 16 left the Nx round trip at
 * 3.5 us, 1,024 at 1.75 us). Only the BEAM's threads keep them, for they
 * live as long as the VM; a pin released on another thread is freed. */
enum { PIN_POOL_MAX = 1024 };
static _Thread_local struct {
    int count;
    tb_pin *first;
} pin_pool;

static tb_pin *pin_take(void)
{
    tb_pin *pin = pin_pool.first;
    if (pin) {
        pin_pool.first = pin->next_free;
        pin_pool.count--;
        return pin;
    }
    pin = enif_alloc(sizeof *pin);
    if (!pin)
        return NULL;
    pin->env = enif_alloc_env();
    if (!pin->env) {
        enif_free(pin);
        return NULL;
    }
    return pin;
}

static void pin_give(tb_pin *pin)
{
    if (pin_pool.count < PIN_POOL_MAX && enif_thread_type() != ERL_NIF_THR_UNDEFINED) {
        enif_clear_env(pin->env);
        pin->next_free = pin_pool.first;
        pin_pool.first = pin;
        pin_pool.count++;
        return;
    }
    enif_free_env(pin->env);
    enif_free(pin);
}

static void release_term(tb_storage *s)
{
    pin_give((tb_pin *)s);
    tb_count_add(&tb_library_state->pins, -1);
}

tb_pin *tb_pin_term(ERL_NIF_TERM owner)
{
    tb_pin *pin = pin_take();
    if (!pin)
        return NULL;
    pin->owner = enif_make_copy(pin->env, owner);
    tb_count_add(&tb_library_state->pins, 1);
    pin->is_binary = enif_inspect_binary(pin->env, pin->owner, &pin->bytes);
    if (pin->is_binary) {
        tb_storage_init(&pin->header, TB_MEMORY_BINARY, TB_STORAGE_READ_ONLY, release_term);
        if (pin->bytes.size > 0) {
            tb_range bytes = {.lo = (uintptr_t)pin->bytes.data, .hi = (uintptr_t)pin->bytes.data + pin->bytes.size};
            tb_storage_guard_read_only(&pin->header, &bytes);
        }
    } else {
        tb_storage_init(&pin->header, TB_MEMORY_PINNED, 0, release_term);
    }
    return pin;
}

int tb_pin_binary(const tb_pin *pin, ErlNifBinary *bin)
{
    if (pin->is_binary)
        *bin = pin->bytes;
    return pin->is_binary;
}

int tb_pin_binary_part(ErlNifEnv *env, const tb_storage *storage, const tb_range *span, ERL_NIF_TERM *out)
{
    /* Only this build's pins: one made by an older build may differ. */
    if (!storage || storage->free != release_term)
        return 0;
    const tb_pin *pin = (const tb_pin *)storage;
    uintptr_t lo = (uintptr_t)pin->bytes.data;
    if (!pin->is_binary || span->lo < lo || span->hi > lo + pin->bytes.size)
        return 0;
    *out = enif_make_sub_binary(env, enif_make_copy(env, pin->owner), span->lo - lo, span->hi - span->lo);
    return 1;
}

tb_storage *tb_pin_tensor(tb_tensor *owner, int read_only)
{
    enif_keep_resource(owner);
    tb_count_add(&tb_library_state->pins, 1);
    return read_only ? &owner->as_owner.read_only : &owner->as_owner.writable;
}

static void release_nothing(tb_storage *s)
{
    (void)s;
}

tb_storage *tb_pin_none(int read_only)
{
    /* Shared by every unpinned view: the kernel is asked of none. */
    static tb_storage none[2] = {
        {.abi = TB_ABI, .kind = TB_MEMORY_UNPINNED, .flags = TB_STORAGE_ASKED, .free = release_nothing},
        {.abi = TB_ABI,
         .kind = TB_MEMORY_UNPINNED,
         .flags = TB_STORAGE_READ_ONLY | TB_STORAGE_ASKED,
         .free = release_nothing},
    };
    return &none[read_only ? 1 : 0];
}

long tb_pin_live(void)
{
    return tb_count_read(&tb_library_state->pins);
}

/* A growable stack of terms still to visit: a walk in a loop, as deep as
 * the term is without using the C stack. */
typedef struct {
    ERL_NIF_TERM *items;
    size_t count, capacity;
} term_stack;

static int push(term_stack *st, ERL_NIF_TERM t)
{
    if (st->count == st->capacity) {
        size_t capacity = st->capacity ? st->capacity * 2 : 64;
        ERL_NIF_TERM *items = realloc(st->items, capacity * sizeof *items);
        if (!items)
            return 0;
        st->items = items;
        st->capacity = capacity;
    }
    st->items[st->count++] = t;
    return 1;
}

static int overlaps(const ErlNifBinary *b, uintptr_t lo, uintptr_t hi)
{
    uintptr_t start = (uintptr_t)b->data;
    return b->size > 0 && start < hi && lo < start + b->size;
}

int tb_pin_term_is_small(ErlNifEnv *env, ERL_NIF_TERM term)
{
    ERL_NIF_TERM stack[64], head, tail, key, value;
    int depth = 0, budget = TB_PIN_SMALL_TERMS;
    stack[depth++] = term;
    while (depth > 0) {
        ERL_NIF_TERM t = stack[--depth];
        const ERL_NIF_TERM *elements;
        int arity;
        size_t size;
        if (--budget < 0)
            return 0;
        if (enif_get_tuple(env, t, &arity, &elements)) {
            if (arity > budget || depth + arity > (int)(sizeof stack / sizeof stack[0]))
                return 0;
            for (int i = 0; i < arity; i++)
                stack[depth++] = elements[i];
        } else if (enif_get_list_cell(env, t, &head, &tail)) {
            if (depth + 2 > (int)(sizeof stack / sizeof stack[0]))
                return 0;
            stack[depth++] = tail;
            stack[depth++] = head;
        } else if (enif_get_map_size(env, t, &size) && size > 0) {
            if (size > (size_t)budget / 2)
                return 0;
            ErlNifMapIterator it;
            if (!enif_map_iterator_create(env, t, &it, ERL_NIF_MAP_ITERATOR_FIRST))
                return 0;
            int room = 1;
            while (room && enif_map_iterator_get_pair(env, &it, &key, &value)) {
                room = depth + 2 <= (int)(sizeof stack / sizeof stack[0]);
                if (room) {
                    stack[depth++] = key;
                    stack[depth++] = value;
                }
                enif_map_iterator_next(env, &it);
            }
            enif_map_iterator_destroy(env, &it);
            if (!room)
                return 0;
        }
    }
    return 1;
}

int tb_pin_holds_binary_over(tb_pin *pin, uintptr_t lo, uintptr_t hi)
{
    ErlNifEnv *env = pin->env;
    term_stack st = {0};
    int found = 0, ok = push(&st, pin->owner);
    while (ok && !found && st.count > 0) {
        ERL_NIF_TERM t = st.items[--st.count], head, tail, key, value;
        ErlNifBinary bin;
        const ERL_NIF_TERM *elements;
        int arity;
        if (enif_inspect_binary(env, t, &bin)) {
            found = overlaps(&bin, lo, hi);
        } else if (enif_get_tuple(env, t, &arity, &elements)) {
            for (int i = 0; i < arity && ok; i++)
                ok = push(&st, elements[i]);
        } else if (enif_get_list_cell(env, t, &head, &tail)) {
            ok = push(&st, tail) && push(&st, head);
        } else if (enif_is_map(env, t)) {
            ErlNifMapIterator it;
            if (!enif_map_iterator_create(env, t, &it, ERL_NIF_MAP_ITERATOR_FIRST)) {
                ok = 0;
                break;
            }
            while (ok && enif_map_iterator_get_pair(env, &it, &key, &value)) {
                ok = push(&st, key) && push(&st, value);
                enif_map_iterator_next(env, &it);
            }
            enif_map_iterator_destroy(env, &it);
        }
    }
    free(st.items);
    /* Out of memory: answer as if it were held, the safe side. */
    return found || !ok;
}
