/* Sharing CPU tensors between OS processes through shared-memory regions,
 * in two formats: POSIX (the data from the first byte) and PyTorch's CPU
 * sharing format (the `file_system` strategy: a 64-byte header whose first
 * int counts the mappings, then the data; whoever drops the last one
 * unlinks the name). One unit for both, parameterised by the header and
 * whether it is counted.
 *
 * A plain region's name lives while its creator's mapping does (or until
 * its reaper removes it, when the VM dies first). A PyTorch-format region
 * lives while any holder's count does; what a VM holds is in its journal
 * (tb_shm_owner.h), which its reaper releases when the VM dies. PyTorch's
 * names are /torch_<pid>_<n>_<k>; ours /torch_tensor_blob.<token>.<n>. */
#ifndef TB_SHM_H
#define TB_SHM_H

#include <erl_nif.h>

/* At load: releases what creators that are gone left. */
void tb_shm_load(void);

/* The region NIFs (ipc_* and torch_shm_*) are in the list of beam/tb_nifs.h. */

#endif
