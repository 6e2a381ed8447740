/* Numbered slots that carry one word from one side of an exchange to the
 * other, when all the receiver can be told is a small number: a Python
 * evaluation in this VM whose code names the slot (TensorBlob.Python).
 * Code is compiled once per distinct text, so the text must not hold the
 * word itself; the lowest free slot is given each time, so the texts in
 * use stay as few as the exchanges running at once. Each slot is opened by
 * one side, filled and emptied once each way at most, then closed by its
 * opener. Any thread may call any of these. */
#ifndef TB_SLOTS_H
#define TB_SLOTS_H

#include <stdatomic.h>
#include <stdint.h>

#define TB_SLOTS 4096
#define TB_SLOT_WORDS (TB_SLOTS / 64)

typedef struct {
    _Atomic uint64_t open[TB_SLOT_WORDS]; /* a bit per slot: opened, not yet closed */
    _Atomic uintptr_t value[TB_SLOTS];    /* 0: empty */
} tb_slots;

/* Opens the lowest free slot holding value (0: empty); its number, or -1
 * when all TB_SLOTS are open. */
int tb_slot_open(tb_slots *s, uintptr_t value);

/* Empties slot k: what it held (0 when it was empty, or k is no slot). Of
 * two takers, one gets the value. */
uintptr_t tb_slot_take(tb_slots *s, unsigned k);

/* Fills slot k if it is open and empty: 1, else 0 (the value stays the
 * caller's). */
int tb_slot_put(tb_slots *s, unsigned k, uintptr_t value);

/* Closes slot k, which its opener emptied: it may be opened again. */
void tb_slot_close(tb_slots *s, unsigned k);

#endif
