/* tb_layout_overlap (c_src/core/tb_overlap.h): the layouts views are made
 * of, the ones that share memory in ways a stride-by-stride rule misses,
 * and thousands of small random layouts, against the brute-force model
 * (c_test/overlap_model.h). Never "none" where two indices meet. */
#include "check.h"
#include "overlap_model.h"
#include "tb_overlap.h"

#define W TB_OVERLAP_WORK

/* The answer, checked against the model where it applies. */
static tb_overlap overlap(int ndim, const int64_t *shape, const int64_t *strides)
{
    tb_overlap got = tb_layout_overlap(ndim, shape, strides, W);
    int model = model_overlap(ndim, shape, strides);
    if (model >= 0)
        CHECK_EQ(got, model ? TB_OVERLAP_YES : TB_OVERLAP_NONE);
    return got;
}

static void test_views(void)
{
    const int64_t shape23[] = {2, 3}, row[] = {3, 1}, col[] = {1, 2};
    CHECK_EQ(overlap(2, shape23, row), TB_OVERLAP_NONE);
    CHECK_EQ(overlap(2, shape23, col), TB_OVERLAP_NONE); /* a transpose */
    /* A broadcast: stride 0 over 4 elements; over one element, nothing. */
    const int64_t four[] = {4}, one[] = {1}, none[] = {0}, zero[] = {0};
    CHECK_EQ(overlap(1, four, zero), TB_OVERLAP_YES);
    CHECK_EQ(overlap(1, one, zero), TB_OVERLAP_NONE);
    CHECK_EQ(overlap(1, none, zero), TB_OVERLAP_NONE); /* no elements */
    CHECK_EQ(overlap(0, NULL, NULL), TB_OVERLAP_NONE); /* a 0-d tensor */
    /* Equal strides; a stride inside the other dimension's reach. */
    const int64_t shape22[] = {2, 2}, equal[] = {1, 1}, s21[] = {2, 1};
    CHECK_EQ(overlap(2, shape22, equal), TB_OVERLAP_YES);
    CHECK_EQ(overlap(2, shape23, s21), TB_OVERLAP_YES);
    /* Sliding windows (unfold): windows of 3, one apart. */
    const int64_t shape43[] = {4, 3}, windows[] = {1, 1};
    CHECK_EQ(overlap(2, shape43, windows), TB_OVERLAP_YES);
    /* Interleaved but disjoint: 0,2,4 and 3,5,7. */
    const int64_t shape32[] = {3, 2}, disjoint[] = {2, 3};
    CHECK_EQ(overlap(2, shape32, disjoint), TB_OVERLAP_NONE);
    /* Slices with steps of a 4-d tensor, permuted: nested, answered at once. */
    const int64_t shape4[] = {3, 5, 2, 7}, sliced[] = {2 * 7 * 2 * 11, 3, 7 * 11 * 2 * 5, 11 * 2};
    CHECK_EQ(tb_layout_overlap(4, shape4, sliced, 0), TB_OVERLAP_NONE);
}

/* What a stride-by-stride rule misses: no stride a multiple of another
 * within reach, yet two indices meet. */
static void test_hidden_overlaps(void)
{
    /* {4,3} strides [2,3]: (3,0) and (0,2) are both offset 6. */
    const int64_t a[] = {4, 3}, as[] = {2, 3};
    CHECK_EQ(overlap(2, a, as), TB_OVERLAP_YES);
    /* {2,2,2} strides [1,4,5]: (1,1,0) and (0,0,1) are both offset 5. */
    const int64_t b[] = {2, 2, 2}, bs[] = {1, 4, 5};
    CHECK_EQ(overlap(3, b, bs), TB_OVERLAP_YES);
    /* {200000,3} strides [2,3]: too large for the model, found at once. */
    const int64_t c[] = {200000, 3}, cs[] = {2, 3};
    CHECK_EQ(tb_layout_overlap(2, c, cs, 100), TB_OVERLAP_YES);
    /* The same strides with one index fewer each way: disjoint. */
    const int64_t d[] = {3, 2};
    CHECK_EQ(overlap(2, d, cs), TB_OVERLAP_NONE);
    /* Large and disjoint without being nested: 1000 and 1001 over 1000
     * rows each never meet below 1000 * 1001. */
    const int64_t e[] = {1000, 1000}, es[] = {1000, 1001};
    CHECK_EQ(tb_layout_overlap(2, e, es, W), TB_OVERLAP_NONE);
    /* 1001 x 1000 - 1000 x 1001 = 0: with 1002 rows of the first, the
     * indices (1001, 0) and (0, 1000) meet. */
    const int64_t f[] = {1002, 1001};
    CHECK_EQ(tb_layout_overlap(2, f, es, W), TB_OVERLAP_YES);
}

/* Past its bound the answer is "unknown", never "none"; with room, the
 * same layout is answered. */
static void test_bound(void)
{
    const int64_t shape[] = {32, 10, 23}, strides[] = {2720, 576, 499};
    CHECK_EQ(tb_layout_overlap(3, shape, strides, 10), TB_OVERLAP_UNKNOWN);
    CHECK_EQ(overlap(3, shape, strides), TB_OVERLAP_NONE);
    /* Two dimensions are solved at once, however large (as one linear
     * equation in two unknowns): 10^6 rows of strides 10^6 and 10^6 + 1
     * never meet; one more row of the first and they do. */
    const int64_t big[] = {1000000, 1000000}, big_strides[] = {1000000, 1000001};
    CHECK_EQ(tb_layout_overlap(2, big, big_strides, 1), TB_OVERLAP_NONE);
    const int64_t bigger[] = {1000002, 1000001};
    CHECK_EQ(tb_layout_overlap(2, bigger, big_strides, 1), TB_OVERLAP_YES);
    /* Layouts no accepted tensor has. */
    const int64_t neg[] = {-1}, one[] = {1};
    CHECK_EQ(tb_layout_overlap(1, neg, one, W), TB_OVERLAP_UNKNOWN);
    CHECK_EQ(tb_layout_overlap(1, one, neg, W), TB_OVERLAP_UNKNOWN);
    CHECK_EQ(tb_layout_overlap(65, shape, strides, W), TB_OVERLAP_UNKNOWN);
    const int64_t huge[] = {INT64_MAX, 3}, half[] = {2, INT64_MAX / 2};
    CHECK_EQ(tb_layout_overlap(2, huge, half, W), TB_OVERLAP_UNKNOWN);
}

/* Small random layouts, against the model: every one answered exactly. */
static void test_random(void)
{
    uint64_t seed = 0x9e3779b97f4a7c15u;
    int unknown = 0;
    for (int round = 0; round < 20000; round++) {
        int64_t shape[5], strides[5];
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        int ndim = (int)(seed >> 61) % 6;
        for (int i = 0; i < ndim; i++) {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            shape[i] = (int64_t)(seed >> 60) % 7;
            strides[i] = (int64_t)(seed >> 33) % 24;
        }
        unknown += overlap(ndim, shape, strides) == TB_OVERLAP_UNKNOWN;
    }
    CHECK_EQ(unknown, 0);
}

int main(void)
{
    test_views();
    test_hidden_overlaps();
    test_bound();
    test_random();
    printf("test_overlap: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
