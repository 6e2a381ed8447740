#include "tb_safetensors.h"

static const char *const error_texts[] = {
#define TB_ST_ERROR_TEXT(id, text) [TB_ST_##id] = text,
    TB_ST_ERRORS(TB_ST_ERROR_TEXT)
#undef TB_ST_ERROR_TEXT
};

const char *tb_safetensors_error_text(tb_safetensors_error e)
{
    return error_texts[e];
}

tb_safetensors_error tb_safetensors_prefix(const unsigned char prefix[8], uint64_t file_size, uint64_t *header_len)
{
    if (file_size < 8)
        return TB_ST_TOO_SMALL;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | prefix[i];
    if (n > TB_ST_MAX_HEADER)
        return TB_ST_HEADER_TOO_LARGE;
    if (n > file_size - 8)
        return TB_ST_HEADER_PAST_END;
    *header_len = n;
    return TB_ST_OK;
}

void tb_safetensors_put_prefix(uint64_t header_len, unsigned char prefix[8])
{
    for (int b = 0; b < 8; b++)
        prefix[b] = (unsigned char)(header_len >> (8 * b));
}

int tb_safetensors_tensor_shape(const tb_safetensors_entry *e, int64_t *shape)
{
    if (e->dtype == TB_DT_NONE)
        return 0;
    unsigned per = tb_dtype_st_per_element(e->format);
    for (int d = 0; d < e->ndim; d++)
        shape[d] = e->shape[d];
    /* The decoder checked that the last dimension's values fill bytes:
     * for a packed dtype, whole elements. */
    if (e->ndim > 0)
        shape[e->ndim - 1] /= (int64_t)per;
    return 1;
}

/* ---- UTF-8 ----------------------------------------------------------- */

/* Well-formed UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF). */
static int valid_utf8(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else {
            return 0;
        }
        if (len - i - 1 < n)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t k = 2; k <= n; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += n + 1;
    }
    return 1;
}

int tb_safetensors_valid_utf8(const char *s, size_t len)
{
    return valid_utf8((const unsigned char *)s, len);
}
