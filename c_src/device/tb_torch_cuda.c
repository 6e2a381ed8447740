#define _GNU_SOURCE /* shm_unlink */
#include "tb_torch_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_fault.h"
#include "tb_shm_names.h"

_Static_assert(TB_TORCH_COUNTER_NAME_SIZE >= NAME_MAX, "room for any shared-memory name");

/* The counters are int64_t, which PyTorch's consumers decrement in place
 * (the header's count is tb_shm_names.h's). */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "a share's counter must be a lock-free 64-bit int");
_Static_assert(sizeof(atomic_llong) == sizeof(int64_t), "a share's counter is 64 bits");

static _Thread_local char message[400];

const char *tb_torch_cuda_mem_handle(const unsigned char *bytes, size_t size,
                                     unsigned char raw[TB_CUDA_IPC_HANDLE_SIZE])
{
    if (size == TB_CUDA_IPC_HANDLE_SIZE) {
        memcpy(raw, bytes, TB_CUDA_IPC_HANDLE_SIZE);
        return NULL;
    }
    if (size != TB_CUDA_IPC_HANDLE_SIZE + 2) {
        snprintf(message, sizeof message,
                 "a PyTorch CUDA handle is %d bytes, or %d with a version and a type byte; got %zu",
                 TB_CUDA_IPC_HANDLE_SIZE, TB_CUDA_IPC_HANDLE_SIZE + 2, size);
        return message;
    }
    /* Version 0 never existed; the payload of type 'c' has kept its form. */
    if (bytes[0] == 0)
        return "the handle's version byte is 0, which no PyTorch writes";
    if (bytes[1] != TB_TORCH_HANDLE_CUDA_MALLOC) {
        snprintf(message, sizeof message,
                 "the handle names a block of type '%c' (0x%02x); only cudaMalloc blocks ('c') open here "
                 "(PyTorch's expandable segments, 'e', do not)",
                 bytes[1] >= 0x20 && bytes[1] < 0x7f ? bytes[1] : '?', bytes[1]);
        return message;
    }
    memcpy(raw, bytes + 2, TB_CUDA_IPC_HANDLE_SIZE);
    return NULL;
}

static atomic_llong *counter_of(const tb_torch_counter *c)
{
    return (atomic_llong *)((char *)c->base + TB_TORCH_COUNTER_HEADER) + c->slot;
}

/* The share's counter, read or dropped, under the SIGBUS guard: the file
 * is a region another program can shrink. */
typedef struct {
    atomic_llong *counter;
    int64_t value;
    int drop;
} counter_op;

static void counter_run(void *arg)
{
    counter_op *op = arg;
    long long v = atomic_load(op->counter);
    if (op->drop) {
        while (v > 0 && !atomic_compare_exchange_weak(op->counter, &v, v - 1))
            ;
        op->value = v > 0 ? v - 1 : -1;
    } else {
        op->value = v;
    }
}

static int64_t counter_access(const tb_torch_counter *c, int drop)
{
    counter_op op = {.counter = counter_of(c), .value = -1, .drop = drop};
    return tb_fault_run(counter_run, &op) ? op.value : -1;
}

static void drop_file_reference(tb_torch_counter *c)
{
    if (tb_shm_header_drop(c->base) == 1)
        shm_unlink(c->name); /* ENOENT: the producer's shm manager removed it already */
    munmap(c->base, c->length);
    c->base = NULL;
}

const char *tb_torch_counter_open(const char *name, size_t name_size, int64_t slot, tb_torch_counter *out,
                                  const char **caller_field)
{
    *caller_field = "ref_counter_handle";
    if (!tb_shm_name(name, name_size, out->name, sizeof out->name))
        return "ref_counter_handle: not a shared-memory name";
    *caller_field = "ref_counter_offset";
    if (slot < 0 || slot >= (int64_t)((SIZE_MAX - TB_TORCH_COUNTER_HEADER) / sizeof(int64_t)))
        return "ref_counter_offset: not a counter index";
    out->slot = slot;

    struct stat st;
    int error;
    int fd = tb_shm_open(out->name, 0, &st, &error);
    if (fd < 0) {
        *caller_field = "ref_counter_handle";
        snprintf(message, sizeof message, "ref_counter_handle: cannot open %s: %s%s", out->name, tb_shm_strerror(error),
                 error == ENOENT ? " (its producer ended, or released every share in it)" : "");
        return message;
    }
    size_t needed = TB_TORCH_COUNTER_HEADER + ((size_t)slot + 1) * sizeof(int64_t);
    if ((uint64_t)st.st_size < needed) {
        close(fd);
        snprintf(message, sizeof message, "ref_counter_offset: counter %lld is past the end of %s (%lld bytes)",
                 (long long)slot, out->name, (long long)st.st_size);
        return message;
    }
    out->length = (size_t)st.st_size;
    out->base = mmap(NULL, out->length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    error = errno;
    close(fd);
    if (out->base == MAP_FAILED) {
        *caller_field = NULL;
        snprintf(message, sizeof message, "cannot map %s: %s", out->name, strerror(error));
        return message;
    }
    int seen;
    if (tb_shm_header_take(out->base, &seen) != 1) {
        munmap(out->base, out->length);
        *caller_field = "ref_counter_handle";
        snprintf(message, sizeof message, "ref_counter_handle: %s is being freed by its last user", out->name);
        return message;
    }
    int64_t value = counter_access(out, 0);
    if (value < 1) {
        drop_file_reference(out);
        snprintf(message, sizeof message,
                 "ref_counter_offset: counter %lld of %s is %lld: the share was already released (a share opens "
                 "once)",
                 (long long)slot, out->name, (long long)value);
        return message;
    }
    *caller_field = NULL;
    return NULL;
}

int64_t tb_torch_counter_release(tb_torch_counter *c)
{
    int64_t next = counter_access(c, 1);
    drop_file_reference(c);
    return next;
}

const char *tb_torch_cuda_wait_event(const tb_cuda_ops *ops, int device, int sync_required,
                                     const unsigned char event[TB_TORCH_CUDA_EVENT_SIZE])
{
    if (!sync_required)
        return NULL;
    if (!ops->ipc_open_event || !ops->torch_wait_event || !ops->event_destroy)
        return "the CUDA runtime in use lacks cudaIpcOpenEventHandle or cudaEventDestroy";
    void *ev = NULL;
    const char *e = ops->ipc_open_event(event, &ev);
    if (e) {
        snprintf(message, sizeof message, "cudaIpcOpenEventHandle: %s", e);
        return message;
    }
    if ((e = ops->torch_wait_event(device, ev))) {
        snprintf(message, sizeof message, "waiting on the producer's event: %s", e);
        e = message;
    }
    /* The wait is queued; the event's resources go when it completes. */
    (void)ops->event_destroy(ev);
    return e;
}
