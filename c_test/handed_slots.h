/* The slots of the hand-out races (test_handed.c, test_registry.c): stand-in
 * managed tensors whose addresses threads hand out and take back, as
 * tb_dlpack_export.c does. A thread that owns a slot hands its address out
 * (sets the slot's flag, then adds it where the test says); a take that
 * succeeds must find the slot owned by nobody, and makes its thread the
 * owner. Each hand-out must be taken exactly once: slots_taken_once()
 * checks the counts at the end. Include after check.h. */
#ifndef TB_HANDED_SLOTS_H
#define TB_HANDED_SLOTS_H

#include <stdatomic.h>
#include <stdint.h>

#include "tb_registry.h"

enum { SLOTS = 256 };

/* The races' pseudo-random numbers (xorshift64): each thread its own state. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

typedef struct {
    tb_range r;
    atomic_int handed; /* tb_export's flag */
    atomic_int owned;  /* 1 while a thread owns it (not handed out) */
    atomic_long hand_outs, takes;
} slot;

static slot slots[SLOTS];

static uintptr_t slot_address(int i)
{
    return ((uintptr_t)0x6B << 32) + 16 * (uintptr_t)i; /* malloc'd neighbours */
}

/* Slot i handed out by its owner: the range to add, its flag set first. */
static tb_range *slot_hand_out(int i)
{
    slot *sl = &slots[i];
    sl->r = (tb_range){.lo = slot_address(i), .hi = slot_address(i) + 1};
    atomic_fetch_add(&sl->hand_outs, 1);
    atomic_store(&sl->owned, 0);
    atomic_store_explicit(&sl->handed, 1, memory_order_relaxed);
    return &sl->r;
}

/* A take of slot i's address succeeded: 1 when the thread now owns it; 0
 * when another thread did (which keeps it, so that a broken take shows in
 * the counts rather than as a corrupted set). */
static int slot_took(int i, atomic_int *errors)
{
    slot *sl = &slots[i];
    atomic_fetch_add(&sl->takes, 1);
    if (atomic_exchange(&sl->owned, 1) != 0) {
        atomic_fetch_add(errors, 1);
        return 0;
    }
    atomic_store_explicit(&sl->handed, 0, memory_order_relaxed);
    return 1;
}

/* Every slot owned, before a race. */
static void slots_own_all(void)
{
    for (int i = 0; i < SLOTS; i++)
        atomic_store(&slots[i].owned, 1);
}

/* After a race, with what was still out taken back: each hand-out was
 * taken exactly once, and more than at_least were made (the race ran).
 * Answers how many there were. */
static long slots_taken_once(long at_least)
{
    long hand_outs = 0, takes = 0, wrong = 0;
    for (int i = 0; i < SLOTS; i++) {
        long h = atomic_load(&slots[i].hand_outs), t = atomic_load(&slots[i].takes);
        wrong += h != t;
        hand_outs += h;
        takes += t;
    }
    CHECK_EQ(wrong, 0);
    CHECK_EQ(takes, hand_outs);
    CHECK(hand_outs > at_least);
    return hand_outs;
}

#endif
