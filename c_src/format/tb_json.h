/* The JSON of a safetensors header, read token by token within its bounds:
 * what the header's decoder (tb_safetensors_decode.h) reads it with. A
 * string is decoded into a store as long as the header (a decoded string
 * is never longer than its text, so the store never runs out); the first
 * refusal is recorded in the header, with the byte it was found at. Pure C:
 * no BEAM, no libtorch. */
#ifndef TB_JSON_H
#define TB_JSON_H

#include <stdint.h>

#include "tb_safetensors.h"

typedef struct {
    const char *p, *start, *end; /* the next byte; the header's bounds */
    char *out;                   /* where the next decoded string goes */
    tb_safetensors_header *h;    /* where a refusal is recorded */
} tb_json_reader;

/* Records e, unless a refusal was recorded already; returns 0. */
int tb_json_fail(tb_json_reader *r, tb_safetensors_error e);

void tb_json_skip_space(tb_json_reader *r);

/* Past white space, c, taken; else a refusal (TB_ST_BAD_JSON). */
int tb_json_expect(tb_json_reader *r, char c);

/* Past white space: 1 when c is next (then taken), else 0, nothing taken
 * and nothing refused. */
int tb_json_take(tb_json_reader *r, char c);

/* Past white space: 1 when c is next (not taken). */
int tb_json_peek(tb_json_reader *r, char c);

/* A string, its escapes resolved into the store; the header was checked
 * UTF-8 already. */
int tb_json_string(tb_json_reader *r, tb_safetensors_string *s);

/* A non-negative integer without sign, fraction or exponent (what the
 * reference takes for a size), at most max. */
int tb_json_size(tb_json_reader *r, uint64_t max, uint64_t *out);

/* The letters of word (true, false, null), here. */
int tb_json_literal(tb_json_reader *r, const char *word);

/* Any value, passed over (an entry's fields the format does not name), at
 * depth nested arrays and objects: deeper than TB_ST_MAX_DEPTH is refused.
 * Its strings go to the store and are dropped: the store's bound holds. */
int tb_json_skip_value(tb_json_reader *r, int depth);

#endif
