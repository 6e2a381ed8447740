/* take_tree (tb_python_walk.c): a container of Python (dicts, lists and
 * tuples of DLPack producers, nested) walked once, its description written
 * (the grammar of tb_python_tree.h) and its tensors taken, each through
 * its type's table (tb_python_exchange) or a capsule, into a batch
 * (tb_python_batch) that carries the description. */
#ifndef TB_PYTHON_WALK_H
#define TB_PYTHON_WALK_H

#include "tb_python_api.h"

/* take_tree(obj, capsule_of, k). */
extern const tb_python_method_def tb_python_walk_take_tree_def;

#endif
