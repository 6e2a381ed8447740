/* Copies of memory that can vanish under a mapping.
 *
 * A shared-memory region is a file: another program can shrink it (or a
 * full tmpfs can refuse a page of a sparse one), and touching a page past
 * its end raises SIGBUS, which would kill the VM. The copies the library
 * makes of host memory run here, on the calling thread, with a SIGBUS
 * guard armed: a fault inside one of them ends that copy with an error
 * instead; so do the library's other touches of region memory (the
 * reference count in a PyTorch-format header, tb_fault_run). Any other SIGBUS goes to the handler that was installed before
 * (the default kills the process, as it would have). No BEAM, no libtorch:
 * the shim calls it too. */
#ifndef TB_FAULT_H
#define TB_FAULT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Installs the guard's SIGBUS handler once per build loaded (the NIF's
 * load does, and the reaper); 0 with errno
 * when sigaction fails. The handler is never removed: every build stays
 * mapped (tb_nif.c), and later handlers chain to it. */
int tb_fault_install(void);

/* Copies the elements of a strided tensor at base (sizes, strides in
 * elements of element_size bytes) to (to_dense) or from dense row-major
 * bytes. 1 when done; 0 when the memory vanished under the copy (SIGBUS):
 * the copy stopped part way. Without the handler installed, a fault kills
 * the process as before. */
int tb_fault_copy_strided(void *base, int ndim, const int64_t *sizes, const int64_t *strides, size_t element_size,
                          void *dense, int to_dense);

/* Runs fn(arg) on the calling thread with the guard armed: 1 when it ran
 * to its end, 0 when a fault in memory that vanished stopped it part way
 * (fn must leave nothing half done that matters: a lock held, memory
 * allocated). */
int tb_fault_run(void (*fn)(void *), void *arg);

#ifdef __cplusplus
}
#endif

#endif
