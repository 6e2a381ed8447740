/* What survives a hot upgrade: the live counters, the registry of guarded
 * memory, and the storage deleters of every build of the library loaded in
 * this VM. The first build loaded makes it; every later one takes it over,
 * however it was loaded (an upgrade hands it over as priv_data; a build
 * loaded after the module was deleted and purged finds it through the
 * exported anchor of an earlier build, still mapped), so a tensor made by
 * any build is counted, guarded and recognised by the others. A build
 * takes it over only with the same TB_ABI: the layouts of this struct, of
 * the resources and of tb_storage are the ABI; a change to any of them, or
 * to what a storage kind means, bumps it. */
#ifndef TB_STATE_H
#define TB_STATE_H

#include <erl_nif.h>
#include <stdint.h>

#include "tb_count.h"
#include "tb_handed.h"
#include "tb_load.h"
#include "tb_registry.h"
#include "tb_slots.h"
#include "tb_stripe.h"

/* 12: DLPack addresses handed out are kept in a set without a lock
 * first (tb_handed.h), the registry past its room; the live counts have
 * stripes owned by one thread, numbered across builds (tb_count.h); a
 * tensor resource keeps its description for exports (tb_tensor.h);
 * 11: a frozen range says who made its binary (tb_range's tag);
 * 10: the slots that carry words to an embedded Python (tb_slots.h), and
 * their resource type (nif/tb_python.c);
 * 9: a count of deferred DLPack imports (defer_release) in stats/0;
 * 8: DLPack addresses handed out are a kind of the registry, which any
 * build takes back (tb_dlpack_export.c's tb_export, up to its handed flag);
 * 7: one region container for both formats (tb_shm.c), read by the
 * name NIFs of every build;
 * 6: frozen memory is kept by thread (tb_registry.h);
 * 5: shared-memory regions and CUDA IPC mappings are two storage kinds;
 * 4: the registry is sharded by address, the state found across builds;
 * 3: read-only and frozen memory are interval sets; 2: a DLPack capsule
 * keeps its tensor resource */
#ifndef TB_ABI /* the load tests build one with another */
#define TB_ABI 12u
#endif
#define TB_MAX_BUILDS 16

typedef struct {
    uint32_t abi;
    tb_registry registry; /* guarded memory */
    tb_handed handed;     /* DLPack addresses handed out (before the registry) */
    tb_count tensors, pins, capsules, binary_views, deferred;
    tb_stripe_numbers thread_numbers; /* the threads' numbers, for every stripe (tb_stripe.h) */
    size_t build_count;
    void (*storage_deleters[TB_MAX_BUILDS])(void *); /* one per build */
    /* Words on their way to or from an embedded Python: every build's
     * code finds the same ones (TensorBlob.Python). */
    tb_slots python_slots;
} tb_state;

extern tb_state *tb_library_state;

/* load: the state handed over (old), else this build's own (a reload of
 * it), else an earlier build's found by its anchor, else a new one;
 * registers this build's storage deleter. TB_LOAD_OK, or why it cannot.
 * The VM loads one build at a time. */
tb_load_failure tb_state_load(void *old, void (*storage_deleter)(void *));

#endif
