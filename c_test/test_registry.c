/* The registry of guarded memory (tb_registry.c) and the live counters
 * (tb_count.c), without the BEAM:
 *
 * - against a brute-force model, on one thread: ranges of every size (each
 *   level), named by file or not, added and removed in random order, every
 *   query compared with a scan, narrow and wide (read through the levels'
 *   summaries); after every step, each shard holding ranges of a kind has
 *   its summary bit set, and a wide query over everything, once nothing is
 *   left, clears every bit;
 * - from many threads at once (run under ThreadSanitizer by make
 *   tsan-test, and under AddressSanitizer): each thread keeps ranges in a
 *   window of its own, whose shards it shares with the others, and its
 *   queries there must match its own model exactly; pairs of threads race
 *   a write against a binary view of the same memory, and never both get
 *   in, also where the view is a gigabyte whose query reads a summary that
 *   other threads' small ranges set and its own queries clear; counters
 *   moved by every thread sum to what was added. */
#define _GNU_SOURCE /* pthread barriers */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tb_count.h"
#include "tb_registry.h"

static tb_registry reg;

static uint64_t next_random(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

/* A size at one of the levels: bytes, kilobytes, megabytes or gigabytes. */
static uint64_t random_size(uint64_t *rng)
{
    static const unsigned shifts[] = {4, 12, 20, 26, 31, 33};
    unsigned s = shifts[next_random(rng) % 6];
    return 1 + next_random(rng) % ((uint64_t)1 << s);
}

/* ---- One thread, against a model ----------------------------------------- */

enum { MODEL_N = 3000 };
static tb_range ranges[MODEL_N];
static int kind_of[MODEL_N]; /* -1 when not registered */

static int model_overlap(unsigned kinds, const tb_range *q)
{
    for (int k = 0; k < TB_REG_KINDS; k++) {
        if (!(kinds & TB_REG_BIT(k)))
            continue;
        for (int i = 0; i < MODEL_N; i++) {
            const tb_range *r = &ranges[i];
            if (kind_of[i] != k)
                continue;
            if (r->lo < q->hi && q->lo < r->hi)
                return k;
            if (q->file_ino && r->file_ino == q->file_ino && r->file_dev == q->file_dev && r->file_lo < q->file_hi &&
                q->file_lo < r->file_hi)
                return k;
        }
    }
    return -1;
}

static void random_range(uint64_t *rng, tb_range *r)
{
    uint64_t size = random_size(rng);
    uint64_t lo = next_random(rng) % ((uint64_t)1 << 40);
    *r = (tb_range){.lo = lo, .hi = lo + size};
    if (next_random(rng) % 8 == 0) {
        r->file_dev = 1;
        r->file_ino = 1 + next_random(rng) % 3;
        r->file_lo = next_random(rng) % ((uint64_t)1 << 24);
        r->file_hi = r->file_lo + size;
    }
}

/* Every shard holding ranges of a kind has its bit in the summary set (the
 * promise a wide query relies on to skip the others); the shards whose bits
 * are set, counted into *set. */
static int summary_holds(int *set)
{
    int ok = 1;
    *set = 0;
    for (int l = 0; l < TB_REG_LEVELS; l++)
        for (int k = 0; k < TB_REG_KINDS; k++)
            for (int i = 0; i < TB_REG_SHARDS; i++) {
                int bit = (int)((reg.summary[l][k] >> i) & 1);
                ok &= reg.shards[l][i].count[k] == 0 || bit;
                *set += bit;
            }
    return ok;
}

static void test_model(void)
{
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < MODEL_N; i++)
        kind_of[i] = -1;
    int mismatches = 0, hits = 0, mapping_mismatches = 0, summary_broken = 0, most_set = 0;
    for (int step = 0; step < 40000; step++) {
        int i = (int)(next_random(&rng) % MODEL_N);
        if (kind_of[i] >= 0) {
            tb_registry_remove(&reg, (tb_reg_kind)kind_of[i], &ranges[i]);
            kind_of[i] = -1;
        } else {
            random_range(&rng, &ranges[i]);
            kind_of[i] = (int)(next_random(&rng) % TB_REG_KINDS);
            tb_registry_add(&reg, (tb_reg_kind)kind_of[i], &ranges[i]);
        }
        tb_range q;
        random_range(&rng, &q);
        unsigned kinds = (unsigned)(next_random(&rng) % (1u << TB_REG_KINDS));
        int got = tb_registry_overlap(&reg, kinds, &q), want = model_overlap(kinds, &q);
        /* Which kind is found first among several may differ; whether one
         * is found may not. */
        if ((got >= 0) != (want >= 0) || (got >= 0 && !(kinds & TB_REG_BIT(got))))
            mismatches++;
        hits += got >= 0;

        tb_range found;
        int at = tb_registry_mapping_at(&reg, q.lo, &found), model_at = 0;
        for (int j = 0; j < MODEL_N; j++)
            model_at |= kind_of[j] == TB_REG_MAPPED && ranges[j].lo <= q.lo && q.lo < ranges[j].hi;
        if (at != model_at || (at && !(found.lo <= q.lo && q.lo < found.hi)))
            mapping_mismatches++;
        int set;
        summary_broken += !summary_holds(&set);
        most_set = set > most_set ? set : most_set;
    }
    CHECK_EQ(summary_broken, 0);
    CHECK(most_set > 64); /* the summaries were used, on more than one level or kind */
    CHECK_EQ(mismatches, 0);
    CHECK_EQ(mapping_mismatches, 0);
    CHECK(hits > 1000); /* the queries did find ranges, of every level */
    for (int i = 0; i < MODEL_N; i++)
        if (kind_of[i] >= 0)
            tb_registry_remove(&reg, (tb_reg_kind)kind_of[i], &ranges[i]);
    int set;
    CHECK(summary_holds(&set));
    CHECK(set > 0); /* bits outlive their ranges until a wide query passes */
    tb_range everything = {.lo = 0, .hi = UINTPTR_MAX};
    CHECK_EQ(tb_registry_overlap(&reg, 0xF, &everything), -1);
    /* Every level but the last is covered wide, so each of their bits was
     * looked at and cleared; the last level's one shard keeps its bits. */
    for (int l = 0; l < TB_REG_LEVELS - 1; l++)
        for (int k = 0; k < TB_REG_KINDS; k++)
            CHECK_EQ(reg.summary[l][k], 0);
}

/* ---- Many threads ---------------------------------------------------------- */

enum { THREADS = 8, OWN = 64, ROUNDS = 20000 };

typedef struct {
    int id;
    atomic_int *errors;
} worker_arg;

static tb_count counter;
/* Every thread starts at once, so they do run together. */
static pthread_barrier_t start;

/* Each thread's window: 256 MiB at its own base, so its ranges hash into
 * shards the other threads use too, but never overlap theirs. */
static void *own_window(void *p)
{
    worker_arg *a = p;
    uint64_t rng = 0x1234567ull * (uint64_t)(a->id + 1);
    uintptr_t base = ((uintptr_t)a->id + 1) << 32;
    tb_range mine[OWN];
    int live[OWN] = {0};
    pthread_barrier_wait(&start);
    for (int round = 0; round < ROUNDS; round++) {
        int i = (int)(next_random(&rng) % OWN);
        if (live[i]) {
            tb_registry_remove(&reg, TB_REG_READ_ONLY, &mine[i]);
            live[i] = 0;
        } else {
            uint64_t lo = base + next_random(&rng) % ((uint64_t)1 << 28);
            mine[i] = (tb_range){.lo = lo, .hi = lo + 1 + next_random(&rng) % ((uint64_t)1 << 21)};
            tb_registry_add(&reg, TB_REG_READ_ONLY, &mine[i]);
            live[i] = 1;
        }
        tb_count_add(&counter, 1);
        uint64_t lo = base + next_random(&rng) % ((uint64_t)1 << 28);
        tb_range q = {.lo = lo, .hi = lo + 1 + next_random(&rng) % 4096};
        int want = 0;
        for (int j = 0; j < OWN; j++)
            want |= live[j] && mine[j].lo < q.hi && q.lo < mine[j].hi;
        if ((tb_registry_overlap(&reg, TB_REG_BIT(TB_REG_READ_ONLY), &q) >= 0) != want)
            atomic_fetch_add(a->errors, 1);
        tb_count_add(&counter, -1);
    }
    for (int j = 0; j < OWN; j++)
        if (live[j])
            tb_registry_remove(&reg, TB_REG_READ_ONLY, &mine[j]);
    return NULL;
}

/* A write and a binary view of one range, as tb_storage.c brackets them:
 * register, then look for the other kind. Inside, each says so; the other
 * must never be inside at the same time. */
typedef struct {
    atomic_int writing, frozen, writes, freezes;
} pair_state;

static pair_state pairs[THREADS / 2];
static int wide_views; /* the binary views are a gigabyte each */

static void *racer(void *p)
{
    worker_arg *a = p;
    pair_state *ps = &pairs[a->id / 2];
    int writer = a->id % 2 == 0;
    uintptr_t lo = ((uintptr_t)0x77 << 36) + (uintptr_t)(a->id / 2) * 4096;
    if (wide_views)
        lo = ((uintptr_t)0x78 + (uintptr_t)(a->id / 2)) << 36;
    uint64_t rng = 0xABCDEFull * (uint64_t)(a->id + 1);
    pthread_barrier_wait(&start);
    for (int round = 0; round < ROUNDS; round++) {
        /* Overlapping, not equal: each offset differently. */
        tb_range r = {.lo = lo + (writer ? 0 : 100), .hi = lo + (writer ? 200 : 300)};
        if (wide_views) {
            /* A small write anywhere in a gigabyte view: each in another
             * chunk, so its shard's bit comes and goes while the view's
             * queries read and clear the summary. */
            uintptr_t at = lo + next_random(&rng) % ((uint64_t)1 << 30);
            r = writer ? (tb_range){.lo = at, .hi = at + 64} : (tb_range){.lo = lo, .hi = lo + ((uint64_t)1 << 30)};
        }
        tb_reg_kind mine = writer ? TB_REG_WRITING : TB_REG_FROZEN, theirs = writer ? TB_REG_FROZEN : TB_REG_WRITING;
        tb_registry_add(&reg, mine, &r);
        if (tb_registry_overlap(&reg, TB_REG_BIT(theirs), &r) < 0) {
            atomic_int *me = writer ? &ps->writing : &ps->frozen, *other = writer ? &ps->frozen : &ps->writing;
            atomic_fetch_add(me, 1);
            if (atomic_load(other) != 0)
                atomic_fetch_add(a->errors, 1);
            atomic_fetch_add(writer ? &ps->writes : &ps->freezes, 1);
            atomic_fetch_sub(me, 1);
        }
        tb_registry_remove(&reg, mine, &r);
    }
    return NULL;
}

static void run_threads(void *(*fn)(void *), atomic_int *errors)
{
    pthread_t threads[THREADS];
    worker_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (worker_arg){.id = i, .errors = errors};
        CHECK_EQ(pthread_create(&threads[i], NULL, fn, &args[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
}

int main(void)
{
    CHECK(tb_registry_init(&reg));
    CHECK_EQ(pthread_barrier_init(&start, NULL, THREADS), 0);
    test_model();

    atomic_int errors = 0;
    run_threads(own_window, &errors);
    CHECK_EQ(atomic_load(&errors), 0);
    CHECK_EQ(tb_count_read(&counter), 0);

    int writes = 0, freezes = 0;
    for (wide_views = 0; wide_views < 2; wide_views++) {
        atomic_int both_inside = 0;
        memset(pairs, 0, sizeof pairs);
        run_threads(racer, &both_inside);
        CHECK_EQ(atomic_load(&both_inside), 0);
        int w = 0, f = 0;
        for (int i = 0; i < THREADS / 2; i++) {
            w += atomic_load(&pairs[i].writes);
            f += atomic_load(&pairs[i].freezes);
        }
        /* Both sides got in, many times: the race was run, not avoided. */
        CHECK(w > 0 && f > 0);
        writes += w;
        freezes += f;
    }

    tb_range everything = {.lo = 0, .hi = UINTPTR_MAX};
    CHECK_EQ(tb_registry_overlap(&reg, 0xF, &everything), -1);
    printf("test_registry: %d checks, %d failures (writes %d, binary views %d)\n", checks, failures, writes, freezes);
    return failures != 0;
}
