/* What survives a hot upgrade: the live counters, the registry of guarded
 * memory, and the storage deleters of every build of the library loaded in
 * this VM. load makes it; upgrade hands it to the new build (priv_data), so
 * a tensor made by the old build is counted, guarded and recognised by the
 * new one. A build upgrades only from a build with the same TB_ABI: the
 * layouts of this struct, of the resources and of tb_storage are the ABI. */
#ifndef TB_STATE_H
#define TB_STATE_H

#include <erl_nif.h>
#include <stdint.h>

#include "tb_count.h"
#include "tb_intervals.h"
#include "tb_load.h"

#ifndef TB_ABI /* the load tests build one with another */
#define TB_ABI 4u /* 4: shared-memory regions and CUDA IPC mappings are two storage kinds; 3: read-only and frozen memory are interval sets; 2: a DLPack capsule keeps its tensor resource */
#endif
#define TB_MAX_BUILDS 16

typedef struct {
    uint32_t abi;
    ErlNifMutex *lock;    /* guards the lists, the set and binary_views */
    tb_range *frozen;     /* memory a binary shows: an interval set */
    tb_range frozen_files; /* those in a shared-memory region, by file: list head */
    tb_range *read_only;  /* memory never written through us: an interval set */
    tb_range writing;     /* write! calls in progress: list head */
    long binary_views;
    long read_only_ranges; /* ranges in read_only: read without the lock */
    tb_count tensors, pins, capsules;
    size_t build_count;
    void (*storage_deleters[TB_MAX_BUILDS])(void *); /* one per build */
} tb_state;

extern tb_state *tb_st;

/* load: a new state (old == NULL) or the old build's; registers this
 * build's storage deleter. TB_LOAD_OK, or why it cannot. */
tb_load_failure tb_state_load(void *old, void (*storage_deleter)(void *));

#endif
