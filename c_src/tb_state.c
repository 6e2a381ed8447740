#include "tb_state.h"

tb_state *tb_st;

static void list_init(tb_range *head)
{
    head->prev = head->next = head;
}

tb_load_failure tb_state_load(void *old, void (*storage_deleter)(void *))
{
    tb_state *s = old;
    if (s && s->abi != TB_ABI)
        return TB_LOAD_ABI;
    if (!s) {
        /* Never freed: every later build takes it over. */
        s = tb_load_fault(TB_LOAD_NO_MEMORY) ? NULL : enif_alloc(sizeof *s);
        if (!s)
            return TB_LOAD_NO_MEMORY;
        *s = (tb_state){.abi = TB_ABI};
        s->lock = tb_load_fault(TB_LOAD_NO_MUTEX) ? NULL : enif_mutex_create("tensor_blob_memory");
        if (!s->lock) {
            enif_free(s);
            return TB_LOAD_NO_MUTEX;
        }
        list_init(&s->frozen_files);
        list_init(&s->writing);
    }
    int known = 0;
    for (size_t i = 0; i < s->build_count; i++)
        known |= s->storage_deleters[i] == storage_deleter;
    if (!known) {
        if (s->build_count == TB_MAX_BUILDS)
            return TB_LOAD_TOO_MANY_BUILDS;
        s->storage_deleters[s->build_count] = storage_deleter;
        /* Readers on other threads see the entry before the count. */
        __atomic_store_n(&s->build_count, s->build_count + 1, __ATOMIC_RELEASE);
    }
    tb_st = s;
    return TB_LOAD_OK;
}
