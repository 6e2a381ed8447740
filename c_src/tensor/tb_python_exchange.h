/* DLPack 1.3's C exchange API, for the Python door (tb_python_exchange.c):
 * a type's __dlpack_c_exchange_api__ table searched and checked by
 * tb_dlpack_check before anything in it is called, the last one found
 * cached, and the builtins that take a tensor through a table (take_api)
 * and make the producer's object from one (object_from_api). The batch
 * and tree builtins (tb_python_batch, tb_python_walk) take and make
 * through the same table. */
#ifndef TB_PYTHON_EXCHANGE_H
#define TB_PYTHON_EXCHANGE_H

#include <stdint.h>

#include "tb_dlpack_check.h"
#include "tb_python_api.h"

/* The table in a type's __dlpack_c_exchange_api__ capsule, searched and
 * checked (tb_dlpack_check.h), or the cached one; or NULL with Python's
 * ValueError set, about a capsule nothing of which is called. */
const tb_DLPackExchangeAPI *tb_python_exchange_api(void *capsule);

/* A producer's entry answered rc: 1 when it succeeded, else 0 with Python's
 * error set (by the producer, as DLPack asks, or here when it set none). */
int tb_python_exchange_succeeded(int rc, const char *entry);

/* obj's managed tensor, through the table of capsule, its type's
 * __dlpack_c_exchange_api__ capsule (checked first: a bad one is refused,
 * never called): TB_PYTHON_TAKEN with *word, HOLDS_NULL, ODD_ADDRESS, or
 * RAISED (tb_python_builtin.h). */
int tb_python_exchange_take(void *obj, void *capsule, uintptr_t *word);

/* take_api(obj, api, k) and object_from_api(api, k). */
extern const tb_python_method_def tb_python_exchange_take_api_def;
extern const tb_python_method_def tb_python_exchange_object_from_api_def;

#endif
