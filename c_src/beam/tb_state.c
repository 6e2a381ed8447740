#define _GNU_SOURCE /* dl_iterate_phdr, RTLD_NOLOAD */
#include "tb_state.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

tb_state *tb_library_state;

/* The one symbol a build exports besides nif_init: where a later build
 * finds the state, whatever became of this build's module. Builds are
 * never unmapped (tb_nif.c), so the address stays valid. */
__attribute__((visibility("default"))) tb_state *tensor_blob_state_anchor;

typedef struct {
    const char *self; /* this build's file */
    tb_state *found;
} anchor_search;

static int search_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    anchor_search *search = arg;
    const char *name = info->dlpi_name;
    if (!name || !*name || strcmp(name, search->self) == 0)
        return 0;
    void *handle = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle)
        return 0;
    tb_state **anchor = dlsym(handle, "tensor_blob_state_anchor");
    if (anchor && *anchor)
        search->found = *anchor;
    dlclose(handle);
    return search->found != NULL;
}

static tb_state *earlier_build_state(void)
{
    Dl_info me;
    if (!dladdr((void *)&tensor_blob_state_anchor, &me) || !me.dli_fname)
        return NULL;
    anchor_search search = {.self = me.dli_fname, .found = NULL};
    dl_iterate_phdr(search_object, &search);
    return search.found;
}

tb_load_failure tb_state_load(void *old, void (*storage_deleter)(void *))
{
    tb_state *s = old ? old : tb_library_state ? tb_library_state : earlier_build_state();
    if (s && s->abi != TB_ABI)
        return TB_LOAD_ABI;
    if (!s) {
        /* Never freed: every later build takes it over. Aligned to the
         * cache line its shards and counters are laid out by. */
        char *block = tb_load_fault(TB_LOAD_NO_MEMORY) ? NULL : enif_alloc(sizeof *s + 63);
        if (!block)
            return TB_LOAD_NO_MEMORY;
        s = (tb_state *)(((uintptr_t)block + 63) & ~(uintptr_t)63);
        memset(s, 0, sizeof *s);
        s->abi = TB_ABI;
        if (tb_load_fault(TB_LOAD_NO_MUTEX) || !tb_registry_init(&s->registry)) {
            enif_free(block);
            return TB_LOAD_NO_MUTEX;
        }
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
    tb_library_state = s;
    tb_stripe_load(&s->thread_numbers);
    __atomic_store_n(&tensor_blob_state_anchor, s, __ATOMIC_RELEASE);
    return TB_LOAD_OK;
}
