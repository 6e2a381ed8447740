#include "tb_registry.h"

#include "tb_stripe.h"

_Static_assert(TB_REG_SHARDS == 64, "a level's summary is one 64-bit word");

/* A query covering more chunks of a level than this reads its summary. */
#define NARROW_CHUNKS 4

/* log2 of the chunk of each level but the last, which is one chunk. */
static const unsigned level_shift[TB_REG_LEVELS - 1] = {20, 30};

static unsigned level_of(const tb_range *r)
{
    uintptr_t size = r->hi - r->lo;
    for (unsigned l = 0; l < TB_REG_LEVELS - 1; l++)
        if (size <= ((uintptr_t)1 << level_shift[l]))
            return l;
    return TB_REG_LEVELS - 1;
}

static unsigned shard_of_chunk(uintptr_t chunk)
{
    return (unsigned)(((uint64_t)chunk * 0x9E3779B97F4A7C15ull) >> 58) % TB_REG_SHARDS;
}

static int by_thread(tb_reg_kind kind)
{
    return kind == TB_REG_FROZEN;
}

/* Kept in the first level's shard its start hashes to (tb_registry.h). */
static int by_start(tb_reg_kind kind)
{
    return kind == TB_REG_HANDED;
}

/* Exports are malloc'd, 16 bytes apart at least: neighbours spread out. */
static unsigned shard_of_start(uintptr_t lo)
{
    return (unsigned)(((uint64_t)lo >> 4) * 0x9E3779B97F4A7C15ull >> 58) % TB_REG_SHARDS;
}

/* Where r is kept; set_home: it is being added, on this thread. *summary
 * is the word holding its shard's bit (NULL for a stripe), *bit that bit. */
static tb_reg_shard *home_of(tb_registry *reg, tb_reg_kind kind, tb_range *r, int set_home, uint64_t **summary,
                             uint64_t *bit)
{
    *summary = NULL;
    *bit = 0;
    if (by_thread(kind)) {
        if (set_home)
            r->home = tb_stripe(TB_REG_STRIPES);
        return &reg->stripes[r->home];
    }
    if (by_start(kind))
        return &reg->shards[0][shard_of_start(r->lo)];
    unsigned l = level_of(r);
    unsigned i = l == TB_REG_LEVELS - 1 ? 0 : shard_of_chunk(r->lo >> level_shift[l]);
    *summary = &reg->summary[l][kind];
    *bit = (uint64_t)1 << i;
    return &reg->shards[l][i];
}

static void list_init(tb_range *head)
{
    head->prev = head->next = head;
}

int tb_registry_init(tb_registry *reg)
{
    for (int l = 0; l < TB_REG_LEVELS; l++) {
        for (int i = 0; i < TB_REG_SHARDS; i++) {
            tb_reg_shard *s = &reg->shards[l][i];
            for (int k = 0; k < TB_REG_KINDS; k++) {
                s->sets[k] = NULL;
                s->count[k] = 0;
            }
            if (pthread_mutex_init(&s->lock, NULL) != 0)
                return 0;
        }
    }
    for (int i = 0; i < TB_REG_STRIPES; i++) {
        tb_reg_shard *s = &reg->stripes[i];
        for (int k = 0; k < TB_REG_KINDS; k++) {
            s->sets[k] = NULL;
            s->count[k] = 0;
        }
        if (pthread_mutex_init(&s->lock, NULL) != 0)
            return 0;
    }
    for (int l = 0; l < TB_REG_LEVELS; l++)
        for (int k = 0; k < TB_REG_KINDS; k++)
            reg->summary[l][k] = 0;
    for (int k = 0; k < TB_REG_KINDS; k++)
        list_init(&reg->files[k]);
    reg->file_count = 0;
    return pthread_mutex_init(&reg->files_lock, NULL) == 0;
}

/* Counts and summaries change and are read sequentially consistent: of an
 * add followed by a query on one thread and the same on another, at least
 * one query sees the other's range (write! against a new binary view).
 * Whenever a shard's lock is free, a shard holding ranges of a kind has its
 * bit set: a query reading the bit clear may skip the shard. */
void tb_registry_add(tb_registry *reg, tb_reg_kind kind, tb_range *r)
{
    /* Linked by file first: once in its shard, another thread may take r
     * (and free it), so nothing of r is touched after the shard's lock. */
    if (r->file_ino) {
        pthread_mutex_lock(&reg->files_lock);
        tb_range *head = &reg->files[kind];
        r->next = head->next;
        r->prev = head;
        head->next->prev = r;
        head->next = r;
        __atomic_add_fetch(&reg->file_count, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&reg->files_lock);
    }
    uint64_t *summary, bit;
    tb_reg_shard *s = home_of(reg, kind, r, 1, &summary, &bit);
    pthread_mutex_lock(&s->lock);
    tb_intervals_insert(&s->sets[kind], r);
    __atomic_add_fetch(&s->count[kind], 1, __ATOMIC_SEQ_CST);
    /* Only this shard's lock holders change its bit: a plain look suffices,
     * and a bit already set is not written again. */
    if (summary && !(__atomic_load_n(summary, __ATOMIC_RELAXED) & bit))
        __atomic_fetch_or(summary, bit, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&s->lock);
}

static void unlink_file(tb_registry *reg, tb_range *r)
{
    pthread_mutex_lock(&reg->files_lock);
    r->prev->next = r->next;
    r->next->prev = r->prev;
    r->prev = r->next = NULL;
    __atomic_sub_fetch(&reg->file_count, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&reg->files_lock);
}

void tb_registry_remove(tb_registry *reg, tb_reg_kind kind, tb_range *r)
{
    if (r->file_ino)
        unlink_file(reg, r);
    uint64_t *summary, bit;
    tb_reg_shard *s = home_of(reg, kind, r, 0, &summary, &bit);
    pthread_mutex_lock(&s->lock);
    tb_intervals_remove(&s->sets[kind], r);
    __atomic_sub_fetch(&s->count[kind], 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&s->lock);
}

/* The first kind in `kinds` with a range of shard s overlapping [lo, hi),
 * that range copied to *hit_out under the shard's lock (it may be removed
 * once the lock is released); -1 when none. An empty shard is skipped by
 * atomic loads. */
static int search_shard(tb_reg_shard *s, unsigned kinds, uintptr_t lo, uintptr_t hi, tb_range *hit_out)
{
    int any = 0;
    for (int k = 0; k < TB_REG_KINDS; k++)
        any |= (kinds & TB_REG_BIT(k)) && __atomic_load_n(&s->count[k], __ATOMIC_SEQ_CST) != 0;
    if (!any)
        return -1;
    int kind = -1;
    pthread_mutex_lock(&s->lock);
    for (int k = 0; k < TB_REG_KINDS && kind < 0; k++) {
        const tb_range *hit = (kinds & TB_REG_BIT(k)) ? tb_intervals_find(s->sets[k], lo, hi) : NULL;
        if (hit) {
            kind = k;
            if (hit_out)
                *hit_out = *hit;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return kind;
}

/* Of a wide query: the shards of level l whose bits for `kind` are in
 * `covered`, searched, and the bits of those found empty cleared (under
 * their locks, so no add is missed). */
static int search_summary(tb_registry *reg, unsigned l, int kind, uint64_t covered, uintptr_t lo, uintptr_t hi,
                          tb_range *hit_out)
{
    uint64_t *summary = &reg->summary[l][kind];
    uint64_t bits = __atomic_load_n(summary, __ATOMIC_SEQ_CST) & covered;
    while (bits) {
        unsigned i = (unsigned)__builtin_ctzll(bits);
        bits &= bits - 1;
        tb_reg_shard *s = &reg->shards[l][i];
        if (__atomic_load_n(&s->count[kind], __ATOMIC_SEQ_CST) != 0) {
            if (search_shard(s, TB_REG_BIT(kind), lo, hi, hit_out) >= 0)
                return kind;
            continue;
        }
        pthread_mutex_lock(&s->lock);
        if (__atomic_load_n(&s->count[kind], __ATOMIC_RELAXED) == 0)
            __atomic_fetch_and(summary, ~((uint64_t)1 << i), __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&s->lock);
    }
    return -1;
}

/* The first kind in `kinds` with a range overlapping [lo, hi) by address,
 * copied to *hit_out; -1 when none. */
static int find(tb_registry *reg, unsigned kinds, uintptr_t lo, uintptr_t hi, tb_range *hit_out)
{
    if (kinds & TB_REG_BIT(TB_REG_FROZEN)) {
        for (unsigned i = 0; i < TB_REG_STRIPES; i++) {
            int kind = search_shard(&reg->stripes[i], TB_REG_BIT(TB_REG_FROZEN), lo, hi, hit_out);
            if (kind >= 0)
                return kind;
        }
        kinds &= ~TB_REG_BIT(TB_REG_FROZEN);
        if (!kinds)
            return -1;
    }
    if (kinds & TB_REG_BIT(TB_REG_HANDED)) {
        for (unsigned i = 0; i < TB_REG_SHARDS; i++) {
            int kind = search_shard(&reg->shards[0][i], TB_REG_BIT(TB_REG_HANDED), lo, hi, hit_out);
            if (kind >= 0)
                return kind;
        }
        kinds &= ~TB_REG_BIT(TB_REG_HANDED);
        if (!kinds)
            return -1;
    }
    for (unsigned l = 0; l < TB_REG_LEVELS; l++) {
        int last_level = l == TB_REG_LEVELS - 1;
        uintptr_t first = 0, chunks = 1;
        if (!last_level) {
            first = lo >> level_shift[l];
            first = first ? first - 1 : 0; /* a range that starts there may reach here */
            chunks = ((hi - 1) >> level_shift[l]) - first + 1;
        }
        if (chunks <= NARROW_CHUNKS) {
            for (unsigned i = 0; i < chunks; i++) {
                tb_reg_shard *s = &reg->shards[l][last_level ? 0 : shard_of_chunk(first + i)];
                int kind = search_shard(s, kinds, lo, hi, hit_out);
                if (kind >= 0)
                    return kind;
            }
            continue;
        }
        uint64_t covered = ~(uint64_t)0;
        if (chunks < TB_REG_SHARDS) {
            covered = 0;
            for (uintptr_t c = 0; c < chunks; c++)
                covered |= (uint64_t)1 << shard_of_chunk(first + c);
        }
        for (int k = 0; k < TB_REG_KINDS; k++) {
            if (!(kinds & TB_REG_BIT(k)))
                continue;
            int kind = search_summary(reg, l, k, covered, lo, hi, hit_out);
            if (kind >= 0)
                return kind;
        }
    }
    return -1;
}

static int same_file_overlap(const tb_range *a, const tb_range *b)
{
    return a->file_ino == b->file_ino && a->file_dev == b->file_dev && a->file_lo < b->file_hi &&
           b->file_lo < a->file_hi;
}

int tb_registry_overlap(tb_registry *reg, unsigned kinds, const tb_range *r)
{
    return tb_registry_find(reg, kinds, r, NULL);
}

int tb_registry_find(tb_registry *reg, unsigned kinds, const tb_range *r, tb_range *hit)
{
    if (r->hi <= r->lo)
        return -1;
    int kind = find(reg, kinds, r->lo, r->hi, hit);
    if (kind >= 0 || !r->file_ino || __atomic_load_n(&reg->file_count, __ATOMIC_SEQ_CST) == 0)
        return kind;
    pthread_mutex_lock(&reg->files_lock);
    for (int k = 0; k < TB_REG_KINDS && kind < 0; k++) {
        if (!(kinds & TB_REG_BIT(k)))
            continue;
        for (const tb_range *e = reg->files[k].next; e != &reg->files[k] && kind < 0; e = e->next)
            if (same_file_overlap(e, r)) {
                kind = k;
                if (hit)
                    *hit = *e;
            }
    }
    pthread_mutex_unlock(&reg->files_lock);
    return kind;
}

int tb_registry_mapping_at(tb_registry *reg, uintptr_t p, tb_range *out)
{
    return find(reg, TB_REG_BIT(TB_REG_MAPPED), p, p + 1, out) >= 0;
}

/* The range of the kind in shard s that starts at lo, removed; NULL when
 * none. Found and removed under one hold of the lock: that is the take. */
static tb_range *take_from(tb_reg_shard *s, tb_reg_kind kind, uintptr_t lo)
{
    if (__atomic_load_n(&s->count[kind], __ATOMIC_SEQ_CST) == 0)
        return NULL;
    pthread_mutex_lock(&s->lock);
    tb_range *r = tb_intervals_at(s->sets[kind], lo);
    if (r) {
        tb_intervals_remove(&s->sets[kind], r);
        __atomic_sub_fetch(&s->count[kind], 1, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

tb_range *tb_registry_take(tb_registry *reg, tb_reg_kind kind, uintptr_t lo)
{
    tb_range *r = NULL;
    if (by_thread(kind)) {
        for (unsigned i = 0; i < TB_REG_STRIPES && !r; i++)
            r = take_from(&reg->stripes[i], kind, lo);
    } else if (by_start(kind)) {
        r = take_from(&reg->shards[0][shard_of_start(lo)], kind, lo);
    } else {
        /* A range that starts at lo lives in the shard of lo's chunk at
         * its level, whichever that is. */
        for (unsigned l = 0; l < TB_REG_LEVELS && !r; l++)
            r = take_from(&reg->shards[l][l == TB_REG_LEVELS - 1 ? 0 : shard_of_chunk(lo >> level_shift[l])], kind, lo);
    }
    /* Taken: only this thread unlinks it by file. */
    if (r && r->file_ino)
        unlink_file(reg, r);
    return r;
}
