/* The runtimes that serve memory (TB_RUNTIMES, tb_device.h), each a set of
 * functions that its own unit defines as tb_runtime_<name>: the devices it
 * sees, what it knows of a pointer, and the stream contract (tb_stream.h)
 * on its devices. The decisions over its answers are tb_devmem's; this
 * unit asks the runtimes the device table names, so that a runtime is its
 * unit and its lines in the table: nothing above names one. No BEAM, no
 * libtorch.
 *
 * The host's runtime (TB_RUNTIME_HOST) is defined here: it sees no device
 * and has no streams. */
#ifndef TB_RUNTIME_H
#define TB_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "tb_device.h"
#include "tb_devmem.h"
#include "tb_stream.h"

typedef struct {
    /* Opens the runtime at load, or NULL: it must load, and answer, on a
     * machine without its driver or devices. */
    void (*load)(void);
    /* The devices it sees; 0 without a driver or a device. */
    int (*device_count)(void);
    /* What it knows of ptr (TB_MEM_UNKNOWN when it cannot tell). */
    tb_mem_answer (*ask)(uint64_t ptr);
    /* The stream contract, each NULL or what failed (see tb_stream.h):
     * an export's consumer waits for libtorch's stream of `device`; an
     * import's libtorch stream waits for the producer's; an import into
     * host memory (page-locked) waits on the calling thread. NULL
     * functions where the runtime has no streams (the host's). */
    const char *(*stream_export)(int device, const tb_stream *consumer);
    const char *(*stream_import)(int device, const tb_stream *producer);
    const char *(*stream_host_wait)(int device, const tb_stream *producer);
    /* Why a stream to synchronize with is refused in this build (it has
     * no calls to order work with), or NULL. */
    const char *streams_refused;
} tb_runtime;

/* Opens every runtime (at load). */
void tb_runtime_load(void);

/* The functions of a runtime (TB_RUNTIME_*); the host's for none. */
const tb_runtime *tb_runtime_get(int runtime);

/* 1 when some runtime sees a device: then host memory is asked about. */
int tb_runtime_devices_anywhere(void);

/* from_blob's pointer check: 1 when the `bytes` at ptr may be viewed as
 * the declared device, asking its runtime (or, for host memory, every
 * runtime that sees a device); otherwise 0 and why. */
int tb_runtime_check_pointer(uint64_t ptr, const tb_device *declared, char *why, size_t why_size);

/* A DLPack import's pointer check, by the code's row of TB_DLPACK_DEVICES:
 * asks the runtime the row names (or, for host memory, every runtime that
 * sees a device); 0 and why when refused. */
int tb_runtime_check_dlpack_pointer(int32_t dl_type, int32_t dl_id, uint64_t ptr, char *why, size_t why_size);

#endif
