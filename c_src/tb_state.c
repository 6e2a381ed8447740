#include "tb_state.h"

tb_state *tb_st;

static void list_init(tb_range *head)
{
    head->prev = head->next = head;
}

int tb_state_load(void *old, void (*storage_deleter)(void *), const char **why)
{
    tb_state *s = old;
    if (s && s->abi != TB_ABI) {
        *why = "the loaded build of tensor_blob has another ABI; restart the VM to load this one";
        return 0;
    }
    if (!s) {
        /* Never freed: every later build takes it over. */
        s = enif_alloc(sizeof *s);
        if (!s) {
            *why = "out of memory";
            return 0;
        }
        *s = (tb_state){.abi = TB_ABI};
        s->lock = enif_mutex_create("tensor_blob_memory");
        if (!s->lock) {
            enif_free(s);
            *why = "cannot create a mutex";
            return 0;
        }
        list_init(&s->frozen_files);
        list_init(&s->writing);
    }
    int known = 0;
    for (size_t i = 0; i < s->build_count; i++)
        known |= s->storage_deleters[i] == storage_deleter;
    if (!known) {
        if (s->build_count == TB_MAX_BUILDS) {
            *why = "too many builds of tensor_blob loaded in this VM";
            return 0;
        }
        s->storage_deleters[s->build_count] = storage_deleter;
        /* Readers on other threads see the entry before the count. */
        __atomic_store_n(&s->build_count, s->build_count + 1, __ATOMIC_RELEASE);
    }
    tb_st = s;
    return 1;
}
