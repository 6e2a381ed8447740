/* What a runtime is: the functions a runtime's unit fills, as
 * tb_runtime_<name> (tb_runtime.h asks them, by the device table's
 * TB_RUNTIMES). Below the runtimes' units, so that each includes it
 * without including the unit that names them all. */
#ifndef TB_RUNTIME_API_H
#define TB_RUNTIME_API_H

#include <stdint.h>

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

#endif
