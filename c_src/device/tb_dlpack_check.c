#include "tb_dlpack_check.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "tb_device.h"

static const char *const device_names[TB_DLPACK_LAST_DEVICE_TYPE + 1] = {
    [tb_kDLCPU] = "kDLCPU",
    [tb_kDLCUDA] = "kDLCUDA",
    [tb_kDLCUDAHost] = "kDLCUDAHost",
    [tb_kDLOpenCL] = "kDLOpenCL",
    [tb_kDLVulkan] = "kDLVulkan",
    [tb_kDLMetal] = "kDLMetal",
    [tb_kDLVPI] = "kDLVPI",
    [tb_kDLROCM] = "kDLROCM",
    [tb_kDLROCMHost] = "kDLROCMHost",
    [tb_kDLExtDev] = "kDLExtDev",
    [tb_kDLCUDAManaged] = "kDLCUDAManaged",
    [tb_kDLOneAPI] = "kDLOneAPI",
    [tb_kDLWebGPU] = "kDLWebGPU",
    [tb_kDLHexagon] = "kDLHexagon",
    [tb_kDLMAIA] = "kDLMAIA",
    [tb_kDLTrn] = "kDLTrn",
};

static const char *const type_code_names[TB_DLPACK_LAST_TYPE_CODE + 1] = {
    [tb_kDLInt] = "kDLInt",
    [tb_kDLUInt] = "kDLUInt",
    [tb_kDLFloat] = "kDLFloat",
    [tb_kDLOpaqueHandle] = "kDLOpaqueHandle",
    [tb_kDLBfloat] = "kDLBfloat",
    [tb_kDLComplex] = "kDLComplex",
    [tb_kDLBool] = "kDLBool",
    [tb_kDLFloat8_e3m4] = "kDLFloat8_e3m4",
    [tb_kDLFloat8_e4m3] = "kDLFloat8_e4m3",
    [tb_kDLFloat8_e4m3b11fnuz] = "kDLFloat8_e4m3b11fnuz",
    [tb_kDLFloat8_e4m3fn] = "kDLFloat8_e4m3fn",
    [tb_kDLFloat8_e4m3fnuz] = "kDLFloat8_e4m3fnuz",
    [tb_kDLFloat8_e5m2] = "kDLFloat8_e5m2",
    [tb_kDLFloat8_e5m2fnuz] = "kDLFloat8_e5m2fnuz",
    [tb_kDLFloat8_e8m0fnu] = "kDLFloat8_e8m0fnu",
    [tb_kDLFloat6_e2m3fn] = "kDLFloat6_e2m3fn",
    [tb_kDLFloat6_e3m2fn] = "kDLFloat6_e3m2fn",
    [tb_kDLFloat4_e2m1fn] = "kDLFloat4_e2m1fn",
};

const char *tb_dlpack_device_name(int32_t device_type)
{
    if (device_type < 0 || device_type > TB_DLPACK_LAST_DEVICE_TYPE)
        return NULL;
    return device_names[device_type];
}

/* The DLPack devices an import takes, as messages list them ("kDLCPU,
 * kDLCUDA, kDLCUDAHost and kDLCUDAManaged"): made once from
 * TB_DLPACK_DEVICES. */
static char imported[200], unsupported_text[240];
static pthread_once_t imported_once = PTHREAD_ONCE_INIT;

static void list_imported(void)
{
    size_t n = 0;
    for (int i = 0; i < TB_DLPACK_DEVICE_COUNT && n < sizeof imported; i++) {
        const char *sep = i == 0 ? "" : i == TB_DLPACK_DEVICE_COUNT - 1 ? " and " : ", ";
        const char *name = tb_dlpack_device_name(tb_dlpack_devices[i].code);
        n += snprintf(imported + n, sizeof imported - n, "%s%s", sep, name ? name : "?");
    }
    snprintf(unsupported_text, sizeof unsupported_text, "only %s tensors can be imported", imported);
}

const char *tb_dlpack_imported_devices(void)
{
    pthread_once(&imported_once, list_imported);
    return imported;
}

const char *tb_dlpack_type_code_name(unsigned code)
{
    return code <= TB_DLPACK_LAST_TYPE_CODE ? type_code_names[code] : NULL;
}

/* Fields whose values tell a DLTensor from arbitrary bytes. */
static int looks_like_dltensor(const tb_DLTensor *t)
{
    return t->ndim >= 0 && t->ndim <= TB_MAX_DIMS && tb_dlpack_device_name(t->device.device_type) &&
           tb_dlpack_type_code_name(t->dtype.code);
}

/* What the fields before the layout say: TB_DLC_OK, with out->dtype, when
 * the tensor is one this library can read. */
static tb_dlc_status fields_status(const tb_DLTensor *t, tb_dlpack_checked *out)
{
    if (t->ndim < 0 || t->ndim > TB_MAX_DIMS)
        return TB_DLC_NDIM;
    if (!tb_dlpack_device_name(t->device.device_type))
        return TB_DLC_UNKNOWN_DEVICE;
    /* The device codes of TB_DLPACK_DEVICES (tb_device.h): where libtorch
     * sees each, and what the runtime must confirm, is tb_devmem's; a
     * producer still writing on a stream names it (tb_stream). Other
     * devices are refused. */
    if (tb_dlpack_device_row_of(t->device.device_type) < 0)
        return TB_DLC_UNSUPPORTED_DEVICE;
    if (!tb_dlpack_type_code_name(t->dtype.code))
        return TB_DLC_UNKNOWN_DTYPE;
    /* Lanes: one, but for a packed dtype of the table (two 4-bit floats). */
    if (!tb_dtype_from_dlpack(t->dtype.code, t->dtype.bits, t->dtype.lanes, &out->dtype))
        return t->dtype.lanes != 1 ? TB_DLC_LANES : TB_DLC_UNSUPPORTED_DTYPE;
    if (t->ndim > 0 && !t->shape)
        return TB_DLC_NULL_SHAPE;
    return TB_DLC_OK;
}

/* The shape and strides into l. */
static void copy_shape_and_strides(const tb_DLTensor *t, tb_layout *l)
{
    int no_elements = 0;
    for (int i = 0; i < t->ndim; i++) {
        l->shape[i] = t->shape[i];
        no_elements |= t->shape[i] == 0;
    }
    /* NULL strides: row-major (allowed before 1.2, still sent by some). An
     * overflow here is a shape overflow; tb_layout_check names it. */
    int64_t row_major[TB_MAX_DIMS];
    int row_major_ok = tb_row_major_strides(t->ndim, l->shape, row_major);
    for (int i = 0; i < t->ndim; i++) {
        int64_t s = t->strides ? t->strides[i] : row_major[i];
        /* A stride that addresses nothing (a dimension of size 1, or a
         * tensor without elements) may be anything, even negative: keep
         * libtorch's invariant by giving it the row-major value. */
        if (s < 0 && (l->shape[i] == 1 || no_elements))
            s = row_major_ok ? row_major[i] : 0;
        l->strides[i] = s;
    }
}

static void check_tensor(const tb_DLTensor *t, tb_dlpack_checked *out)
{
    out->device_type = t->device.device_type;
    out->device_id = t->device.device_id;
    out->dl_dtype = t->dtype;
    out->ndim = t->ndim;
    out->status = fields_status(t, out);
    if (out->status != TB_DLC_OK)
        return;
    tb_layout *l = &out->layout;
    l->ndim = t->ndim;
    l->element_size = tb_dtypes[out->dtype].element_size;
    copy_shape_and_strides(t, l);
    uint64_t ptr;
    if (__builtin_add_overflow((uint64_t)(uintptr_t)t->data, t->byte_offset, &ptr)) {
        out->status = TB_DLC_BYTE_OFFSET;
        return;
    }
    l->ptr = ptr;
    out->spec = tb_layout_check(l);
    out->status = out->spec.status == TB_LAYOUT_OK ? TB_DLC_OK : TB_DLC_LAYOUT;
}

static void clear(tb_dlpack_checked *out)
{
    /* The layout arrays are large and filled as needed: clear the rest. */
    out->status = TB_DLC_OK;
    out->owned = 0;
    out->version.major = out->version.minor = 0;
    out->flags = 0;
    out->device_type = out->device_id = 0;
    memset(&out->dl_dtype, 0, sizeof out->dl_dtype);
    out->ndim = 0;
    out->dtype = TB_DT_UINT8;
    out->layout.ndim = 0;
    out->layout.ptr = 0;
    out->layout.element_size = 1;
    out->spec.status = TB_LAYOUT_OK;
    out->spec.dim = -1;
    out->spec.numel = 0;
    out->spec.byte_size = 0;
}

void tb_dlpack_check_versioned(const tb_DLManagedTensorVersioned *m, tb_dlpack_checked *out)
{
    clear(out);
    out->version = m->version;
    if (m->version.major != TB_DLPACK_MAJOR_VERSION) {
        /* The spec: a consumer that does not know the major version calls
         * the deleter, and touches nothing else. Only when the header can
         * be a version at all. */
        int plausible = m->version.major > TB_DLPACK_MAJOR_VERSION &&
                        m->version.major <= TB_DLPACK_MAX_PLAUSIBLE_MAJOR &&
                        m->version.minor <= TB_DLPACK_MAX_PLAUSIBLE_MINOR;
        out->status = plausible ? TB_DLC_MAJOR_VERSION : TB_DLC_NOT_VERSIONED;
        out->owned = plausible;
        return;
    }
    /* Any 1.x minor: later minors only add codes, and unknown codes are
     * refused below. */
    out->owned = 1;
    out->flags = m->flags;
    if (m->flags & ~TB_DLPACK_KNOWN_FLAGS) {
        out->status = TB_DLC_UNKNOWN_FLAGS;
        return;
    }
    check_tensor(&m->dl_tensor, out);
}

void tb_dlpack_check_legacy(const tb_DLManagedTensor *m, tb_dlpack_checked *out)
{
    clear(out);
    /* No header: only plausible field values tell a legacy tensor from
     * something else (a versioned one passed as legacy, say). */
    out->owned = looks_like_dltensor(&m->dl_tensor);
    check_tensor(&m->dl_tensor, out);
}

const char *tb_dlpack_status_text(tb_dlc_status status)
{
    switch (status) {
    case TB_DLC_OK: return "ok";
    case TB_DLC_NOT_VERSIONED: return "not a DLManagedTensorVersioned (no DLPack version starts this way)";
    case TB_DLC_MAJOR_VERSION: return "unsupported DLPack major version (this library reads 1.x)";
    case TB_DLC_UNKNOWN_FLAGS: return "flag bits DLPack 1.3 does not define";
    case TB_DLC_NDIM: return "ndim out of range (0 to 64)";
    case TB_DLC_UNKNOWN_DEVICE: return "unknown DLPack device type";
    case TB_DLC_UNSUPPORTED_DEVICE: tb_dlpack_imported_devices(); return unsupported_text;
    case TB_DLC_UNKNOWN_DTYPE: return "unknown DLPack type code";
    case TB_DLC_LANES: return "vector types (lanes != 1) are not supported";
    case TB_DLC_UNSUPPORTED_DTYPE: return "no dtype here has this DLPack {code, bits}";
    case TB_DLC_NULL_SHAPE: return "shape is NULL with ndim > 0";
    case TB_DLC_BYTE_OFFSET: return "data + byte_offset overflows 64 bits";
    case TB_DLC_LAYOUT: return "invalid layout";
    }
    return "invalid DLPack tensor";
}

/* ---- DLPack 1.3's C exchange API ------------------------------------------ */

static int supported_api(const tb_DLPackExchangeAPIHeader *h)
{
    return h->version.major == TB_DLPACK_MAJOR_VERSION && h->version.minor >= 3;
}

tb_xapi_status tb_dlpack_exchange_api_find(const void *table, const tb_DLPackExchangeAPI **out)
{
    *out = NULL;
    if (!table)
        return TB_XAPI_NO_TABLE;
    const tb_DLPackExchangeAPIHeader *h = table;
    for (int hops = 0; h && hops <= TB_XAPI_MAX_CHAIN && !supported_api(h); hops++)
        h = h->prev_api;
    if (!h || !supported_api(h))
        return TB_XAPI_VERSION;
    /* The header is the table's first field: the table of that version. */
    const tb_DLPackExchangeAPI *api = (const tb_DLPackExchangeAPI *)h;
    if (!api->managed_tensor_allocator || !api->managed_tensor_from_py_object_no_sync ||
        !api->managed_tensor_to_py_object_no_sync || !api->current_work_stream)
        return TB_XAPI_NULL_ENTRY;
    *out = api;
    return TB_XAPI_OK;
}

const char *tb_dlpack_xapi_text(tb_xapi_status status)
{
    static const char *const texts[TB_XAPI_STATUS_COUNT] = {
        [TB_XAPI_OK] = "a table this library calls",
        [TB_XAPI_NO_TABLE] = "a capsule holding NULL",
        [TB_XAPI_VERSION] = "no table of version 1.3 or a later 1.x in its chain",
        [TB_XAPI_NULL_ENTRY] = "a table lacking an entry DLPack 1.3 requires",
    };
    return (unsigned)status < TB_XAPI_STATUS_COUNT ? texts[status] : "an unknown answer";
}
