/* The CUDA NIFs: cuda_info, cuda_synchronize, cuda_memory, over the
 * runtime (tb_cuda_runtime). */

#include "tb_cuda_runtime.h"
#include "tb_nifs.h"
#include "tb_term.h"
#include "torch_shim.h"

/* cuda_info() -> #{built, devices, libtorch, runtime, runtime_path, ipc_mappings} */
ERL_NIF_TERM tb_nif_cuda_info(TB_NIF_PARAMS)
{
    (void)argv;
    ERL_NIF_TERM keys[] = {enif_make_atom(env, "built"),        enif_make_atom(env, "devices"),
                           enif_make_atom(env, "ipc_mappings"), enif_make_atom(env, "libtorch"),
                           enif_make_atom(env, "runtime"),      enif_make_atom(env, "runtime_path")};
    int built = TB_CUDA, runtime = tb_cuda_runtime_loaded();
    ERL_NIF_TERM values[] = {built ? tb_atoms.true_ : tb_atoms.false_,
                             enif_make_int(env, tb_cuda_device_count()),
                             enif_make_long(env, tb_cuda_mappings()),
                             tb_shim_cuda_built() ? tb_atoms.true_ : tb_atoms.false_,
                             runtime ? tb_atoms.true_ : tb_atoms.false_,
                             tb_cuda_runtime_path() ? tb_make_string(env, tb_cuda_runtime_path()) : tb_atoms.nil};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, 6, &map);
    return map;
}

/* cuda_synchronize(Index): waits for the device's work; registered on a
 * dirty I/O scheduler in the function table. */
ERL_NIF_TERM tb_nif_cuda_synchronize(TB_NIF_PARAMS)
{
    int index;
    int count = tb_cuda_device_count();
    if (!enif_get_int(env, argv[0], &index) || index < 0)
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "device", "device: expected a CUDA device index, got %T",
                               argv[0]);
    if (count == 0)
        return tb_raise_error(env, TB_WHY_NO_DEVICE, NULL, "cuda: no CUDA device here (no runtime, driver or GPU)");
    if (index >= count)
        return tb_raise_badarg(env, TB_WHY_NO_DEVICE, "device", "device: CUDA device %d does not exist (%d found)",
                               index, count);
    const char *e = tb_cuda_synchronize(index);
    if (e)
        return tb_raise_error(env, TB_WHY_RUNTIME, NULL, "cuda: synchronizing device %d failed: %s", index, e);
    return tb_atoms.ok;
}

ERL_NIF_TERM tb_nif_cuda_memory(TB_NIF_PARAMS)
{
    ErlNifUInt64 ptr;
    if (!enif_get_uint64(env, argv[0], &ptr))
        return tb_raise_badarg(env, TB_WHY_BAD_VALUE, "ptr", "ptr: expected a non-negative integer address, got %T",
                               argv[0]);
    if (tb_cuda_device_count() == 0)
        return tb_atoms.unknown; /* no runtime, driver or GPU to tell */
    tb_mem_answer a = tb_cuda_ask(ptr);
    switch (a.type) {
    case TB_MEM_HOST: return tb_atoms.cpu;
    case TB_MEM_PAGE_LOCKED_HOST: return tb_atoms.cuda_host;
    case TB_MEM_DEVICE: return tb_atoms.cuda;
    case TB_MEM_MANAGED: return tb_atoms.cuda_managed;
    default: return tb_atoms.unknown;
    }
}
