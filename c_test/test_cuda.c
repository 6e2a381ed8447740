/* Unit tests of the CUDA logic that runs without a GPU: the pointer-check
 * decisions (tb_devmem) and the runtimes' dispatch of them (tb_runtime),
 * the stream contract (tb_stream) and CUDA IPC handles (tb_cuda_handle). The runtime and libtorch's stream calls are a
 * stand-in defined here, compiled only into this test program: it keeps
 * fake allocations, a current device, events and a log of the calls, and
 * fails the call it is told to. What only a real GPU can show (that the
 * runtime does what the stand-in does) is for the :cuda ExUnit tests. */
#define _GNU_SOURCE /* shm_open, ftruncate */
#include "tb_cuda_handle.h"
#include "tb_cuda_ops.h"
#include "tb_devmem.h"
#include "tb_runtime.h"
#include "tb_stream.h"
#include "tb_torch_cuda.h"
#include "tensor_blob_dlpack.h"
#include "torch_shim.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

/* ---- The stand-in runtime --------------------------------------------- */

typedef struct {
    uint64_t base, size;
    tb_mem_type type;
    int device;
    unsigned char handle[TB_CUDA_IPC_HANDLE_SIZE]; /* what an export of it gives */
    int opened;                                    /* mapped here from another process */
} fake_allocation;

static struct {
    fake_allocation allocations[8];
    int allocation_count;
    int device;         /* current */
    int torch_default;  /* libtorch's current stream is the default one */
    int events_live;    /* created and not destroyed */
    int opened, closed; /* IPC handles */
    const char *fail;   /* the call that fails next, by name */
    char log[2048];
} rt;

static void reset(void)
{
    memset(&rt, 0, sizeof rt);
    rt.torch_default = 1;
}

static void logged(const char *fmt, unsigned long long a, unsigned long long b)
{
    size_t n = strlen(rt.log);
    snprintf(rt.log + n, sizeof rt.log - n, fmt, a, b);
    n = strlen(rt.log);
    snprintf(rt.log + n, sizeof rt.log - n, " ");
}

static const char *maybe_fail(const char *call)
{
    if (rt.fail && strcmp(rt.fail, call) == 0) {
        rt.fail = NULL;
        return "injected failure";
    }
    return NULL;
}

static fake_allocation *allocate(uint64_t base, uint64_t size, tb_mem_type type, int device)
{
    fake_allocation *a = &rt.allocations[rt.allocation_count++];
    *a = (fake_allocation){.base = base, .size = size, .type = type, .device = device};
    for (int i = 0; i < TB_CUDA_IPC_HANDLE_SIZE; i++)
        a->handle[i] = (unsigned char)(rt.allocation_count * 16 + i);
    return a;
}

static fake_allocation *find(uint64_t ptr)
{
    for (int i = 0; i < rt.allocation_count; i++)
        if (ptr >= rt.allocations[i].base && ptr - rt.allocations[i].base < rt.allocations[i].size)
            return &rt.allocations[i];
    return NULL;
}

static const char *get_device(int *device)
{
    *device = rt.device;
    return maybe_fail("get_device");
}

static const char *set_device(int device)
{
    logged("set_device(%llu)", (unsigned long long)device, 0);
    const char *e = maybe_fail("set_device");
    if (!e)
        rt.device = device;
    return e;
}

static const char *pointer_type(uint64_t ptr, tb_mem_type *type, int *device)
{
    fake_allocation *a = find(ptr);
    *type = a ? a->type : TB_MEM_HOST;
    *device = a ? a->device : -1;
    return maybe_fail("pointer_type");
}

static const char *address_range(uint64_t ptr, uint64_t *base, uint64_t *size)
{
    const char *e = maybe_fail("address_range");
    fake_allocation *a = find(ptr);
    if (e || !a)
        return e ? e : "not a device pointer";
    *base = a->base;
    *size = a->size;
    return NULL;
}

static const char *ipc_get_handle(uint64_t base, unsigned char handle[TB_CUDA_IPC_HANDLE_SIZE])
{
    logged("ipc_get(%#llx)", base, 0);
    const char *e = maybe_fail("ipc_get_handle");
    fake_allocation *a = find(base);
    if (e || !a || a->base != base)
        return e ? e : "invalid argument: not an allocation's base";
    memcpy(handle, a->handle, TB_CUDA_IPC_HANDLE_SIZE);
    return NULL;
}

static const char *ipc_open_handle(const unsigned char handle[TB_CUDA_IPC_HANDLE_SIZE], uint64_t *base)
{
    logged("ipc_open(on %llu)", (unsigned long long)rt.device, 0);
    const char *e = maybe_fail("ipc_open_handle");
    if (e)
        return e;
    for (int i = 0; i < rt.allocation_count; i++)
        if (memcmp(rt.allocations[i].handle, handle, TB_CUDA_IPC_HANDLE_SIZE) == 0) {
            rt.allocations[i].opened++;
            rt.opened++;
            *base = rt.allocations[i].base;
            return NULL;
        }
    return "invalid resource handle";
}

static const char *ipc_close_handle(uint64_t base)
{
    logged("ipc_close(%#llx)", base, 0);
    fake_allocation *a = find(base);
    if (!a || a->opened == 0)
        return "invalid argument";
    a->opened--;
    rt.closed++;
    return NULL;
}

static int event_tokens[64], next_event;

static const char *ipc_open_event(const unsigned char handle[64], void **event)
{
    logged("ipc_open_event(%llu)", handle[0], 0);
    const char *e = maybe_fail("ipc_open_event");
    if (e)
        return e;
    *event = &event_tokens[next_event++ % 64];
    rt.events_live++;
    return NULL;
}

static const char *event_create(void **event)
{
    const char *e = maybe_fail("event_create");
    if (e)
        return e;
    *event = &event_tokens[next_event++ % 64];
    rt.events_live++;
    logged("event_create", 0, 0);
    return NULL;
}

static const char *event_record(void *event, uintptr_t stream)
{
    (void)event;
    logged("event_record(%#llx)", (unsigned long long)stream, 0);
    return maybe_fail("event_record");
}

static const char *event_synchronize(void *event)
{
    (void)event;
    logged("event_synchronize", 0, 0);
    return maybe_fail("event_synchronize");
}

static const char *event_destroy(void *event)
{
    (void)event;
    rt.events_live--;
    logged("event_destroy", 0, 0);
    return NULL;
}

static const char *stream_wait_event(uintptr_t stream, void *event)
{
    (void)event;
    logged("stream_wait(%#llx on %llu)", (unsigned long long)stream, (unsigned long long)rt.device);
    return maybe_fail("stream_wait_event");
}

static const char *stream_synchronize(uintptr_t stream)
{
    logged("stream_synchronize(%#llx on %llu)", (unsigned long long)stream, (unsigned long long)rt.device);
    return maybe_fail("stream_synchronize");
}

static const char *device_synchronize(void)
{
    logged("device_synchronize(on %llu)", (unsigned long long)rt.device, 0);
    return maybe_fail("device_synchronize");
}

static int torch_stream_is_default(int device)
{
    (void)device;
    return rt.torch_default;
}

static const char *torch_record_event(int device, void **event)
{
    logged("torch_record(%llu)", (unsigned long long)device, 0);
    const char *e = maybe_fail("torch_record_event");
    if (e)
        return e;
    *event = &event_tokens[next_event++ % 64];
    rt.events_live++;
    return NULL;
}

static const char *torch_wait_event(int device, void *event)
{
    (void)event;
    logged("torch_wait(%llu)", (unsigned long long)device, 0);
    return maybe_fail("torch_wait_event");
}

static void torch_destroy_event(int device, void *event)
{
    (void)event;
    (void)device;
    rt.events_live--;
    logged("torch_destroy", 0, 0);
}

static const tb_cuda_ops fake = {
    .get_device = get_device,
    .set_device = set_device,
    .pointer_type = pointer_type,
    .address_range = address_range,
    .ipc_get_handle = ipc_get_handle,
    .ipc_open_handle = ipc_open_handle,
    .ipc_close_handle = ipc_close_handle,
    .ipc_open_event = ipc_open_event,
    .event_create = event_create,
    .event_record = event_record,
    .event_synchronize = event_synchronize,
    .event_destroy = event_destroy,
    .stream_wait_event = stream_wait_event,
    .stream_synchronize = stream_synchronize,
    .device_synchronize = device_synchronize,
    .torch_stream_is_default = torch_stream_is_default,
    .torch_record_event = torch_record_event,
    .torch_wait_event = torch_wait_event,
    .torch_destroy_event = torch_destroy_event,
};

#define CHECK_LOG(expected)                                                                       \
    do {                                                                                          \
        checks++;                                                                                 \
        if (strcmp(rt.log, expected) != 0) {                                                      \
            failures++;                                                                           \
            printf("%s:%d: log \"%s\", expected \"%s\"\n", __FILE__, __LINE__, rt.log, expected); \
        }                                                                                         \
    } while (0)

/* Evaluates text once: it may be a call. */
#define CHECK_CONTAINS(text, part)                                                                                   \
    do {                                                                                                             \
        const char *text_ = (text);                                                                                  \
        checks++;                                                                                                    \
        if (!text_ || !strstr(text_, (part))) {                                                                      \
            failures++;                                                                                              \
            printf("%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__, text_ ? text_ : "(null)", (part)); \
        }                                                                                                            \
    } while (0)

/* ---- Pointer checks ----------------------------------------------------- */

static tb_mem_answer answer(tb_mem_type type, int device, const char *error)
{
    return (tb_mem_answer){type, device, error};
}

static void test_pointer_checks(void)
{
    char why[200];
    tb_mem_answer a;

    /* Without GPUs a CPU pointer is not asked about; a CUDA one is refused. */
    CHECK_EQ(tb_devmem_needs_answer(TB_DEVICE_CPU, 0, 0), 0);
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CPU, 0, TB_RUNTIME_CUDA, 0, NULL, why, sizeof why), 1);
    CHECK_EQ(tb_devmem_needs_answer(TB_DEVICE_CUDA, 0, 0), 0);
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CUDA, 0, TB_RUNTIME_CUDA, 0, NULL, why, sizeof why), 0);
    CHECK_CONTAINS(why, "CUDA device 0 does not exist (0 found)");
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CUDA, -1, TB_RUNTIME_CUDA, 2, NULL, why, sizeof why), 0);
    CHECK_CONTAINS(why, "CUDA device -1 does not exist");

    /* With one, both are asked about. */
    CHECK_EQ(tb_devmem_needs_answer(TB_DEVICE_CPU, 0, 1), 1);
    CHECK_EQ(tb_devmem_needs_answer(TB_DEVICE_CUDA, 0, 1), 1);
    CHECK_EQ(tb_devmem_needs_answer(TB_DEVICE_CUDA, 1, 1), 0);

    a = answer(TB_MEM_DEVICE, 0, NULL);
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CUDA, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 1);
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CPU, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "memory of CUDA device 0, declared as CPU memory");
    a = answer(TB_MEM_DEVICE, 1, NULL);
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CUDA, 0, TB_RUNTIME_CUDA, 2, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "memory of CUDA device 1, declared as memory of CUDA device 0");

    a = answer(TB_MEM_PAGE_LOCKED_HOST, 0, NULL);
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CPU, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 1);
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CUDA, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "page-locked host memory, declared as memory of CUDA device 0");
    a = answer(TB_MEM_HOST, -1, NULL);
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CUDA, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "memory no CUDA device owns (host memory, or device memory already freed), declared as "
                        "memory of CUDA device 0");

    /* Managed memory is valid on both sides. */
    a = answer(TB_MEM_MANAGED, 0, NULL);
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CPU, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 1);
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CUDA, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 1);

    /* A runtime error (a freed pointer) is told for CUDA memory; a CPU
     * pointer the runtime cannot place is host memory. */
    a = answer(TB_MEM_UNKNOWN, -1, "invalid argument");
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CUDA, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "does not know it as memory of CUDA device 0: invalid argument");
    CHECK_EQ(tb_devmem_verdict(TB_DEVICE_CPU, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 1);
}

static void test_dlpack_devices(void)
{
    char why[200];
    tb_dl_placement p;
    tb_mem_answer a;

    tb_devmem_dlpack_placement(tb_kDLCPU, 0, &p);
    CHECK(p.type == TB_DEVICE_CPU && p.index == 0 && p.runtime == TB_RUNTIME_HOST);
    tb_devmem_dlpack_placement(tb_kDLCUDA, 1, &p);
    CHECK(p.type == TB_DEVICE_CUDA && p.index == 1 && p.runtime == TB_RUNTIME_CUDA);
    /* Page-locked host memory is a CPU tensor; managed memory a CUDA one. */
    tb_devmem_dlpack_placement(tb_kDLCUDAHost, 0, &p);
    CHECK(p.type == TB_DEVICE_CPU && p.index == 0 && p.runtime == TB_RUNTIME_HOST);
    /* ... which CUDA checks and orders; each other code its own runtime's. */
    CHECK(p.checker == TB_RUNTIME_CUDA);
    tb_devmem_dlpack_placement(tb_kDLCPU, 0, &p);
    CHECK(p.checker == TB_RUNTIME_HOST);
    tb_devmem_dlpack_placement(tb_kDLCUDAHost, 0, &p);
    tb_devmem_dlpack_placement(tb_kDLCUDAManaged, 1, &p);
    CHECK(p.type == TB_DEVICE_CUDA && p.index == 1 && p.runtime == TB_RUNTIME_CUDA);

    /* kDLCUDAHost: host memory of any type, never device memory. */
    CHECK_EQ(tb_devmem_dlpack_needs_answer(tb_kDLCUDAHost, 0, 0), 0);
    CHECK_EQ(tb_devmem_dlpack_verdict(tb_kDLCUDAHost, 0, TB_RUNTIME_CUDA, 0, NULL, why, sizeof why), 1);
    CHECK_EQ(tb_devmem_dlpack_needs_answer(tb_kDLCUDAHost, 0, 1), 1);
    for (tb_mem_type k = TB_MEM_UNKNOWN; k <= TB_MEM_MANAGED; k++) {
        a = answer(k, 0, NULL);
        CHECK_EQ(tb_devmem_dlpack_verdict(tb_kDLCUDAHost, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why),
                 k != TB_MEM_DEVICE);
    }
    CHECK_CONTAINS(why, "memory of CUDA device 0, labelled kDLCUDAHost");

    /* kDLCUDAManaged: the runtime must say managed, on an existing device. */
    a = answer(TB_MEM_MANAGED, 0, NULL);
    CHECK_EQ(tb_devmem_dlpack_verdict(tb_kDLCUDAManaged, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 1);
    CHECK_EQ(tb_devmem_dlpack_verdict(tb_kDLCUDAManaged, 1, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "CUDA device 1 does not exist (1 found)");
    CHECK_EQ(tb_devmem_dlpack_needs_answer(tb_kDLCUDAManaged, 0, 0), 0);
    CHECK_EQ(tb_devmem_dlpack_verdict(tb_kDLCUDAManaged, 0, TB_RUNTIME_CUDA, 0, NULL, why, sizeof why), 0);
    a = answer(TB_MEM_DEVICE, 0, NULL);
    CHECK_EQ(tb_devmem_dlpack_verdict(tb_kDLCUDAManaged, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "device memory, labelled kDLCUDAManaged");
    a = answer(TB_MEM_HOST, -1, NULL);
    CHECK_EQ(tb_devmem_dlpack_verdict(tb_kDLCUDAManaged, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "host memory, labelled kDLCUDAManaged");
    a = answer(TB_MEM_UNKNOWN, -1, "invalid argument");
    CHECK_EQ(tb_devmem_dlpack_verdict(tb_kDLCUDAManaged, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "does not know it as managed memory: invalid argument");

    /* kDLCUDA and kDLCPU follow from_blob's checks. */
    a = answer(TB_MEM_PAGE_LOCKED_HOST, 0, NULL);
    CHECK_EQ(tb_devmem_dlpack_verdict(tb_kDLCUDA, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "page-locked host memory, declared as memory of CUDA device 0");
    a = answer(TB_MEM_DEVICE, 0, NULL);
    CHECK_EQ(tb_devmem_dlpack_verdict(tb_kDLCPU, 0, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "declared as CPU memory");
    CHECK_EQ(tb_devmem_dlpack_verdict(tb_kDLCUDA, -3, TB_RUNTIME_CUDA, 1, &a, why, sizeof why), 0);
    CHECK_CONTAINS(why, "CUDA device -3 does not exist");
}

/* ---- The stream contract ------------------------------------------------ */

/* ---- The runtimes of the device table ---------------------------------- */

/* CUDA's entry of the table, as tb_cuda_runtime.c defines it, over the
 * stand-in: tb_runtime.c finds it by its name in TB_RUNTIMES. */
static int stand_in_devices;
static int stand_in_device_count(void)
{
    return stand_in_devices;
}

static tb_mem_answer stand_in_ask(uint64_t ptr)
{
    tb_mem_answer a = {TB_MEM_UNKNOWN, -1, NULL};
    a.error = pointer_type(ptr, &a.type, &a.device);
    if (a.error)
        a.type = TB_MEM_UNKNOWN;
    logged("ask(%llx)", (unsigned long long)ptr, 0);
    return a;
}

static const char *stand_in_host_wait(int device, const tb_stream *producer)
{
    return tb_stream_host_wait(&fake, device, producer);
}

const tb_runtime tb_runtime_cuda = {
    .device_count = stand_in_device_count,
    .ask = stand_in_ask,
    .stream_host_wait = stand_in_host_wait,
};

static void test_runtimes(void)
{
    char why[200];

    /* Every runtime of the table has its functions and a name. */
    for (int r = 0; r < TB_RUNTIME_COUNT; r++) {
        CHECK(tb_runtime_get(r) != NULL && tb_runtime_get(r)->device_count && tb_runtime_get(r)->ask);
        CHECK(tb_runtime_names[r] && tb_runtime_names[r][0]);
    }
    CHECK(tb_runtime_get(TB_RUNTIME_CUDA) == &tb_runtime_cuda);
    /* The host's sees no device and has no streams; so is a runtime not in
     * the table. */
    CHECK_EQ(tb_runtime_get(TB_RUNTIME_HOST)->device_count(), 0);
    CHECK(tb_runtime_get(TB_RUNTIME_HOST)->stream_import == NULL);
    CHECK(tb_runtime_get(-1) == tb_runtime_get(TB_RUNTIME_HOST));
    CHECK(tb_runtime_get(TB_RUNTIME_COUNT) == tb_runtime_get(TB_RUNTIME_HOST));

    /* Without devices nothing is asked: host memory passes, a device's is
     * refused by the runtime the table names for it. */
    reset();
    stand_in_devices = 0;
    CHECK_EQ(tb_runtime_devices_anywhere(), 0);
    tb_device cpu = {TB_DEVICE_CPU, 0}, gpu0 = {TB_DEVICE_CUDA, 0}, gpu1 = {TB_DEVICE_CUDA, 1};
    CHECK_EQ(tb_runtime_check_pointer(0x1000, &cpu, why, sizeof why), 1);
    CHECK_EQ(tb_runtime_check_pointer(0x1000, &gpu0, why, sizeof why), 0);
    CHECK_CONTAINS(why, "CUDA device 0 does not exist (0 found)");
    CHECK_LOG("");

    /* With one, host memory is asked about by every device runtime, device
     * memory by its own. */
    stand_in_devices = 1;
    CHECK_EQ(tb_runtime_devices_anywhere(), 1);
    allocate(0x10000, 0x1000, TB_MEM_DEVICE, 0);
    allocate(0x20000, 0x1000, TB_MEM_MANAGED, 0);
    CHECK_EQ(tb_runtime_check_pointer(0x10010, &gpu0, why, sizeof why), 1);
    CHECK_LOG("ask(10010) ");
    CHECK_EQ(tb_runtime_check_pointer(0x10010, &cpu, why, sizeof why), 0);
    CHECK_CONTAINS(why, "memory of CUDA device 0, declared as CPU memory");
    CHECK_EQ(tb_runtime_check_pointer(0x5000, &cpu, why, sizeof why), 1);
    CHECK_EQ(tb_runtime_check_pointer(0x5000, &gpu0, why, sizeof why), 0);
    CHECK_CONTAINS(why, "memory no CUDA device owns");
    CHECK_EQ(tb_runtime_check_pointer(0x10010, &gpu1, why, sizeof why), 0);
    CHECK_CONTAINS(why, "CUDA device 1 does not exist (1 found)");
    rt.fail = "pointer_type";
    CHECK_EQ(tb_runtime_check_pointer(0x10010, &gpu0, why, sizeof why), 0);
    CHECK_CONTAINS(why, "the CUDA runtime does not know it as memory of CUDA device 0: injected failure");

    /* DLPack codes: each asks the runtime of its row. */
    CHECK_EQ(tb_runtime_check_dlpack_pointer(tb_kDLCUDA, 0, 0x10010, why, sizeof why), 1);
    CHECK_EQ(tb_runtime_check_dlpack_pointer(tb_kDLCPU, 0, 0x10010, why, sizeof why), 0);
    CHECK_CONTAINS(why, "memory of CUDA device 0, declared as CPU memory");
    CHECK_EQ(tb_runtime_check_dlpack_pointer(tb_kDLCUDAHost, 0, 0x10010, why, sizeof why), 0);
    CHECK_CONTAINS(why, "memory of CUDA device 0, labelled kDLCUDAHost");
    CHECK_EQ(tb_runtime_check_dlpack_pointer(tb_kDLCUDAHost, 0, 0x5000, why, sizeof why), 1);
    CHECK_EQ(tb_runtime_check_dlpack_pointer(tb_kDLCUDAManaged, 0, 0x20010, why, sizeof why), 1);
    CHECK_EQ(tb_runtime_check_dlpack_pointer(tb_kDLCUDAManaged, 0, 0x10010, why, sizeof why), 0);
    CHECK_CONTAINS(why, "device memory, labelled kDLCUDAManaged");
    stand_in_devices = 0;
}

static void test_stream_parse(void)
{
    tb_stream s;
    const char *why = NULL;
    CHECK(tb_stream_parse(0, 0, &s, &why) && !s.given && s.sync && s.handle == TB_STREAM_LEGACY);
    CHECK(tb_stream_parse(1, -1, &s, &why) && s.given && !s.sync);
    CHECK(tb_stream_parse(1, 1, &s, &why) && s.sync && s.handle == TB_STREAM_LEGACY);
    CHECK(tb_stream_parse(1, 2, &s, &why) && s.sync && s.handle == TB_STREAM_PER_THREAD);
    CHECK(tb_stream_parse(1, 0x7f0012345600, &s, &why) && s.sync && s.handle == (uintptr_t)0x7f0012345600);
    CHECK(!tb_stream_parse(1, 0, &s, &why));
    CHECK_CONTAINS(why, "0 is ambiguous");
    why = NULL;
    CHECK(!tb_stream_parse(1, -2, &s, &why));
    CHECK_CONTAINS(why, "expected -1");
}

static tb_stream stream_of(int given, int64_t value)
{
    tb_stream s;
    const char *why;
    CHECK(tb_stream_parse(given, value, &s, &why));
    return s;
}

static void test_stream_export(void)
{
    tb_stream s;

    /* No stream named, libtorch on its default stream: the same (legacy
     * default) stream, nothing to order. Likewise -1. */
    reset();
    s = stream_of(0, 0);
    CHECK(tb_stream_export(&fake, 0, &s) == NULL);
    CHECK_LOG("");
    s = stream_of(1, -1);
    CHECK(tb_stream_export(&fake, 0, &s) == NULL);
    CHECK_LOG("");

    /* libtorch on another stream: the legacy stream of the tensor's device
     * waits for an event recorded on it; the caller's device comes back. */
    reset();
    rt.device = 1;
    rt.torch_default = 0;
    s = stream_of(0, 0);
    CHECK(tb_stream_export(&fake, 0, &s) == NULL);
    CHECK_LOG("torch_record(0) set_device(0) stream_wait(0x1 on 0) set_device(1) torch_destroy ");
    CHECK_EQ(rt.events_live, 0);
    CHECK_EQ(rt.device, 1);

    /* A consumer's own stream always waits. */
    reset();
    s = stream_of(1, 0x5000);
    CHECK(tb_stream_export(&fake, 0, &s) == NULL);
    CHECK_LOG("torch_record(0) set_device(0) stream_wait(0x5000 on 0) torch_destroy ");
    s = stream_of(1, 2);
    rt.log[0] = 0;
    CHECK(tb_stream_export(&fake, 0, &s) == NULL);
    CHECK_LOG("torch_record(0) set_device(0) stream_wait(0x2 on 0) torch_destroy ");
    CHECK_EQ(rt.events_live, 0);

    /* Failures name the call and the runtime's message; the event is
     * destroyed all the same, and nothing is left half done. */
    reset();
    s = stream_of(1, 0x5000);
    rt.fail = "stream_wait_event";
    const char *e = tb_stream_export(&fake, 0, &s);
    CHECK_CONTAINS(e, "cudaStreamWaitEvent on the consumer's stream: injected failure");
    CHECK_EQ(rt.events_live, 0);
    rt.fail = "torch_record_event";
    e = tb_stream_export(&fake, 0, &s);
    CHECK_CONTAINS(e, "recording an event on libtorch's current stream: injected failure");
    CHECK_EQ(rt.events_live, 0);

    /* A runtime without the call says so. */
    tb_cuda_ops partial = fake;
    partial.stream_wait_event = NULL;
    e = tb_stream_export(&partial, 0, &s);
    CHECK_CONTAINS(e, "lacks the call stream_wait_event");
}

static void test_stream_import(void)
{
    tb_stream s;

    reset();
    s = stream_of(0, 0);
    CHECK(tb_stream_import(&fake, 0, &s) == NULL);
    CHECK_LOG("");

    /* The producer's stream: an event recorded on it, on the data's device,
     * and libtorch's current stream waits for it. */
    reset();
    s = stream_of(1, 0x7000);
    CHECK(tb_stream_import(&fake, 1, &s) == NULL);
    CHECK_LOG("set_device(1) event_create event_record(0x7000) set_device(0) torch_wait(1) event_destroy ");
    CHECK_EQ(rt.events_live, 0);
    CHECK_EQ(rt.device, 0);

    reset();
    rt.fail = "event_record";
    CHECK_CONTAINS(tb_stream_import(&fake, 0, &s), "cudaEventRecord on the producer's stream: injected failure");
    CHECK_EQ(rt.events_live, 0);
    rt.fail = "torch_wait_event";
    CHECK_CONTAINS(tb_stream_import(&fake, 0, &s), "making libtorch's current stream wait: injected failure");
    CHECK_EQ(rt.events_live, 0);
    rt.fail = "event_create";
    CHECK_CONTAINS(tb_stream_import(&fake, 0, &s), "cudaEventCreateWithFlags: injected failure");
    CHECK_EQ(rt.events_live, 0);

    /* Page-locked host memory: the host waits for a named stream only. */
    reset();
    s = stream_of(0, 0);
    CHECK(tb_stream_host_wait(&fake, 0, &s) == NULL);
    s = stream_of(1, -1);
    CHECK(tb_stream_host_wait(&fake, 0, &s) == NULL);
    CHECK_LOG("");
    s = stream_of(1, 0x7000);
    CHECK(tb_stream_host_wait(&fake, 0, &s) == NULL);
    CHECK_LOG("set_device(0) stream_synchronize(0x7000 on 0) ");

    /* An IPC export: the host waits for libtorch's current stream. */
    reset();
    CHECK(tb_stream_host_wait_torch(&fake, 0) == NULL);
    CHECK_LOG("torch_record(0) event_synchronize torch_destroy ");
    CHECK_EQ(rt.events_live, 0);
    rt.fail = "event_synchronize";
    CHECK_CONTAINS(tb_stream_host_wait_torch(&fake, 0), "cudaEventSynchronize: injected failure");
    CHECK_EQ(rt.events_live, 0);
}

/* cuda_synchronize(Index): the device's work is waited for on that device,
 * and the calling thread's current device is the one it had before, on
 * success and on failure alike. */
static void test_device_wait(void)
{
    reset();
    rt.device = 1;
    CHECK(tb_stream_device_wait(&fake, 0) == NULL);
    CHECK_LOG("set_device(0) device_synchronize(on 0) set_device(1) ");
    CHECK_EQ(rt.device, 1);

    reset();
    rt.device = 1;
    rt.fail = "device_synchronize";
    CHECK_CONTAINS(tb_stream_device_wait(&fake, 0), "cudaDeviceSynchronize: injected failure");
    CHECK_EQ(rt.device, 1);

    /* Already current: nothing to put back. */
    reset();
    CHECK(tb_stream_device_wait(&fake, 0) == NULL);
    CHECK_LOG("set_device(0) device_synchronize(on 0) ");

    tb_cuda_ops partial = fake;
    partial.device_synchronize = NULL;
    CHECK_CONTAINS(tb_stream_device_wait(&partial, 0), "lacks the call device_synchronize");
}

/* ---- CUDA IPC handles ---------------------------------------------------- */

static void test_handle_encoding(void)
{
    tb_cuda_handle h, back;
    unsigned char bytes[TB_CUDA_HANDLE_MAX_BYTES];
    for (int i = 0; i < TB_CUDA_IPC_HANDLE_SIZE; i++)
        h.raw[i] = (unsigned char)(i * 3 + 1);

    /* At the allocation's base: the 64 bytes Torchx reads. */
    h.offset = 0;
    CHECK_EQ(tb_cuda_handle_encode(&h, bytes), 64);
    CHECK(memcmp(bytes, h.raw, 64) == 0);
    CHECK(tb_cuda_handle_decode(bytes, 64, &back));
    CHECK(memcmp(back.raw, h.raw, 64) == 0);
    CHECK_EQU(back.offset, 0);

    /* Inside it: 8 more bytes, the offset little-endian. */
    h.offset = 0x0102030405060708ull;
    CHECK_EQ(tb_cuda_handle_encode(&h, bytes), 72);
    CHECK_EQ(bytes[64], 0x08);
    CHECK_EQ(bytes[71], 0x01);
    CHECK(tb_cuda_handle_decode(bytes, 72, &back));
    CHECK_EQU(back.offset, 0x0102030405060708ull);
    CHECK(memcmp(back.raw, h.raw, 64) == 0);

    /* Any other size is no handle. */
    static const size_t sizes[] = {0, 1, 32, 63, 65, 71, 73, 128};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        CHECK(!tb_cuda_handle_decode(bytes, sizes[i], &back));
}

static void test_handle_export_open(void)
{
    reset();
    /* A 2 MiB block of the caching allocator; the tensor is 4 KiB in. */
    fake_allocation *block = allocate(0x700000000000ull, 2 << 20, TB_MEM_DEVICE, 0);
    tb_cuda_handle h;
    CHECK(tb_cuda_handle_export(&fake, block->base + 4096, 1024, &h) == NULL);
    CHECK_LOG("ipc_get(0x700000000000) ");
    CHECK_EQU(h.offset, 4096);
    CHECK(memcmp(h.raw, block->handle, 64) == 0);

    /* Extents the allocation does not hold are refused. */
    CHECK_CONTAINS(tb_cuda_handle_export(&fake, block->base + 4096, 2 << 20, &h), "does not hold");
    CHECK_CONTAINS(tb_cuda_handle_export(&fake, 0x1000, 16, &h), "cuMemGetAddressRange: not a device pointer");
    rt.fail = "ipc_get_handle";
    CHECK_CONTAINS(tb_cuda_handle_export(&fake, block->base, 16, &h), "cudaIpcGetMemHandle: injected failure");

    /* Opened on the exporter's device index; the caller's device is put
     * back; the data starts at the offset. */
    tb_cuda_handle_export(&fake, block->base + 4096, 1024, &h);
    rt.log[0] = 0;
    rt.device = 1;
    tb_cuda_mapping m;
    int caller_fault;
    CHECK(tb_cuda_handle_open(&fake, &h, 0, 1024, &m, &caller_fault) == NULL);
    CHECK_LOG("set_device(0) ipc_open(on 0) set_device(1) ");
    CHECK_EQU(m.base, block->base);
    CHECK_EQU(m.data, block->base + 4096);
    CHECK_EQU(m.size, 2 << 20);
    CHECK_EQ(m.device, 0);
    CHECK_EQ(rt.opened, 1);
    tb_cuda_handle_close(&fake, &m);
    CHECK_EQ(rt.closed, 1);

    /* The whole rest of the allocation fits; a byte more does not, and
     * nothing stays open. */
    CHECK(tb_cuda_handle_open(&fake, &h, 0, (2 << 20) - 4096, &m, &caller_fault) == NULL);
    tb_cuda_handle_close(&fake, &m);
    CHECK_CONTAINS(tb_cuda_handle_open(&fake, &h, 0, (2 << 20) - 4096 + 1, &m, &caller_fault), "do not fit");
    CHECK_EQ(caller_fault, 1);
    h.offset = UINT64_MAX;
    CHECK_CONTAINS(tb_cuda_handle_open(&fake, &h, 0, 1, &m, &caller_fault), "do not fit");
    CHECK_EQ(caller_fault, 1);
    CHECK_EQ(rt.opened, rt.closed);

    /* A handle the runtime does not know: its message, and a hint. */
    h.offset = 0;
    h.raw[0] ^= 0xff;
    const char *e = tb_cuda_handle_open(&fake, &h, 0, 16, &m, &caller_fault);
    CHECK_CONTAINS(e, "cudaIpcOpenMemHandle: invalid resource handle");
    CHECK_CONTAINS(e, "another OS process");
    CHECK_EQ(caller_fault, 0);
    CHECK_EQ(rt.device, 1);

    /* A failure after the open closes what it opened. */
    h.raw[0] ^= 0xff;
    rt.fail = "address_range";
    CHECK_CONTAINS(tb_cuda_handle_open(&fake, &h, 0, 16, &m, &caller_fault), "injected failure");
    CHECK_EQ(rt.opened, rt.closed);
    rt.fail = "set_device";
    CHECK_CONTAINS(tb_cuda_handle_open(&fake, &h, 0, 16, &m, &caller_fault), "cudaSetDevice: injected failure");
    CHECK_EQ(rt.opened, rt.closed);

    /* The device the runtime places the memory on is the tensor's. */
    fake_allocation *other = allocate(0x710000000000ull, 1 << 20, TB_MEM_DEVICE, 1);
    CHECK(tb_cuda_handle_export(&fake, other->base, 64, &h) == NULL);
    CHECK_EQU(h.offset, 0);
    CHECK(tb_cuda_handle_open(&fake, &h, 0, 64, &m, &caller_fault) == NULL);
    CHECK_EQ(m.device, 1);
    tb_cuda_handle_close(&fake, &m);
    CHECK_EQ(rt.opened, rt.closed);

    /* A runtime without IPC: said, nothing called. */
    tb_cuda_ops partial = fake;
    partial.ipc_open_handle = NULL;
    rt.log[0] = 0;
    CHECK_CONTAINS(tb_cuda_handle_open(&partial, &h, 0, 64, &m, &caller_fault), "lacks cudaIpcOpenMemHandle");
    CHECK_LOG("");
    partial = fake;
    partial.address_range = NULL;
    CHECK_CONTAINS(tb_cuda_handle_export(&partial, other->base, 64, &h), "cuMemGetAddressRange");
}

static void test_torch_mem_handle(void)
{
    unsigned char bytes[66], raw[64];
    for (int i = 0; i < 66; i++)
        bytes[i] = (unsigned char)(i + 7);
    /* PyTorch before 2.4: the cudaIpcMemHandle_t alone. */
    CHECK(tb_torch_cuda_mem_handle(bytes, 64, raw) == NULL);
    CHECK(memcmp(raw, bytes, 64) == 0);
    /* Later: a version byte, the type 'c', then the handle. */
    for (int version = 1; version <= 3; version++) {
        bytes[0] = (unsigned char)version;
        bytes[1] = 'c';
        memset(raw, 0, sizeof raw);
        CHECK(tb_torch_cuda_mem_handle(bytes, 66, raw) == NULL);
        CHECK(memcmp(raw, bytes + 2, 64) == 0);
    }
    bytes[1] = 'e';
    CHECK_CONTAINS(tb_torch_cuda_mem_handle(bytes, 66, raw), "expandable segments");
    bytes[0] = 0;
    bytes[1] = 'c';
    CHECK_CONTAINS(tb_torch_cuda_mem_handle(bytes, 66, raw), "version byte is 0");
    static const size_t sizes[] = {0, 1, 63, 65, 67, 72, 128};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        CHECK_CONTAINS(tb_torch_cuda_mem_handle(bytes, sizes[i], raw), "64 bytes, or 66");

    /* The block opens from its base, and the storage starts at its offset. */
    reset();
    fake_allocation *block = allocate(0x720000000000ull, 2 << 20, TB_MEM_DEVICE, 0);
    bytes[0] = 2;
    memcpy(bytes + 2, block->handle, 64);
    tb_cuda_handle h = {.offset = 512};
    CHECK(tb_torch_cuda_mem_handle(bytes, 66, h.raw) == NULL);
    tb_cuda_mapping m;
    int caller_fault;
    CHECK(tb_cuda_handle_open(&fake, &h, 0, 1024, &m, &caller_fault) == NULL);
    CHECK_EQU(m.data, block->base + 512);
    tb_cuda_handle_close(&fake, &m);
    CHECK_EQ(rt.opened, rt.closed);
}

/* A counter file as PyTorch's producer makes it: the header's count is
 * the producer's reference, and slot `slot` the receiver's share. */
static char counter_name[64];

/* A share's counter, read through the library's own mapping. */
static int64_t counter_value(const tb_torch_counter *c)
{
    return atomic_load((atomic_llong *)((char *)c->base + TB_TORCH_COUNTER_HEADER) + c->slot);
}

static void *make_counter_file(int slot, int64_t value)
{
    snprintf(counter_name, sizeof counter_name, "/tb_test_counters.%d", (int)getpid());
    int fd = shm_open(counter_name, O_CREAT | O_EXCL | O_RDWR, 0600);
    size_t length = TB_TORCH_COUNTER_HEADER + TB_TORCH_COUNTER_SLOTS * sizeof(int64_t);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)length) == 0);
    void *base = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    *(int *)base = 1;
    ((int64_t *)((char *)base + TB_TORCH_COUNTER_HEADER))[slot] = value;
    return base;
}

static int file_exists(void)
{
    int fd = shm_open(counter_name, O_RDWR, 0);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

static void test_torch_counter(void)
{
    size_t length = TB_TORCH_COUNTER_HEADER + TB_TORCH_COUNTER_SLOTS * sizeof(int64_t);
    void *producer = make_counter_file(3, 1);
    int *file_count = (int *)producer;
    int64_t *slots = (int64_t *)((char *)producer + TB_TORCH_COUNTER_HEADER);
    tb_torch_counter c;
    const char *caller_field;

    /* Opening maps the file (one reference in its header) and leaves the
     * share's counter as the producer set it. */
    CHECK(tb_torch_counter_open(counter_name, strlen(counter_name), 3, &c, &caller_field) == NULL);
    CHECK_EQ(*file_count, 2);
    CHECK_EQ(slots[3], 1);
    CHECK_EQ(counter_value(&c), 1);
    /* The release drops the share once, and the file's reference. */
    CHECK_EQ(tb_torch_counter_release(&c), 0);
    CHECK_EQ(slots[3], 0);
    CHECK_EQ(*file_count, 1);
    CHECK(file_exists());

    /* A share already released opens no more; nothing stays mapped. */
    CHECK_CONTAINS(tb_torch_counter_open(counter_name + 1, strlen(counter_name) - 1, 3, &c, &caller_field),
                   "already released");
    CHECK(caller_field && strcmp(caller_field, "ref_counter_offset") == 0);
    CHECK_EQ(*file_count, 1);

    /* Never below zero, whoever dropped it first. */
    slots[5] = 1;
    CHECK(tb_torch_counter_open(counter_name, strlen(counter_name), 5, &c, &caller_field) == NULL);
    slots[5] = 0;
    CHECK_EQ(tb_torch_counter_release(&c), -1);
    CHECK_EQ(slots[5], 0);

    /* Counters past the file's end, and names that are none. */
    CHECK_CONTAINS(tb_torch_counter_open(counter_name, strlen(counter_name), TB_TORCH_COUNTER_SLOTS, &c, &caller_field),
                   "past the end");
    CHECK_CONTAINS(tb_torch_counter_open(counter_name, strlen(counter_name), -1, &c, &caller_field),
                   "not a counter index");
    CHECK_CONTAINS(tb_torch_counter_open("/a/b", 4, 0, &c, &caller_field), "not a shared-memory name");
    CHECK(caller_field && strcmp(caller_field, "ref_counter_handle") == 0);
    CHECK_CONTAINS(tb_torch_counter_open("/", 1, 0, &c, &caller_field), "not a shared-memory name");
    CHECK_EQ(*file_count, 1);

    /* The producer gone first (its reference dropped): the last holder
     * unlinks the file. */
    slots[7] = 1;
    CHECK(tb_torch_counter_open(counter_name, strlen(counter_name), 7, &c, &caller_field) == NULL);
    atomic_fetch_sub((atomic_int *)file_count, 1);
    CHECK_EQ(tb_torch_counter_release(&c), 0);
    CHECK_EQ(*file_count, 0);
    CHECK(!file_exists());
    munmap(producer, length);
    CHECK_CONTAINS(tb_torch_counter_open(counter_name, strlen(counter_name), 7, &c, &caller_field), "cannot open");
}

static void test_torch_event(void)
{
    reset();
    unsigned char event[TB_TORCH_CUDA_EVENT_SIZE] = {9};
    /* Not required: nothing is called. */
    CHECK(tb_torch_cuda_wait_event(&fake, 1, 0, event) == NULL);
    CHECK_LOG("");
    /* Required: libtorch's current stream waits on the producer's event,
     * which is then let go. */
    CHECK(tb_torch_cuda_wait_event(&fake, 1, 1, event) == NULL);
    CHECK_LOG("ipc_open_event(9) torch_wait(1) event_destroy ");
    CHECK_EQ(rt.events_live, 0);
    rt.fail = "ipc_open_event";
    CHECK_CONTAINS(tb_torch_cuda_wait_event(&fake, 1, 1, event), "cudaIpcOpenEventHandle: injected failure");
    CHECK_EQ(rt.events_live, 0);
    rt.fail = "torch_wait_event";
    CHECK_CONTAINS(tb_torch_cuda_wait_event(&fake, 1, 1, event), "producer's event: injected failure");
    CHECK_EQ(rt.events_live, 0);
    tb_cuda_ops partial = fake;
    partial.ipc_open_event = NULL;
    CHECK_CONTAINS(tb_torch_cuda_wait_event(&partial, 1, 1, event), "lacks cudaIpcOpenEventHandle");
    CHECK(tb_torch_cuda_wait_event(&partial, 1, 0, event) == NULL);
}

int main(void)
{
    test_pointer_checks();
    test_dlpack_devices();
    test_runtimes();
    test_stream_parse();
    test_stream_export();
    test_stream_import();
    test_device_wait();
    test_handle_encoding();
    test_handle_export_open();
    test_torch_mem_handle();
    test_torch_counter();
    test_torch_event();

    printf("c_test_cuda: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
