/* PyTorch's CPU sharing format (the `file_system` strategy): a POSIX
 * shared-memory region whose first 64 bytes hold a reference count (an
 * atomic int, the rest padding) and whose data follows. Every process that
 * maps it holds one reference; whoever drops the last one unlinks the name.
 * PyTorch's names are /torch_<pid>_<n>_<k>; ours /torch_tensor_blob.<pid>.<n>.<salt>. */
#ifndef TB_TORCH_SHM_H
#define TB_TORCH_SHM_H

#include <erl_nif.h>

/* The bytes before the data: PyTorch's map_alloc_alignment. */
#define TB_TORCH_SHM_HEADER 64

#endif
