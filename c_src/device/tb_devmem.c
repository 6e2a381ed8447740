#include "tb_devmem.h"

#include <stdio.h>

#include "tb_device.h"

const char *tb_devmem_type_name(tb_mem_type type)
{
    switch (type) {
    case TB_MEM_HOST: return "host";
    case TB_MEM_PAGE_LOCKED_HOST: return "page-locked host";
    case TB_MEM_DEVICE: return "device";
    case TB_MEM_MANAGED: return "managed";
    default: return "unknown";
    }
}

int tb_devmem_needs_answer(int declared_type, int declared_index, int device_count)
{
    /* Asking costs a runtime call: only where a device could own the pointer. */
    if (tb_device_runtime(declared_type) == TB_RUNTIME_HOST)
        return device_count > 0;
    return declared_index >= 0 && declared_index < device_count;
}

/* How messages name a runtime: "CUDA". */
static const char *named(int runtime)
{
    return runtime >= 0 && runtime < TB_RUNTIME_COUNT ? tb_runtime_names[runtime] : "?";
}

static int no_such_device(int runtime, int index, int device_count, char *why, size_t why_size)
{
    snprintf(why, why_size, "%s device %d does not exist (%d found)", named(runtime), index, device_count);
    return 0;
}

int tb_devmem_verdict(int declared_type, int declared_index, int asked, int device_count, const tb_mem_answer *a,
                      char *why, size_t why_size)
{
    int host = tb_device_runtime(declared_type) == TB_RUNTIME_HOST;
    const char *rt = named(asked);
    if (!host && (declared_index < 0 || declared_index >= device_count))
        return no_such_device(asked, declared_index, device_count, why, why_size);
    if (!tb_devmem_needs_answer(declared_type, declared_index, device_count))
        return 1;
    if (a->type == TB_MEM_UNKNOWN && a->error && !host) {
        /* A freed device pointer, for one: say what the runtime said. */
        snprintf(why, why_size, "the %s runtime does not know it as memory of %s device %d: %s", rt, rt, declared_index,
                 a->error);
        return 0;
    }
    if (a->type == TB_MEM_UNKNOWN || a->type == TB_MEM_MANAGED)
        return 1; /* managed memory is valid on the host and on its device */
    if (host) {
        if (a->type != TB_MEM_DEVICE)
            return 1;
        snprintf(why, why_size, "memory of %s device %d, declared as %s memory", rt, a->device,
                 tb_devices[declared_type].c10_name);
        return 0;
    }
    if (a->type == TB_MEM_HOST) {
        /* The runtime answers "unregistered" for plain host memory and for
         * device memory already freed alike: name both. */
        snprintf(why, why_size,
                 "memory no %s device owns (host memory, or device memory already freed), declared as memory of "
                 "%s device %d",
                 rt, rt, declared_index);
        return 0;
    }
    if (a->type != TB_MEM_DEVICE) {
        snprintf(why, why_size, "%s memory, declared as memory of %s device %d", tb_devmem_type_name(a->type), rt,
                 declared_index);
        return 0;
    }
    if (a->device != declared_index) {
        snprintf(why, why_size, "memory of %s device %d, declared as memory of %s device %d", rt, a->device, rt,
                 declared_index);
        return 0;
    }
    return 1;
}

/* The row of a DLPack device code; an import reaches here only with one
 * the table takes (tb_dlpack_check), else the first row. */
static const tb_dlpack_device_row *dl_row(int32_t dl_type)
{
    int i = tb_dlpack_device_row_of(dl_type);
    return &tb_dlpack_devices[i < 0 ? 0 : i];
}

void tb_devmem_dlpack_placement(int32_t dl_type, int32_t dl_id, tb_dl_placement *out)
{
    const tb_dlpack_device_row *row = dl_row(dl_type);
    int type = row->device;
    *out = (tb_dl_placement){.type = type,
                             .index = tb_device_indexed(type) ? dl_id : 0,
                             .runtime = tb_device_runtime(type),
                             .checker = row->runtime};
}

int tb_devmem_dlpack_needs_answer(int32_t dl_type, int32_t dl_id, int device_count)
{
    tb_dl_placement p;
    tb_devmem_dlpack_placement(dl_type, dl_id, &p);
    return tb_devmem_needs_answer(p.type, p.index, device_count);
}

int tb_devmem_dlpack_verdict(int32_t dl_type, int32_t dl_id, int asked, int device_count, const tb_mem_answer *a,
                             char *why, size_t why_size)
{
    tb_dl_placement p;
    tb_devmem_dlpack_placement(dl_type, dl_id, &p);
    const tb_dlpack_device_row *row = dl_row(dl_type);
    const char *rt = named(asked);
    switch (row->check) {
    case TB_DLCHECK_PAGE_LOCKED:
        /* Host-readable unless the runtime says it is on a device. */
        if (tb_devmem_needs_answer(p.type, p.index, device_count) && a->type == TB_MEM_DEVICE) {
            snprintf(why, why_size, "memory of %s device %d, labelled %s (page-locked host memory)", rt, a->device,
                     row->dlpack_name);
            return 0;
        }
        return 1;
    case TB_DLCHECK_MANAGED:
        if (dl_id < 0 || dl_id >= device_count)
            return no_such_device(asked, dl_id, device_count, why, why_size);
        if (a->type == TB_MEM_MANAGED)
            return 1;
        if (a->type == TB_MEM_UNKNOWN)
            snprintf(why, why_size, "the %s runtime does not know it as managed memory: %s", rt,
                     a->error ? a->error : "no answer");
        else
            snprintf(why, why_size, "%s memory, labelled %s", tb_devmem_type_name(a->type), row->dlpack_name);
        return 0;
    default: /* TB_DLCHECK_HOST, TB_DLCHECK_DEVICE: as from_blob's */
        return tb_devmem_verdict(p.type, p.index, asked, device_count, a, why, why_size);
    }
}
