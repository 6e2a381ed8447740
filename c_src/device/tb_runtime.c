#include "tb_runtime.h"

/* Each runtime's unit defines its functions under the name the table
 * gives it; the host's is below. */
#define TB_RUNTIME_DECLARE(id, name, text) extern const tb_runtime tb_runtime_##name;
TB_RUNTIMES(TB_RUNTIME_DECLARE)
#undef TB_RUNTIME_DECLARE

static const tb_runtime *const runtimes[TB_RUNTIME_COUNT] = {
#define TB_RUNTIME_ADDRESS(id, name, text) [id] = &tb_runtime_##name,
    TB_RUNTIMES(TB_RUNTIME_ADDRESS)
#undef TB_RUNTIME_ADDRESS
};

static int no_devices(void)
{
    return 0;
}

static tb_mem_answer no_answer(uint64_t ptr)
{
    (void)ptr;
    return (tb_mem_answer){TB_MEM_UNKNOWN, -1, NULL};
}

const tb_runtime tb_runtime_host = {.device_count = no_devices, .ask = no_answer};

void tb_runtime_load(void)
{
    for (int r = 0; r < TB_RUNTIME_COUNT; r++)
        if (runtimes[r]->load)
            runtimes[r]->load();
}

const tb_runtime *tb_runtime_get(int runtime)
{
    return runtime >= 0 && runtime < TB_RUNTIME_COUNT ? runtimes[runtime] : &tb_runtime_host;
}

int tb_runtime_devices_anywhere(void)
{
    for (int r = 0; r < TB_RUNTIME_COUNT; r++)
        if (runtimes[r]->device_count() > 0)
            return 1;
    return 0;
}

/* The runtimes to ask about memory of `own` (the declared device's
 * runtime, or the DLPack row's): that one, or for host memory every other
 * runtime, each of which must not place it on its devices. */
static int asks(int own, int r)
{
    return own == TB_RUNTIME_HOST ? r != TB_RUNTIME_HOST : r == own;
}

int tb_runtime_check_pointer(uint64_t ptr, const tb_device *declared, char *why, size_t why_size)
{
    int own = tb_device_runtime(declared->type);
    for (int r = 0; r < TB_RUNTIME_COUNT; r++) {
        if (!asks(own, r))
            continue;
        int count = runtimes[r]->device_count();
        tb_mem_answer a = {TB_MEM_UNKNOWN, -1, NULL};
        if (tb_devmem_needs_answer(declared->type, declared->index, count))
            a = runtimes[r]->ask(ptr);
        if (!tb_devmem_verdict(declared->type, declared->index, r, count, &a, why, why_size))
            return 0;
    }
    return 1;
}

int tb_runtime_check_dlpack_pointer(int32_t dl_type, int32_t dl_id, uint64_t ptr, char *why, size_t why_size)
{
    tb_dl_placement place;
    tb_devmem_dlpack_placement(dl_type, dl_id, &place);
    for (int r = 0; r < TB_RUNTIME_COUNT; r++) {
        if (!asks(place.checker, r))
            continue;
        int count = runtimes[r]->device_count();
        tb_mem_answer a = {TB_MEM_UNKNOWN, -1, NULL};
        if (tb_devmem_dlpack_needs_answer(dl_type, dl_id, count))
            a = runtimes[r]->ask(ptr);
        if (!tb_devmem_dlpack_verdict(dl_type, dl_id, r, count, &a, why, why_size))
            return 0;
    }
    return 1;
}
