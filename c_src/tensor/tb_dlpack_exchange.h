/* What every NIF that exchanges DLPack does (the DLPack NIFs of
 * nif/tb_dlpack.c, the Python door of nif/tb_python.c), as C
 * functions called with C arguments: an export's checks, and the import
 * of a managed tensor into a tensor whose storage calls its deleter. */
#ifndef TB_DLPACK_EXCHANGE_H
#define TB_DLPACK_EXCHANGE_H

#include <erl_nif.h>

#include "tb_dlpack_check.h"
#include "tb_dlpack_device.h"
#include "tb_tensor.h"

/* ---- Exports ------------------------------------------------------------ */

/* to_dlpack's checks of a tensor about to be exported: the version it asks
 * for against its read-only memory (*read_only is set when the tensor is
 * read-only), and, off the host or with a stream, the stream contract. 1,
 * or 0 with *exc set. */
int tb_dlpack_export_checks(ErlNifEnv *env, const tb_tensor_desc *d, int versioned, int *read_only, ERL_NIF_TERM stream,
                            ERL_NIF_TERM *exc);

/* ---- Imports ------------------------------------------------------------ */

/* Where an import's producer's deleter runs: at once, on the release
 * thread, or there inside its hold of Python's GIL (tb_release.h). */
typedef enum { TB_DEFER_NO = 0, TB_DEFER = 1, TB_DEFER_PYTHON = 2 } tb_defer;

/* How one import goes. */
typedef struct {
    int read_only;     /* the tensor is read-only whatever the flags say */
    tb_defer deferred; /* where the producer's deleter runs */
    int owned;         /* the caller took the managed tensor out of a capsule: its deleter is ours to call */
    int claimed;       /* what an address of ours was handed out as (a TB_HANDED_ value), else TB_HANDED_NO */
    const tb_dlpack_stream *stream;
} tb_dlpack_import_how;

/* Imports the managed tensor m (versioned or legacy): the tensor over its
 * memory, whose storage calls the producer's deleter once, when libtorch
 * frees it; or the raised error (return it at once), m released first when
 * the import owns it (how->owned, or recognized as DLPack by the checks). */
ERL_NIF_TERM tb_dlpack_import(ErlNifEnv *env, void *m, int versioned, const tb_dlpack_import_how *how);

/* A managed tensor an import refused before reading it, released as the
 * import says. */
void tb_dlpack_release_as(void *managed, int versioned, tb_defer deferred);

/* The reason of the error about a DLPack tensor that fails the checks. */
tb_reason tb_dlpack_status_reason(tb_dlc_status status);

/* Imports whose producer's deleter runs on the release thread (foreign
 * memory this VM holds, as Python's) and has not run yet: live, or queued
 * there. */
long tb_dlpack_deferred(void);

#endif
