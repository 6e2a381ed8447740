#include "tb_count.h"
#include "tb_pin.h"


static tb_count live_pins;

tb_pin *tb_pin_new(ERL_NIF_TERM owner)
{
    tb_pin *pin = enif_alloc(sizeof *pin);
    if (!pin)
        return NULL;
    pin->env = enif_alloc_env();
    if (!pin->env) {
        enif_free(pin);
        return NULL;
    }
    pin->owner = enif_make_copy(pin->env, owner);
    tb_count_add(&live_pins, 1);
    return pin;
}

void tb_pin_release(void *ctx)
{
    tb_pin *pin = ctx;
    enif_free_env(pin->env);
    enif_free(pin);
    tb_count_add(&live_pins, -1);
}

/* Same body, its own address: the storage's deleter is all that marks the
 * memory read-only (a BEAM binary's bytes, or a read-only tensor's). */
void tb_pin_release_read_only(void *ctx)
{
    tb_pin_release(ctx);
}

void tb_pin_keep_resource(void *resource)
{
    enif_keep_resource(resource);
    tb_count_add(&live_pins, 1);
}

void tb_pin_release_resource(void *resource)
{
    enif_release_resource(resource);
    tb_count_add(&live_pins, -1);
}

void tb_pin_release_resource_read_only(void *resource)
{
    tb_pin_release_resource(resource);
}

int tb_pin_is_pin_deleter(void (*deleter)(void *))
{
    return deleter == tb_pin_release || deleter == tb_pin_release_resource || tb_pin_is_read_only_deleter(deleter);
}

int tb_pin_is_read_only_deleter(void (*deleter)(void *))
{
    return deleter == tb_pin_release_read_only || deleter == tb_pin_release_resource_read_only;
}

void tb_pin_none(void *ctx)
{
    (void)ctx;
}

long tb_pin_live(void)
{
    return tb_count_read(&live_pins);
}
