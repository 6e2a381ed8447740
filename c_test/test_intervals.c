/* The interval set (the registry's shards) against a brute-force model:
 * random ranges inserted and removed in random order, every query (by
 * overlap, and by exact start) compared with a scan, and the depth of the
 * treap kept logarithmic. */
#include <stdlib.h>

#include "check.h"
#include "tb_intervals.h"

enum { N = 4000 };

static tb_range ranges[N];
static int in_set[N];

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* 1 when some range of the set overlaps [lo, hi). */
static int overlaps(const tb_range *root, uintptr_t lo, uintptr_t hi)
{
    return tb_intervals_find(root, lo, hi) != NULL;
}

static int model_overlap(uintptr_t lo, uintptr_t hi)
{
    for (int i = 0; i < N; i++)
        if (in_set[i] && ranges[i].lo < hi && lo < ranges[i].hi)
            return 1;
    return 0;
}

/* max_hi is each subtree's largest end, and keys are in order. */
static int valid(const tb_range *n, uintptr_t *max_out, int *depth)
{
    if (!n) {
        *max_out = 0;
        *depth = 0;
        return 1;
    }
    uintptr_t lmax, rmax;
    int ld, rd;
    if (!valid(n->left, &lmax, &ld) || !valid(n->right, &rmax, &rd))
        return 0;
    if ((n->left && n->left->lo > n->lo) || (n->right && n->right->lo < n->lo))
        return 0;
    uintptr_t m = n->hi > lmax ? n->hi : lmax;
    m = m > rmax ? m : rmax;
    *max_out = m;
    *depth = 1 + (ld > rd ? ld : rd);
    return n->max_hi == m;
}

static void query_both(const tb_range *root, uintptr_t lo, uintptr_t hi, int *mismatches)
{
    if (overlaps(root, lo, hi) != model_overlap(lo, hi))
        (*mismatches)++;
}

/* tb_intervals_at: a range of the set that starts at lo, whenever one does
 * (among ranges that overlap lo, or share their start with others). */
static void query_at(tb_range *root, uintptr_t lo, int *mismatches, int *found)
{
    const tb_range *r = tb_intervals_at(root, lo);
    int want = 0, member = 0;
    for (int i = 0; i < N; i++) {
        want |= in_set[i] && ranges[i].lo == lo;
        member |= in_set[i] && r == &ranges[i];
    }
    if ((r != NULL) != want || (r && (r->lo != lo || !member)))
        (*mismatches)++;
    *found += r != NULL;
}

static void test_random_against_model(void)
{
    tb_range *root = NULL;
    int mismatches = 0, found_at = 0;
    /* Small addresses and lengths: many overlaps, nested and equal starts. */
    for (int i = 0; i < N; i++) {
        uintptr_t lo = 4096 + rnd() % 200000;
        ranges[i] = (tb_range){.lo = lo, .hi = lo + 1 + rnd() % (i % 7 == 0 ? 5000 : 64)};
    }
    for (int step = 0; step < 6 * N; step++) {
        int i = (int)(rnd() % N);
        if (in_set[i])
            tb_intervals_remove(&root, &ranges[i]);
        else
            tb_intervals_insert(&root, &ranges[i]);
        in_set[i] = !in_set[i];
        uintptr_t lo = rnd() % 210000;
        query_both(root, lo, lo + 1 + rnd() % 300, &mismatches);
        query_at(root, lo, &mismatches, &found_at);
        query_at(root, ranges[rnd() % N].lo, &mismatches, &found_at);
    }
    CHECK(found_at > N); /* starts were found, not only missed */
    uintptr_t m;
    int depth;
    CHECK(valid(root, &m, &depth));
    CHECK_EQ(mismatches, 0);
    /* Queries at every range's own edges: touching is not overlapping. */
    for (int i = 0; i < N; i++) {
        query_both(root, ranges[i].hi, ranges[i].hi + 1, &mismatches);
        query_both(root, ranges[i].lo - 1, ranges[i].lo, &mismatches);
        query_both(root, ranges[i].lo, ranges[i].hi, &mismatches);
    }
    CHECK_EQ(mismatches, 0);
    for (int i = 0; i < N; i++)
        if (in_set[i]) {
            tb_intervals_remove(&root, &ranges[i]);
            in_set[i] = 0;
        }
    CHECK(root == NULL);
    CHECK_EQ(overlaps(root, 0, UINTPTR_MAX), 0);
}

static void test_depth_with_sorted_inserts(void)
{
    /* Ranges registered in address order (binaries allocated one after
     * another) must not make a list: the depth stays near 2 log2 n. */
    tb_range *root = NULL;
    for (int i = 0; i < N; i++) {
        ranges[i] = (tb_range){.lo = 65536 + (uintptr_t)i * 128, .hi = 65536 + (uintptr_t)i * 128 + 64};
        tb_intervals_insert(&root, &ranges[i]);
    }
    uintptr_t m;
    int depth;
    CHECK(valid(root, &m, &depth));
    printf("test_intervals: depth %d for %d ranges inserted in order\n", depth, N);
    CHECK(depth <= 40);
    CHECK_EQ(overlaps(root, 65536 + 64, 65536 + 128), 0); /* the gap */
    CHECK_EQ(overlaps(root, 65536 + 100, 65536 + 129), 1);
    for (int i = N - 1; i >= 0; i--)
        tb_intervals_remove(&root, &ranges[i]);
    CHECK(root == NULL);
}

static void test_nested_and_equal(void)
{
    /* One wide range hidden under many narrow ones that start earlier: the
     * query must find it through max_hi. */
    tb_range wide = {.lo = 1000, .hi = 100000}, narrow[50];
    tb_range *root = NULL;
    for (int i = 0; i < 50; i++) {
        narrow[i] = (tb_range){.lo = 10 + (uintptr_t)i, .hi = 20 + (uintptr_t)i};
        tb_intervals_insert(&root, &narrow[i]);
    }
    tb_intervals_insert(&root, &wide);
    CHECK_EQ(overlaps(root, 99999, 200000), 1);
    CHECK_EQ(overlaps(root, 100000, 200000), 0);
    tb_intervals_remove(&root, &wide);
    CHECK_EQ(overlaps(root, 99999, 200000), 0);
    /* Two equal ranges: removing one leaves the other. */
    tb_range a = {.lo = 500, .hi = 600}, b = {.lo = 500, .hi = 600};
    tb_intervals_insert(&root, &a);
    tb_intervals_insert(&root, &b);
    tb_intervals_remove(&root, &a);
    CHECK_EQ(overlaps(root, 550, 551), 1);
    tb_intervals_remove(&root, &b);
    CHECK_EQ(overlaps(root, 550, 551), 0);
    for (int i = 0; i < 50; i++)
        tb_intervals_remove(&root, &narrow[i]);
    CHECK(root == NULL);
}

int main(void)
{
    test_random_against_model();
    test_depth_with_sorted_inserts();
    test_nested_and_equal();
    printf("test_intervals: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
