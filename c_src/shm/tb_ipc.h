/* Sharing CPU tensors between OS processes through POSIX shared memory. */
#ifndef TB_IPC_H
#define TB_IPC_H

#include <erl_nif.h>

/* At load: removes the names of creators that are gone. */
void tb_ipc_load(void);

#endif
