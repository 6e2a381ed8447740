/* The registry of guarded memory (tb_registry.c) and the live counters
 * (tb_count.c), without the BEAM:
 *
 * - against a brute-force model, on one thread: ranges of every size (each
 *   level), named by file or not, added and removed in random order, every
 *   query compared with a scan, narrow and wide (read through the levels'
 *   summaries), and takes by start too; after every step, each shard
 *   holding ranges of a kind has its summary bit set, and a wide query over
 *   everything, once nothing is left, clears every bit;
 * - a take finds a range only at its exact start, once, and only of the
 *   kind asked, with ranges of every other kind at the same addresses;
 * - from many threads at once (run under ThreadSanitizer by make
 *   tsan-test, and under AddressSanitizer): each thread keeps ranges in a
 *   window of its own, whose shards it shares with the others, and its
 *   queries there must match its own model exactly; pairs of threads race
 *   a write against a binary view of the same memory, and never both get
 *   in, also where the view is a gigabyte whose query reads a summary that
 *   other threads' small ranges set and its own queries clear; counters
 *   moved by every thread sum to what was added;
 * - counts moved by more threads than they have owned stripes lose no
 *   add;
 * - threads hand addresses out and take them back as DLPack imports and
 *   deleters do, amid ranges of other kinds added and removed at the same
 *   addresses: each address handed out is taken by exactly one thread. */
#define _GNU_SOURCE /* pthread barriers */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "handed_slots.h"
#include "tb_count.h"
#include "tb_registry.h"
#include "tb_stripe.h"

static tb_registry reg;

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
                /* Handed-out addresses are kept by start, with no bits. */
                ok &= reg.shards[l][i].count[k] == 0 || bit || k == TB_REG_HANDED;
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
    int take_mismatches = 0, taken = 0;
    for (int step = 0; step < 40000; step++) {
        int i = (int)(next_random(&rng) % MODEL_N);
        if (kind_of[i] >= 0 && next_random(&rng) % 2) {
            /* Taken by its start, or missed one byte off it, with a kind
             * asked that may not be its own. */
            int off = (int)(next_random(&rng) % 3) - 1;
            tb_reg_kind kind =
                next_random(&rng) % 4 ? (tb_reg_kind)kind_of[i] : (tb_reg_kind)(next_random(&rng) % TB_REG_KINDS);
            uintptr_t lo = ranges[i].lo + (uintptr_t)off;
            tb_range *r = tb_registry_take(&reg, kind, lo);
            int want = 0, j = r ? (int)(r - ranges) : -1;
            for (int m = 0; m < MODEL_N; m++)
                want |= kind_of[m] == (int)kind && ranges[m].lo == lo;
            if ((r != NULL) != want || (r && (j < 0 || j >= MODEL_N || kind_of[j] != (int)kind || ranges[j].lo != lo)))
                take_mismatches++;
            else if (r)
                kind_of[j] = -1;
            taken += r != NULL;
        } else if (kind_of[i] >= 0) {
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
    CHECK_EQ(take_mismatches, 0);
    CHECK(hits > 1000);  /* the queries did find ranges, of every level */
    CHECK(taken > 1000); /* and the takes took some */
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

/* Handed-out addresses beside ranges of every other kind at the same
 * addresses: a take finds only the kind asked, only at the exact start,
 * and only once; the other kinds stay, found as before. */
static void test_take_exact(void)
{
    const uintptr_t a = (uintptr_t)0x5A << 32;
    tb_range handed[8], frozen = {.lo = a, .hi = a + 4096}, read_only = {.lo = a, .hi = a + 1},
                        writing = {.lo = a - 16, .hi = a + 64};
    tb_range big = {.lo = a,
                    .hi = a + ((uint64_t)3 << 30),
                    .file_dev = 1,
                    .file_ino = 9,
                    .file_lo = 0,
                    .file_hi = (uint64_t)3 << 30};
    for (int i = 0; i < 8; i++) {
        handed[i] = (tb_range){.lo = a + 16 * (uintptr_t)i, .hi = a + 16 * (uintptr_t)i + 1};
        tb_registry_add(&reg, TB_REG_HANDED, &handed[i]);
    }
    tb_registry_add(&reg, TB_REG_FROZEN, &frozen);
    tb_registry_add(&reg, TB_REG_READ_ONLY, &read_only);
    tb_registry_add(&reg, TB_REG_WRITING, &writing);
    tb_registry_add(&reg, TB_REG_MAPPED, &big); /* the last level, and by file */

    /* Inside a handed range's neighbours, or just off its start: nothing. */
    CHECK(tb_registry_take(&reg, TB_REG_HANDED, a + 1) == NULL);
    CHECK(tb_registry_take(&reg, TB_REG_HANDED, a - 1) == NULL);
    CHECK(tb_registry_take(&reg, TB_REG_HANDED, a + 8) == NULL);
    CHECK(tb_registry_take(&reg, TB_REG_HANDED, a + 16 * 8) == NULL);
    /* The writing range covers a but starts before it. */
    CHECK(tb_registry_take(&reg, TB_REG_WRITING, a) == NULL);
    CHECK(tb_registry_take(&reg, TB_REG_MAPPED, a + 16) == NULL);

    tb_range q = {.lo = a + 32, .hi = a + 33};
    CHECK_EQ(tb_registry_overlap(&reg, TB_REG_BIT(TB_REG_HANDED), &q), TB_REG_HANDED);
    CHECK(tb_registry_take(&reg, TB_REG_HANDED, a + 32) == &handed[2]);
    CHECK(tb_registry_take(&reg, TB_REG_HANDED, a + 32) == NULL); /* once */
    CHECK_EQ(tb_registry_overlap(&reg, TB_REG_BIT(TB_REG_HANDED), &q), -1);
    /* The other kinds at that address are still there. */
    for (int k = 0; k < TB_REG_KINDS; k++)
        if (k != TB_REG_HANDED && k != TB_REG_READ_ONLY)
            CHECK_EQ(tb_registry_overlap(&reg, TB_REG_BIT(k), &q), k);

    /* Each kind takes its own range at a: the handed one first, and the
     * others still found afterwards. */
    CHECK(tb_registry_take(&reg, TB_REG_HANDED, a) == &handed[0]);
    tb_range at_a = {.lo = a, .hi = a + 1};
    for (int k = 0; k < TB_REG_KINDS; k++)
        CHECK_EQ(tb_registry_overlap(&reg, TB_REG_BIT(k), &at_a), k == TB_REG_HANDED ? -1 : k);
    CHECK(tb_registry_take(&reg, TB_REG_READ_ONLY, a) == &read_only);
    CHECK(tb_registry_take(&reg, TB_REG_FROZEN, a) == &frozen);
    CHECK(tb_registry_take(&reg, TB_REG_MAPPED, a) == &big);
    /* Taken, the mapped range is gone by file too. */
    tb_range by_file = {.lo = 1, .hi = 2, .file_dev = 1, .file_ino = 9, .file_lo = 100, .file_hi = 200};
    CHECK_EQ(tb_registry_overlap(&reg, TB_REG_BIT(TB_REG_MAPPED), &by_file), -1);
    CHECK_EQ(tb_registry_overlap(&reg, TB_REG_BIT(TB_REG_WRITING), &at_a), TB_REG_WRITING);
    CHECK(tb_registry_take(&reg, TB_REG_HANDED, a + 16) == &handed[1]);
    for (int i = 3; i < 8; i++)
        CHECK(tb_registry_take(&reg, TB_REG_HANDED, a + 16 * (uintptr_t)i) == &handed[i]);
    tb_registry_remove(&reg, TB_REG_WRITING, &writing);
    tb_range everything = {.lo = 0, .hi = UINTPTR_MAX};
    CHECK_EQ(tb_registry_overlap(&reg, (1u << TB_REG_KINDS) - 1, &everything), -1);
}

/* ---- Many threads ---------------------------------------------------------- */

enum { THREADS = 8, OWN = 64, ROUNDS = 20000 };

typedef struct {
    int id;
    atomic_int *errors;
} worker_arg;

static tb_count counter;
static tb_stripe_numbers thread_numbers;
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

static void run_threads(void *(*fn)(void *), atomic_int *errors);

/* Addresses handed out and taken back, as tb_dlpack_export.c does: a thread that
 * owns a slot hands its address out (sets the slot's flag, then adds it);
 * any thread may claim any address (an import: take it by address), or run
 * a slot's deleter (if the flag reads set, take its own address). A take
 * that succeeds makes its thread the owner, which may hand it out again (an
 * address freed and reused). Each hand-out must be taken once: a thread
 * whose take succeeds must find the slot owned by nobody. */
enum { HAND_ROUNDS = 40000 };

/* The slot a take gave back, by its range: its index, or -1 when it was
 * another thread's (slot_took). */
static int took(tb_range *r, atomic_int *errors)
{
    int i = (int)(((slot *)((char *)r - offsetof(slot, r))) - slots);
    return slot_took(i, errors) ? i : -1;
}

static void *hander(void *p)
{
    worker_arg *a = p;
    uint64_t rng = 0x5151ull * (uint64_t)(a->id + 1);
    int own[SLOTS], n = 0;
    /* Each thread starts owning its share of the slots. */
    for (int i = a->id; i < SLOTS; i += THREADS)
        own[n++] = i;
    /* Its ranges of other kinds start 1 to 16 bytes into a slot, where no
     * other thread's start: its takes of them take only its own. */
    tb_range other[2];
    int other_live[2] = {0};
    pthread_barrier_wait(&start);
    for (int round = 0; round < HAND_ROUNDS; round++) {
        uint64_t x = next_random(&rng);
        int j = (int)(next_random(&rng) % SLOTS);
        tb_range *r = NULL;
        switch (x % 4) {
        case 0: /* hand one out */
            if (n > 0) {
                int k = (int)(next_random(&rng) % (uint64_t)n);
                int i = own[k];
                own[k] = own[--n];
                tb_registry_add(&reg, TB_REG_HANDED, slot_hand_out(i));
            }
            break;
        case 1: /* an import claims an address */ r = tb_registry_take(&reg, TB_REG_HANDED, slot_address(j)); break;
        case 2: /* a deleter, where the flag says the address is out */
            if (atomic_load_explicit(&slots[j].handed, memory_order_relaxed))
                r = tb_registry_take(&reg, TB_REG_HANDED, slot_address(j));
            break;
        default: { /* other kinds come and go at the same addresses */
            int o = (int)((x >> 8) % 2);
            tb_reg_kind kind = o ? TB_REG_READ_ONLY : TB_REG_WRITING;
            if (other_live[o]) {
                if (x >> 16 & 1)
                    tb_registry_remove(&reg, kind, &other[o]);
                else if (tb_registry_take(&reg, kind, other[o].lo) != &other[o])
                    atomic_fetch_add(a->errors, 1);
                other_live[o] = 0;
            } else {
                uintptr_t lo = slot_address(j) + 1 + (uintptr_t)(2 * a->id + o);
                other[o] = (tb_range){.lo = lo, .hi = lo + 64};
                tb_registry_add(&reg, kind, &other[o]);
                other_live[o] = 1;
            }
            tb_range q = {.lo = slot_address(j), .hi = slot_address(j) + 1};
            (void)tb_registry_overlap(&reg, TB_REG_BIT(TB_REG_HANDED) | TB_REG_BIT(kind), &q);
        }
        }
        int i = r ? took(r, a->errors) : -1;
        if (i >= 0)
            own[n++] = i;
    }
    for (int o = 0; o < 2; o++)
        if (other_live[o])
            tb_registry_remove(&reg, o ? TB_REG_READ_ONLY : TB_REG_WRITING, &other[o]);
    return NULL;
}

static void test_handed_race(void)
{
    atomic_int errors = 0;
    slots_own_all();
    run_threads(hander, &errors);
    CHECK_EQ(atomic_load(&errors), 0);
    /* What is still out is taken once now, and nothing else is left. */
    for (int i = 0; i < SLOTS; i++) {
        tb_range *r = tb_registry_take(&reg, TB_REG_HANDED, slot_address(i));
        if (r)
            CHECK_EQ(took(r, &errors), i);
        CHECK(tb_registry_take(&reg, TB_REG_HANDED, slot_address(i)) == NULL);
    }
    CHECK_EQ(atomic_load(&errors), 0);
    long hand_outs = slots_taken_once(THREADS * HAND_ROUNDS / 8); /* each taken once, and the race ran */
    long left = 0;
    for (int i = 0; i < TB_REG_SHARDS; i++)
        left += reg.shards[0][i].count[TB_REG_HANDED];
    CHECK_EQ(left, 0);
    printf("test_registry: %ld addresses handed out and taken back\n", hand_outs);
}

/* The counts: more threads than owned stripes, so that some own a stripe
 * and the rest share the others, each adding more than it takes away, while another
 * thread reads the sum; no add may be lost. */
enum { COUNT_THREADS = TB_COUNT_STRIPES + 8, COUNT_ROUNDS = 200000 };

static tb_count counted;
static atomic_int counters_done;
static pthread_barrier_t counters_start;

static void *count_up(void *p)
{
    (void)p;
    pthread_barrier_wait(&counters_start);
    for (int i = 0; i < COUNT_ROUNDS; i++) {
        tb_count_add(&counted, 2);
        tb_count_add(&counted, -1);
    }
    atomic_fetch_add(&counters_done, 1);
    return NULL;
}

static void *count_reader(void *p)
{
    long *wrong = p;
    /* Each thread adds before it takes away, so no sum is ever negative. */
    while (atomic_load(&counters_done) < COUNT_THREADS) {
        long n = tb_count_read(&counted);
        *wrong += n < 0 || n > 2L * COUNT_THREADS * COUNT_ROUNDS;
    }
    return NULL;
}

static void test_counts(void)
{
    pthread_t threads[COUNT_THREADS], reader;
    long wrong = 0;
    pthread_barrier_init(&counters_start, NULL, COUNT_THREADS);
    CHECK_EQ(pthread_create(&reader, NULL, count_reader, &wrong), 0);
    for (int i = 0; i < COUNT_THREADS; i++)
        CHECK_EQ(pthread_create(&threads[i], NULL, count_up, NULL), 0);
    for (int i = 0; i < COUNT_THREADS; i++)
        pthread_join(threads[i], NULL);
    pthread_join(reader, NULL);
    pthread_barrier_destroy(&counters_start);
    CHECK_EQ(tb_count_read(&counted), (long)COUNT_THREADS * COUNT_ROUNDS);
    CHECK_EQ(wrong, 0);
    /* Some threads owned a stripe, the ones after those shared the rest:
     * both ways were taken. */
    long owned = 0, shared = 0;
    for (int i = 0; i < TB_COUNT_STRIPES; i++)
        *(i < TB_COUNT_OWNED ? &owned : &shared) += atomic_load(&counted.stripes[i].n);
    CHECK(owned > 0);
    CHECK(shared > 0);
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
    tb_stripe_load(&thread_numbers);
    CHECK_EQ(pthread_barrier_init(&start, NULL, THREADS), 0);
    test_model();
    test_take_exact();

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

    test_handed_race();
    test_counts();

    tb_range everything = {.lo = 0, .hi = UINTPTR_MAX};
    CHECK_EQ(tb_registry_overlap(&reg, (1u << TB_REG_KINDS) - 1, &everything), -1);
    printf("test_registry: %d checks, %d failures (writes %d, binary views %d)\n", checks, failures, writes, freezes);
    return failures != 0;
}
