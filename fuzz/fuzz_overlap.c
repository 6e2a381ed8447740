/* libFuzzer harness for the overlap decision of writes
 * (c_src/core/tb_overlap.c), against the brute-force model of
 * c_test/overlap_model.h: every element's offset, listed and compared.
 *
 *   clang-14 -fsanitize=fuzzer,address,undefined -Ic_src/core -Ic_test \
 *       fuzz/fuzz_overlap.c c_src/core/tb_overlap.c
 *
 * For a layout the model covers (at most 4096 elements), the answer under
 * a generous bound must be the model's; under the bound the input picks
 * it must be the model's or "unknown": never "none" where two indices
 * meet, never "yes" where none do. Any layout, modelled or not, gets the
 * same answer with its dimensions in another order. A disagreement prints
 * the layout and calls abort(), which libFuzzer saves as an artifact.
 *
 * Input format (missing bytes read as zero):
 *   byte 0      ndim (mod 7: 0..6)
 *   byte 1      the bound: 0 (write!'s, TB_OVERLAP_WORK), else byte * 16 steps
 *   byte 2      a rotation of the dimensions, for the order check
 *   then        per dimension: a shape byte and a stride byte; a shape
 *               byte >= 0xf0 reads two more bytes (shape up to 65535), a
 *               stride byte >= 0xf0 reads four (stride up to 2^32 - 1)
 */
/* Small enough for thousands of runs a second under the sanitizers. */
#define MODEL_MAX_ELEMENTS 4096
#include "fuzz_reader.h"
#include "overlap_model.h"
#include "tb_overlap.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void fail(const char *what, int ndim, const int64_t *shape, const int64_t *strides, int got, int want)
{
    fprintf(stderr, "fuzz_overlap: %s: got %d, expected %d for shape {", what, got, want);
    for (int i = 0; i < ndim; i++)
        fprintf(stderr, "%s%" PRId64, i ? ", " : "", shape[i]);
    fprintf(stderr, "} strides [");
    for (int i = 0; i < ndim; i++)
        fprintf(stderr, "%s%" PRId64, i ? ", " : "", strides[i]);
    fprintf(stderr, "]\n");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size, 0};
    int ndim = read_byte(&r) % 7;
    uint8_t b = read_byte(&r);
    long bound = b ? (long)b * 16 : TB_OVERLAP_WORK;
    int rot = ndim ? read_byte(&r) % ndim : 0;
    int64_t shape[6], strides[6];
    for (int i = 0; i < ndim; i++) {
        uint8_t s = read_byte(&r), t = read_byte(&r);
        shape[i] = s >= 0xf0 ? (int64_t)read_be(&r, 2) : s % 16;
        strides[i] = t >= 0xf0 ? (int64_t)read_be(&r, 4) : t % 64;
    }
    tb_overlap got = tb_layout_overlap(ndim, shape, strides, bound);
    int model = model_overlap(ndim, shape, strides);
    if (model >= 0) {
        tb_overlap want = model ? TB_OVERLAP_YES : TB_OVERLAP_NONE;
        if (got != want && !(b && got == TB_OVERLAP_UNKNOWN))
            fail("against the model", ndim, shape, strides, got, want);
    }
    /* The order of the dimensions changes nothing (with a generous bound:
     * the search may take another path). */
    int64_t rshape[6], rstrides[6];
    for (int i = 0; i < ndim; i++) {
        rshape[i] = shape[(i + rot) % ndim];
        rstrides[i] = strides[(i + rot) % ndim];
    }
    if (!b) {
        tb_overlap again = tb_layout_overlap(ndim, rshape, rstrides, bound);
        if (again != got && again != TB_OVERLAP_UNKNOWN && got != TB_OVERLAP_UNKNOWN)
            fail("in another order", ndim, rshape, rstrides, again, got);
    }
    return 0;
}
