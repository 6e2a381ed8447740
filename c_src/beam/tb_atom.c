#include "tb_atom.h"

tb_atom_table tb_atoms;

void tb_atom_load(ErlNifEnv *env)
{
    tb_atom_table *a = &tb_atoms;
#define TB_ATOM_MAKE(name) a->name = enif_make_atom(env, #name);
#define TB_ATOM_SPELLED_MAKE(field, text) a->field = enif_make_atom(env, text);
    TB_ATOMS(TB_ATOM_MAKE)
    TB_ATOMS_SPELLED(TB_ATOM_SPELLED_MAKE)
#undef TB_ATOM_MAKE
#undef TB_ATOM_SPELLED_MAKE
    for (int i = 0; i < TB_DT_COUNT; i++)
        a->dtypes[i] = enif_make_atom(env, tb_dtypes[i].name);
    for (int t = 0; t < TB_DEVICE_COUNT; t++)
        a->devices[t] = enif_make_atom(env, tb_devices[t].name);
    for (int i = 0; i < TB_DLPACK_DEVICE_COUNT; i++)
        a->dlpack_devices[i] = enif_make_atom(env, tb_dlpack_devices[i].name);
}
