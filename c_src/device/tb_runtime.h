/* The runtimes that serve memory (TB_RUNTIMES, tb_device.h), each a set of
 * functions that its own unit defines as tb_runtime_<name>: the devices it
 * sees, what it knows of a pointer, and the stream contract (tb_stream.h)
 * on its devices. The decisions over its answers are tb_devmem's; this
 * unit asks the runtimes the device table names, so that a runtime is its
 * unit and its lines in the table: nothing above names one. It sits above
 * the runtimes' units, which fill tb_runtime_api.h's table below them. No
 * BEAM, no libtorch.
 *
 * The host's runtime (TB_RUNTIME_HOST) is defined here: it sees no device
 * and has no streams. */
#ifndef TB_RUNTIME_H
#define TB_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "tb_device.h"
#include "tb_runtime_api.h"

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
