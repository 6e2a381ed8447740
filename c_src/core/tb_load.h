/* Why a load or an upgrade of the library fails: one line each, with the
 * code load/upgrade return (ERTS shows it as "load-call unsuccessful
 * (code)") and the reason printed on stderr. The codes are part of what a
 * user reads in a log: append, never renumber (6, a benchmark's resource
 * type, is retired: the benchmarks' baselines are a library of their own). */
#ifndef TB_LOAD_H
#define TB_LOAD_H

#define TB_LOAD_FAILURES(X)                                                                                    \
    X(TB_LOAD_NOT_MAPPED, 1, not_mapped, "cannot keep this build's code mapped for the life of the VM")        \
    X(TB_LOAD_ABI, 2, abi, "the loaded build of tensor_blob has another ABI; restart the VM to load this one") \
    X(TB_LOAD_NO_MEMORY, 3, no_memory, "out of memory allocating the library's state")                         \
    X(TB_LOAD_NO_MUTEX, 4, no_mutex, "cannot create the library's mutex")                                      \
    X(TB_LOAD_TOO_MANY_BUILDS, 5, too_many_builds, "too many builds of tensor_blob loaded in this VM")         \
    X(TB_LOAD_TENSOR_TYPE, 7, tensor_type, "cannot open the resource type tensor_blob_tensor")                 \
    X(TB_LOAD_CAPSULE_TYPE, 8, capsule_type,                                                                   \
      "cannot open the resource type tensor_blob_dlpack_capsule or create its mutex")                          \
    X(TB_LOAD_BINARY_TYPE, 9, binary_type, "cannot open the resource type tensor_blob_binary_view")            \
    X(TB_LOAD_PYTHON_SLOT_TYPE, 10, python_slot_type, "cannot open the resource type tensor_blob_python_slot")

typedef enum {
    TB_LOAD_OK = 0,
#define TB_LOAD_ENUM(name, code, atom, message) name = code,
    TB_LOAD_FAILURES(TB_LOAD_ENUM)
#undef TB_LOAD_ENUM
} tb_load_failure;

/* A build made with -DTB_LOAD_FAULTS (the load tests' build, never the
 * library's) fails the step whose code the environment variable
 * TB_LOAD_FAULT holds, so that every reason above can be made to happen. */
#ifdef TB_LOAD_FAULTS
#include <stdlib.h>
static inline int tb_load_fault(tb_load_failure f)
{
    const char *v = getenv("TB_LOAD_FAULT");
    return v && atoi(v) == (int)f;
}
#else
#define tb_load_fault(f) 0
#endif

#endif
