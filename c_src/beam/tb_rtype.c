#include "tb_rtype.h"

#include <stdio.h>

#include "tb_stripe.h"

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

void *tb_rtype_alloc(const tb_rtype *t, size_t size)
{
    return enif_alloc_resource(t->types[tb_stripe(TB_RTYPE_STRIPES)], size);
}

int tb_rtype_get(ErlNifEnv *env, ERL_NIF_TERM term, const tb_rtype *t, void **obj)
{
    unsigned mine = tb_stripe(TB_RTYPE_STRIPES);
    if (enif_get_resource(env, term, t->types[mine], obj))
        return 1;
    for (unsigned i = 0; i < TB_RTYPE_STRIPES; i++)
        if (i != mine && enif_get_resource(env, term, t->types[i], obj))
            return 1;
    return 0;
}
