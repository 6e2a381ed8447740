#include "tb_overlap.h"

#include "tb_layout.h"

typedef __int128 i128;

/* The dimensions that matter (more than one element), by stride, smallest
 * first: m is the largest index difference (shape - 1). reach[k] is the
 * farthest the dimensions below k move the offset (the sum of m * stride
 * over them), g[k] the gcd of their strides (0 below the first), which
 * every offset they reach is a multiple of. */
typedef struct {
    int n;
    int64_t m[TB_MAX_DIMS], s[TB_MAX_DIMS];
    int64_t reach[TB_MAX_DIMS], g[TB_MAX_DIMS];
    long work, max_work;
} search;

static int64_t gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static i128 floor_div(i128 a, i128 b) /* b > 0 */
{
    i128 q = a / b;
    return q * b > a ? q - 1 : q;
}

static i128 ceil_div(i128 a, i128 b) /* b > 0 */
{
    i128 q = a / b;
    return q * b < a ? q + 1 : q;
}

/* 1 when dimensions 0..k can bring the offset t (of the dimensions above
 * k) back to 0, with a nonzero difference somewhere (nonzero: one above k
 * is already); 0 when they cannot; -1 when the work ran out. All of
 * dimensions 0..k at zero is never counted: the offset then stays t. The
 * first nonzero difference is taken positive: x and -x are one pair. */
static int solve(search *S, int k, i128 t, int nonzero)
{
    int64_t s = S->s[k], m = S->m[k];
    if (k == 0) {
        /* The last one: x * s == -t, exactly. */
        if (++S->work > S->max_work)
            return -1;
        if (t % s != 0)
            return 0;
        i128 x = -t / s;
        return (x != 0 || nonzero) && x >= -m && x <= m;
    }
    /* |t + x * s| <= reach[k], and t + x * s a multiple of g[k]. */
    i128 r = S->reach[k];
    i128 lo = ceil_div(-r - t, s), hi = floor_div(r - t, s);
    if (lo < -m)
        lo = -m;
    if (hi > m)
        hi = m;
    if (!nonzero && lo < 0)
        lo = 0;
    for (i128 x = lo; x <= hi; x++) {
        if (++S->work > S->max_work)
            return -1;
        i128 u = t + x * s;
        if (u % S->g[k] != 0)
            continue;
        int found = solve(S, k - 1, u, nonzero || x != 0);
        if (found != 0)
            return found;
    }
    return 0;
}

tb_overlap tb_layout_overlap(int ndim, const int64_t *shape, const int64_t *strides, long max_work)
{
    if (ndim < 0 || ndim > TB_MAX_DIMS)
        return TB_OVERLAP_UNKNOWN;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0)
            return TB_OVERLAP_NONE; /* no elements at all */
        if (shape[i] < 0 || strides[i] < 0)
            return TB_OVERLAP_UNKNOWN;
    }
    search S = {.n = 0, .work = 0, .max_work = max_work};
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 2)
            continue;
        if (strides[i] == 0)
            return TB_OVERLAP_YES; /* two indices along i, one element */
        /* Insertion by stride, smallest first. */
        int j = S.n++;
        for (; j > 0 && S.s[j - 1] > strides[i]; j--) {
            S.s[j] = S.s[j - 1];
            S.m[j] = S.m[j - 1];
        }
        S.s[j] = strides[i];
        S.m[j] = shape[i] - 1;
    }
    /* Nested: each stride beyond what all smaller ones reach together.
     * Then every offset has one index (as digits of a mixed radix): the
     * layouts of dense tensors, their permutations, slices and steps. */
    int nested = 1;
    int64_t reach = 0, g = 0;
    for (int k = 0; k < S.n; k++) {
        S.reach[k] = reach;
        S.g[k] = g;
        if (S.s[k] <= reach)
            nested = 0;
        int64_t span;
        if (__builtin_mul_overflow(S.m[k], S.s[k], &span) || __builtin_add_overflow(reach, span, &reach))
            return TB_OVERLAP_UNKNOWN; /* an extent no accepted layout has */
        g = gcd(S.s[k], g);
    }
    if (nested)
        return TB_OVERLAP_NONE;
    switch (solve(&S, S.n - 1, 0, 0)) {
    case 1: return TB_OVERLAP_YES;
    case 0: return TB_OVERLAP_NONE;
    default: return TB_OVERLAP_UNKNOWN;
    }
}
