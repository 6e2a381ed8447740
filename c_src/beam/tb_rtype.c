#include "tb_rtype.h"

#include <stdatomic.h>
#include <stdio.h>

int tb_rtype_open(ErlNifEnv *env, const char *name, const ErlNifResourceTypeInit *init, ErlNifResourceFlags flags,
                  tb_rtype *out)
{
    for (int i = 0; i < TB_RTYPE_STRIPES; i++) {
        char stripe_name[128];
        if (i == 0)
            snprintf(stripe_name, sizeof stripe_name, "%s", name);
        else
            snprintf(stripe_name, sizeof stripe_name, "%s_%d", name, i);
        out->types[i] = enif_init_resource_type(env, stripe_name, init, flags, NULL);
        if (!out->types[i])
            return 0;
    }
    return 1;
}

/* Threads take stripes in turn as they first allocate: the first
 * TB_RTYPE_STRIPES threads that make resources (the busy schedulers)
 * each have one of their own. */
static atomic_uint next_stripe;
static _Thread_local unsigned my_stripe_plus_one;

static unsigned my_stripe(void)
{
    unsigned s = my_stripe_plus_one;
    if (!s) {
        s = atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed) % TB_RTYPE_STRIPES + 1;
        my_stripe_plus_one = s;
    }
    return s - 1;
}

void *tb_rtype_alloc(const tb_rtype *t, size_t size)
{
    return enif_alloc_resource(t->types[my_stripe()], size);
}

int tb_rtype_get(ErlNifEnv *env, ERL_NIF_TERM term, const tb_rtype *t, void **obj)
{
    unsigned mine = my_stripe();
    if (enif_get_resource(env, term, t->types[mine], obj))
        return 1;
    for (unsigned i = 0; i < TB_RTYPE_STRIPES; i++)
        if (i != mine && enif_get_resource(env, term, t->types[i], obj))
            return 1;
    return 0;
}
