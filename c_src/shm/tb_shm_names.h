/* The names of the regions a VM creates, and how their creator's life is
 * judged; shared by the library and its reaper (tensor_blob_reaper.c), so
 * no BEAM here.
 *
 * A creator's names are "tensor_blob.<token>.<n>" in /dev/shm, where the
 * token is "<pid>-<64 random bits in hex>": the pid only helps a reader,
 * since pids belong to a PID namespace and /dev/shm may be shared across
 * namespaces. What says a creator lives is a lock: it holds flock(LOCK_EX)
 * on "tensor_blob.<token>.lock" for its whole life (the kernel drops it
 * when the process dies, however it dies). Whoever takes that lock may
 * remove the token's names: their creator is gone. */
#ifndef TB_SHM_NAMES_H
#define TB_SHM_NAMES_H

#include <stddef.h>

#define TB_SHM_DIR "/dev/shm"
#define TB_NAME_PREFIX "tensor_blob."
#define TB_LOCK_SUFFIX ".lock"

/* The length of the token s starts with ("<digits>-<16 hex>", then '.'),
 * or 0 when s is not a name of this form. */
size_t tb_shm_token_length(const char *s);

/* Removes every name of a token in the directory dir_fd, its lock last;
 * returns how many names other than the lock were removed. */
int tb_shm_unlink_token(int dir_fd, const char *token, size_t length);

#endif
