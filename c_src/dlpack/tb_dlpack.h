/* The DLPack imports (tb_dlpack.c): what the rest of the library asks of
 * them. The exports are tb_dlpack_export.h's. */
#ifndef TB_DLPACK_H
#define TB_DLPACK_H

/* Imports with defer_release (foreign memory this VM holds, as Python's)
 * whose producer's deleter has not run yet: live, or queued on the release
 * thread. */
long tb_dlpack_deferred(void);

#endif
