/* libFuzzer harness for the dtype table lookups (c_src/core/tb_dtype.c):
 * the index the NIF runs (tb_dtype_find_name, tb_dtype_find_nx, built by
 * tb_dtype_index_build with strings interned as the NIF interns atoms) and
 * tb_dtype_from_dlpack, with
 * arbitrary strings and codes.
 *
 *   clang-14 -fsanitize=fuzzer,address,undefined -Ic_src/core \
 *       fuzz/fuzz_dtype.c c_src/core/tb_dtype.c
 *
 * Input format (missing bytes read as zero):
 *   bytes 0-3    DLPack code  (little-endian uint32)
 *   bytes 4-7    DLPack bits  (uint32)
 *   bytes 8-11   DLPack lanes (uint32)
 *   bytes 12-19  Nx bits      (uint64, passed as unsigned long)
 *   the rest     a string, used both as a dtype name and as an Nx kind;
 *                it is NUL-terminated, so an embedded NUL cuts it short,
 *                as enif_get_atom would never produce but a C caller could
 *
 * Invariants: a lookup that succeeds names a table entry that really has
 * the given name / kind and bits / code, bits and lanes; one that fails
 * leaves *out alone and no entry matches; every entry round-trips through
 * each lookup to itself (so the keys are unique). Violations abort(). */
#include "fuzz_reader.h"
#include "intern.h"
#include "tb_dtype.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(cond)                                                                                   \
    do {                                                                                                \
        if (!(cond)) {                                                                                  \
            fprintf(stderr, "fuzz_dtype: invariant violated: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            abort();                                                                                    \
        }                                                                                               \
    } while (0)

#define SENTINEL ((tb_dtype_id)-7)

/* Byte-wise equality, written without strcmp, for the models below. */
static int same(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    return la == lb && memcmp(a, b, la) == 0;
}

/* Every entry round-trips, and the lookup keys are unique. Checked once. */
static void check_table(void)
{
    for (int i = 0; i < TB_DT_COUNT; i++) {
        const tb_dtype *d = &tb_dtypes[i];
        tb_dtype_id id = SENTINEL;
        REQUIRE(d->name && d->name[0]);
        REQUIRE(d->element_size == 1 || d->element_size == 2 || d->element_size == 4 || d->element_size == 8 ||
                d->element_size == 16);
        /* One lane, or a packed element: its lanes fill its bytes. */
        REQUIRE(d->dl_lanes >= 1);
        REQUIRE((unsigned)d->dl_bits * d->dl_lanes == 8u * d->element_size);
        REQUIRE(dtype_from_name(d->name, &id) && id == (tb_dtype_id)i);
        id = SENTINEL;
        REQUIRE(tb_dtype_from_dlpack(d->dl_code, d->dl_bits, d->dl_lanes, &id) && id == (tb_dtype_id)i);
        if (d->nx_kind) {
            id = SENTINEL;
            REQUIRE(d->nx_bits == 8u * d->element_size);
            REQUIRE(dtype_from_nx(d->nx_kind, d->nx_bits, &id) && id == (tb_dtype_id)i);
        }
    }
    for (size_t a = 0; a < TB_DT_ALIAS_COUNT; a++) {
        tb_dtype_id id = SENTINEL;
        REQUIRE((int)tb_dtype_aliases[a].id >= 0 && tb_dtype_aliases[a].id < TB_DT_COUNT);
        /* An alias never shadows a canonical name, nor another alias. */
        for (int i = 0; i < TB_DT_COUNT; i++)
            REQUIRE(!same(tb_dtype_aliases[a].name, tb_dtypes[i].name));
        for (size_t b = 0; b < a; b++)
            REQUIRE(!same(tb_dtype_aliases[a].name, tb_dtype_aliases[b].name));
        REQUIRE(dtype_from_name(tb_dtype_aliases[a].name, &id) && id == tb_dtype_aliases[a].id);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int table_checked;
    if (!table_checked) {
        check_table();
        table_checked = 1;
    }

    reader rd = {data, size, 0};
    unsigned code = (unsigned)read_le(&rd, 4);
    unsigned bits = (unsigned)read_le(&rd, 4);
    unsigned lanes = (unsigned)read_le(&rd, 4);
    unsigned long nx_bits = (unsigned long)read_le(&rd, 8);
    size_t off = size > 20 ? 20 : size;
    size_t len = size - off;
    char *s = malloc(len + 1);
    REQUIRE(s);
    memcpy(s, data + off, len);
    s[len] = '\0';

    /* Names: canonical or alias. */
    tb_dtype_id id = SENTINEL;
    int found = dtype_from_name(s, &id);
    int expect = -1;
    for (int i = 0; i < TB_DT_COUNT && expect < 0; i++)
        if (same(s, tb_dtypes[i].name))
            expect = i;
    for (size_t a = 0; a < TB_DT_ALIAS_COUNT && expect < 0; a++)
        if (same(s, tb_dtype_aliases[a].name))
            expect = (int)tb_dtype_aliases[a].id;
    REQUIRE(found == (expect >= 0));
    if (found) {
        REQUIRE(id == (tb_dtype_id)expect);
        /* The canonical name of what was found leads back to it. */
        tb_dtype_id again = SENTINEL;
        REQUIRE(dtype_from_name(tb_dtypes[id].name, &again) && again == id);
    } else {
        REQUIRE(id == SENTINEL);
    }

    /* Nx {kind, bits}, with the same string as the kind. */
    id = SENTINEL;
    found = dtype_from_nx(s, nx_bits, &id);
    expect = -1;
    for (int i = 0; i < TB_DT_COUNT && expect < 0; i++)
        if (tb_dtypes[i].nx_kind && same(s, tb_dtypes[i].nx_kind) && tb_dtypes[i].nx_bits == nx_bits)
            expect = i;
    REQUIRE(found == (expect >= 0));
    if (found) {
        REQUIRE(id == (tb_dtype_id)expect);
        REQUIRE(nx_bits == tb_dtypes[id].nx_bits);
    } else {
        REQUIRE(id == SENTINEL);
    }
    /* Nx bits that only agree in their low byte must not match. */
    if (nx_bits > 0xff) {
        id = SENTINEL;
        REQUIRE(!dtype_from_nx(s, nx_bits, &id) && id == SENTINEL);
    }

    /* DLPack {code, bits, lanes}. */
    id = SENTINEL;
    found = tb_dtype_from_dlpack(code, bits, lanes, &id);
    expect = -1;
    for (int i = 0; i < TB_DT_COUNT && expect < 0; i++)
        if (tb_dtypes[i].dl_lanes == lanes && tb_dtypes[i].dl_code == code && tb_dtypes[i].dl_bits == bits)
            expect = i;
    REQUIRE(found == (expect >= 0));
    if (found) {
        REQUIRE(id == (tb_dtype_id)expect);
        REQUIRE(code <= 0xff && bits <= 0xff && lanes <= 0xffff);
        /* The round trip: the entry's own DLPack type, and its lanes fill
         * its element (one lane, or a packed element's). */
        REQUIRE(tb_dtypes[id].dl_code == code && tb_dtypes[id].dl_bits == bits && tb_dtypes[id].dl_lanes == lanes);
        REQUIRE(8u * tb_dtypes[id].element_size == bits * lanes);
    } else {
        REQUIRE(id == SENTINEL);
    }

    free(s);
    return 0;
}
