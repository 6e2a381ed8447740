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

/* a * x + b * y == gcd(a, b), for a, b > 0 (extended Euclid). */
static int64_t ext_gcd(int64_t a, int64_t b, i128 *x, i128 *y)
{
    i128 x0 = 1, y0 = 0, x1 = 0, y1 = 1;
    while (b) {
        int64_t q = a / b, r = a % b;
        i128 t = x0 - q * x1;
        x0 = x1;
        x1 = t;
        t = y0 - q * y1;
        y0 = y1;
        y1 = t;
        a = b;
        b = r;
    }
    *x = x0;
    *y = y0;
    return a;
}

/* The last two dimensions at once: x0 * s0 + x1 * s1 == -t, |x0| <= m0,
 * |x1| <= m1, not both 0 unless nonzero. The solutions are one particular
 * solution plus j times (s1 / g, -s0 / g): a range of j for each bound,
 * and a solution when the ranges meet. */
static int solve_two(const search *S, i128 t, int nonzero)
{
    int64_t s0 = S->s[0], s1 = S->s[1], m0 = S->m[0], m1 = S->m[1];
    i128 a, b;
    int64_t g = ext_gcd(s0, s1, &a, &b);
    if (t % g != 0)
        return 0;
    i128 d0 = s1 / g, d1 = s0 / g; /* the steps of x0 and x1 */
    if (!nonzero)                  /* t == 0: the smallest nonzero solution is (d0, -d1) */
        return d0 <= m0 && d1 <= m1;
    i128 c = -t / g;
    /* x0 = a * c + j * d0, x1 = b * c - j * d1; a * c may exceed the
     * bounds by far: reduced modulo d0 first, which keeps it exact. */
    i128 x0p = (a % d0) * (c % d0) % d0, k = (a * c - x0p) / d0;
    i128 x1p = b * c + k * d1; /* the same solution, x0 in (-d0, d0) */
    i128 lo = ceil_div(-m0 - x0p, d0), hi = floor_div(m0 - x0p, d0);
    i128 lo1 = ceil_div(x1p - m1, d1), hi1 = floor_div(x1p + m1, d1);
    if (lo1 > lo)
        lo = lo1;
    if (hi1 < hi)
        hi = hi1;
    return lo <= hi;
}

/* 1 when dimensions 0..k can bring the offset t (of the dimensions above
 * k) back to 0, with a nonzero difference somewhere (nonzero: one above k
 * is already); 0 when they cannot; -1 when the work ran out. All of
 * dimensions 0..k at zero is never counted: the offset then stays t. The
 * first nonzero difference is taken positive: x and -x are one pair. */
static int solve(search *S, int k, i128 t, int nonzero)
{
    int64_t s = S->s[k], m = S->m[k];
    if (k == 1) {
        if (++S->work > S->max_work)
            return -1;
        return solve_two(S, t, nonzero);
    }
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
