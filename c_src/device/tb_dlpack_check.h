/* Validation of a DLPack managed tensor handed to us for import.
 * Pure C: no BEAM, no libtorch; unit-tested in c_test/test_dlpack.c.
 *
 * Besides "is it valid", a check answers "do we own it now": whether the
 * structure is recognized well enough that its deleter may be trusted, so
 * that a consumer that refuses it must still call the deleter (as the DLPack
 * spec asks of a consumer that does not need a tensor). A structure that is
 * not recognized is never called into: its deleter field may be garbage. */
#ifndef TB_DLPACK_CHECK_H
#define TB_DLPACK_CHECK_H

#include <stdint.h>

#include "tb_dtype.h"
#include "tb_layout.h"
#include "tensor_blob_dlpack.h"

typedef enum {
    TB_DLC_OK = 0,
    TB_DLC_NOT_VERSIONED,      /* version header no DLPack version can have */
    TB_DLC_MAJOR_VERSION,      /* a major version other than 1 */
    TB_DLC_UNKNOWN_FLAGS,      /* flag bits DLPack 1.3 does not define */
    TB_DLC_NDIM,               /* ndim < 0 or > TB_MAX_DIMS */
    TB_DLC_UNKNOWN_DEVICE,     /* not a DLDeviceType of DLPack 1.3 */
    TB_DLC_UNSUPPORTED_DEVICE, /* not kDLCPU, kDLCUDA, kDLCUDAHost or kDLCUDAManaged */
    TB_DLC_UNKNOWN_DTYPE,      /* not a DLDataTypeCode of DLPack 1.3 */
    TB_DLC_LANES,              /* lanes != 1 (vector types) */
    TB_DLC_UNSUPPORTED_DTYPE,  /* a {code, bits} the dtype table lacks */
    TB_DLC_NULL_SHAPE,         /* ndim > 0 and shape NULL */
    TB_DLC_BYTE_OFFSET,        /* data + byte_offset overflows */
    TB_DLC_LAYOUT              /* tb_layout_check refused: see spec */
} tb_dlc_status;

typedef struct {
    tb_dlc_status status;
    /* 1 when the structure was recognized as a DLPack tensor of the kind
     * checked: from here on its deleter must run exactly once, whether the
     * import goes on or not. 0: nothing in it may be called. */
    int owned;
    tb_DLPackVersion version; /* {0, 0} for a legacy tensor */
    uint64_t flags;           /* 0 for a legacy tensor */
    int32_t device_type, device_id;
    tb_DLDataType dl_dtype;
    int32_t ndim;
    /* Set when status is TB_DLC_OK (dtype and layout also when LAYOUT):
     * ptr is data + byte_offset, strides are filled in when NULL (row-major),
     * and strides of dimensions that address nothing are made non-negative. */
    tb_dtype_id dtype;
    tb_layout layout;
    tb_layout_result spec;
} tb_dlpack_checked;

/* The major versions whose deleter a consumer trusts when it cannot read the
 * rest: 1 (ours), and a small band above it for later majors. A larger or
 * zero "major" is what the first bytes of a legacy tensor, a data pointer,
 * look like: such a header is refused and nothing in it is called. */
#define TB_DLPACK_MAX_PLAUSIBLE_MAJOR 15u
#define TB_DLPACK_MAX_PLAUSIBLE_MINOR 255u

void tb_dlpack_check_versioned(const tb_DLManagedTensorVersioned *m, tb_dlpack_checked *out);
void tb_dlpack_check_legacy(const tb_DLManagedTensor *m, tb_dlpack_checked *out);

/* Names of codes for messages ("kDLCUDA"); NULL for unknown codes. */
const char *tb_dlpack_device_name(int32_t device_type);
/* The DLPack devices an import takes, as a message lists them: "kDLCPU,
 * kDLCUDA, kDLCUDAHost and kDLCUDAManaged" (TB_DLPACK_DEVICES). */
const char *tb_dlpack_imported_devices(void);
const char *tb_dlpack_type_code_name(unsigned code);

/* ---- DLPack 1.3's C exchange API (tensor_blob_dlpack.h) ---------------- */

/* What the search of an exchange API table's chain answers. */
typedef enum {
    TB_XAPI_OK = 0,
    TB_XAPI_NO_TABLE,   /* the capsule holds NULL */
    TB_XAPI_VERSION,    /* no table of the chain is of major version 1, minor 3 or later */
    TB_XAPI_NULL_ENTRY, /* the table of a supported version lacks an entry it must have */
    TB_XAPI_STATUS_COUNT
} tb_xapi_status;

/* How many older tables the search walks to at most: a chain is a few
 * versions long, and a loop in a foreign one must end. */
#define TB_XAPI_MAX_CHAIN 16

/* Finds, in the chain of tables that starts at table (a capsule's
 * pointer: NULL allowed), the first of a version this library calls (major
 * 1, minor >= 3) and checks it: *out is set when TB_XAPI_OK. Nothing in a
 * table is ever called here. */
tb_xapi_status tb_dlpack_exchange_api_find(const void *table, const tb_DLPackExchangeAPI **out);

/* A short phrase for a search's answer, for error messages. */
const char *tb_dlpack_xapi_text(tb_xapi_status status);

/* A short phrase for a status, for error messages. */
const char *tb_dlpack_status_text(tb_dlc_status status);

#endif
