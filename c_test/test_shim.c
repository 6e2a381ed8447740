/* Tests of the libtorch shim through its C API alone: no BEAM. Above all the
 * deleter contract: the context of a foreign-memory tensor is released
 * exactly once, when the last tensor using the memory is gone, or at once
 * when the call fails. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tb_dtype.h"
#include "torch_shim.h"

#include "check.h"

/* A context that counts how often it is released. */
typedef struct {
    int releases;
} counter;

static void release_counter(void *ctx)
{
    ((counter *)ctx)->releases++;
}

static const int FLOAT32 = 6; /* c10::ScalarType::Float, as in tb_dtype.c */

static void test_deleter_runs_once_after_last_view(void)
{
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t sizes[2] = {2, 3}, strides[2] = {3, 1};
    counter c = {0};
    tb_shim_tensor *t, *slice, *tr;
    tb_shim_error err;

    CHECK(tb_shim_from_blob(data, 2, sizes, strides, FLOAT32, TB_DEVICE_CPU, 0, &c, release_counter, &t, &err));
    CHECK(tb_shim_narrow(t, 1, 1, 2, &slice, &err));
    CHECK(tb_shim_transpose(slice, 0, 1, &tr, &err));

    tb_shim_info info;
    tb_shim_info_of(tr, &info);
    CHECK(info.ndim == 2 && info.sizes[0] == 2 && info.sizes[1] == 2);
    CHECK(info.strides[0] == 1 && info.strides[1] == 3);
    CHECK(info.data == &data[1]);
    CHECK(info.storage_data == data);
    CHECK(info.storage_deleter == release_counter);
    CHECK(!info.is_contiguous);

    tb_shim_release(t);
    tb_shim_release(slice);
    CHECK(c.releases == 0); /* tr still uses the memory */

    float out[4];
    CHECK(tb_shim_to_bytes(tr, out, &err));
    CHECK(out[0] == 2 && out[1] == 5 && out[2] == 3 && out[3] == 6);

    tb_shim_release(tr);
    CHECK(c.releases == 1);
}

/* An alias shares the base's storage: another dtype, offset and layout over
 * the same memory, kept alive by the storage alone once the base is gone. */
static void test_alias_shares_the_storage(void)
{
    int32_t data[6] = {1, 2, 3, 4, 5, 6};
    int64_t sizes[1] = {6}, strides[1] = {1};
    counter c = {0};
    tb_shim_tensor *base, *alias;
    tb_shim_error err;

    CHECK(tb_shim_from_blob(data, 1, sizes, strides, 3 /* Int */, TB_DEVICE_CPU, 0, &c, release_counter, &base, &err));
    int64_t alias_sizes[2] = {2, 4}, alias_strides[2] = {1, 2}; /* int16 elements 2..9, transposed */
    CHECK(tb_shim_alias(base, 4, 2, alias_sizes, alias_strides, 2 /* Short */, &alias, &err));
    tb_shim_release(base);
    CHECK(c.releases == 0); /* the alias holds the storage */

    tb_shim_info info;
    tb_shim_info_of(alias, &info);
    CHECK(info.scalar_type == 2 && info.ndim == 2 && info.sizes[0] == 2 && info.strides[1] == 2);
    CHECK(info.data == (char *)data + 4 && info.storage_data == data);
    CHECK(info.storage_context == &c && !info.is_contiguous);

    int16_t out[8];
    CHECK(tb_shim_to_bytes(alias, out, &err));
    const int16_t *halves = (const int16_t *)data;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            CHECK(out[i * 4 + j] == halves[2 + i + 2 * j]);

    tb_shim_release(alias);
    CHECK(c.releases == 1);
}

static void test_failure_releases_context_at_once(void)
{
    float data[4] = {0};
    int64_t sizes[1] = {4}, strides[1] = {1};
    counter c = {0};
    tb_shim_tensor *t = NULL;
    tb_shim_error err = {0};

    /* A CUDA device in a libtorch without CUDA, or an index it lacks. */
    int ok = tb_shim_from_blob(data, 1, sizes, strides, FLOAT32, TB_DEVICE_CUDA, 99, &c, release_counter, &t, &err);
    if (!ok) {
        CHECK(c.releases == 1);
        CHECK(strlen(err.message) > 0);
    } else {
        tb_shim_release(t);
        CHECK(c.releases == 1);
    }
}

/* A device type the table (tb_device.h) lacks is refused, never taken for
 * the CPU: the context is released at once, and nothing is copied. */
static void test_unknown_device_type_is_refused(void)
{
    float data[4] = {0};
    int64_t sizes[1] = {4}, strides[1] = {1};
    counter c = {0};
    tb_shim_tensor *t = NULL, *copy = NULL;
    tb_shim_error err = {0};
    CHECK(!tb_shim_from_blob(data, 1, sizes, strides, FLOAT32, TB_DEVICE_COUNT, 0, &c, release_counter, &t, &err));
    CHECK(c.releases == 1 && t == NULL);
    CHECK(strstr(err.message, "tb_device.h") != NULL);
    CHECK(tb_shim_zeros(1, sizes, FLOAT32, &t, &err));
    CHECK(!tb_shim_to_device(t, -1, 0, &copy, &err) && copy == NULL);
    CHECK(strstr(err.message, "tb_device.h") != NULL);
    /* And every device type of the table is libtorch's of the same value. */
    tb_shim_info info;
    tb_shim_info_of(t, &info);
    CHECK(info.device_type == TB_DEVICE_CPU && info.torch_device_type == tb_device_torch_type(TB_DEVICE_CPU));
    tb_shim_release(t);
}

static void test_write_and_read_through_views(void)
{
    int64_t sizes[2] = {2, 3};
    tb_shim_tensor *t, *tr;
    tb_shim_error err;
    const int32_t src[6] = {1, 2, 3, 4, 5, 6};

    CHECK(tb_shim_from_bytes(src, 2, sizes, 3 /* Int */, &t, &err));
    CHECK(tb_shim_transpose(t, 0, 1, &tr, &err));

    /* Row-major bytes of the transposed view go to the right places. */
    const int32_t transposed[6] = {10, 40, 20, 50, 30, 60};
    CHECK(tb_shim_write_bytes(tr, transposed, &err));
    int32_t out[6];
    CHECK(tb_shim_to_bytes(t, out, &err));
    const int32_t expected[6] = {10, 20, 30, 40, 50, 60};
    CHECK(memcmp(out, expected, sizeof out) == 0);

    tb_shim_info info;
    tb_shim_info_of(t, &info);
    CHECK(info.scalar_type == 3 && info.device_type == TB_DEVICE_CPU && info.is_contiguous);
    CHECK(info.storage_bytes == sizeof src);
    tb_shim_release(tr);
    tb_shim_release(t);
}

static void test_zeros_and_empty(void)
{
    int64_t sizes[2] = {0, 5};
    tb_shim_tensor *t;
    tb_shim_error err;
    CHECK(tb_shim_zeros(2, sizes, FLOAT32, &t, &err));
    tb_shim_info info;
    tb_shim_info_of(t, &info);
    CHECK(info.ndim == 2 && info.sizes[0] == 0 && info.storage_bytes == 0);
    CHECK(tb_shim_to_bytes(t, NULL, &err)); /* nothing to copy */
    tb_shim_release(t);

    /* An empty view over no memory, and its context. */
    counter c = {0};
    int64_t strides[2] = {5, 1};
    CHECK(tb_shim_from_blob(NULL, 2, sizes, strides, FLOAT32, TB_DEVICE_CPU, 0, &c, release_counter, &t, &err));
    tb_shim_release(t);
    CHECK(c.releases == 1);
}

static void test_errors_are_messages(void)
{
    int64_t sizes[1] = {4};
    tb_shim_tensor *t, *out = NULL;
    tb_shim_error err = {0};
    CHECK(tb_shim_zeros(1, sizes, FLOAT32, &t, &err));
    /* The NIF validates first; the shim must still fail cleanly. */
    CHECK(!tb_shim_narrow(t, 3, 0, 1, &out, &err));
    CHECK(strlen(err.message) > 0 && out == NULL);
    CHECK(!tb_shim_transpose(t, 0, 7, &out, &err));
    tb_shim_release(t);
}

/* A BEAM binary is only 8-byte aligned; copies must not assume more
 * (complex128 elements are 16 bytes). */
static void test_copies_to_and_from_8_byte_aligned_memory(void)
{
    _Alignas(16) double buffer[2 * 3 + 1];
    double *unaligned = buffer + 1; /* 8 mod 16 */
    int64_t sizes[1] = {3};
    tb_shim_tensor *t, *tr;
    tb_shim_error err;
    for (int i = 0; i < 6; i++)
        unaligned[i] = i + 1;
    CHECK(tb_shim_from_bytes(unaligned, 1, sizes, 10 /* ComplexDouble */, &t, &err));
    double out_storage[2 * 3 + 1];
    double *out = out_storage + ((uintptr_t)out_storage % 16 == 0 ? 1 : 0);
    CHECK(tb_shim_to_bytes(t, out, &err));
    CHECK(memcmp(out, unaligned, 6 * sizeof(double)) == 0);
    CHECK(tb_shim_write_bytes(t, out, &err));

    int64_t sizes2[2] = {1, 3};
    tb_shim_tensor *m;
    CHECK(tb_shim_from_bytes(unaligned, 2, sizes2, 10, &m, &err));
    CHECK(tb_shim_transpose(m, 0, 1, &tr, &err));
    CHECK(tb_shim_write_bytes(tr, unaligned, &err)); /* the staged path */
    CHECK(tb_shim_to_bytes(tr, out, &err));
    CHECK(memcmp(out, unaligned, 6 * sizeof(double)) == 0);
    tb_shim_release(tr);
    tb_shim_release(m);
    tb_shim_release(t);
}

static void test_scalar_types_match_the_table(void)
{
    for (int i = 0; i < TB_DT_COUNT; i++) {
        int st = tb_dtypes[i].torch_scalar_type;
        if (!tb_shim_has_scalar_type(st))
            continue;
        int64_t sizes[1] = {3};
        tb_shim_tensor *t;
        tb_shim_error err;
        CHECK(tb_shim_zeros(1, sizes, st, &t, &err));
        tb_shim_info info;
        tb_shim_info_of(t, &info);
        CHECK(info.scalar_type == st);
        CHECK(info.storage_bytes == 3u * tb_dtypes[i].element_size);
        tb_shim_release(t);
    }
    CHECK(tb_shim_has_scalar_type(6) && tb_shim_has_scalar_type(15));
    CHECK(!tb_shim_has_scalar_type(12)); /* QInt8: not in the table */
}

static void test_contiguous_copies_a_view(void)
{
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t sizes[2] = {2, 3}, strides[2] = {3, 1};
    counter c = {0};
    tb_shim_tensor *t, *tr, *copy;
    tb_shim_error err;
    CHECK(tb_shim_from_blob(data, 2, sizes, strides, FLOAT32, TB_DEVICE_CPU, 0, &c, release_counter, &t, &err));
    CHECK(tb_shim_transpose(t, 0, 1, &tr, &err));
    CHECK(tb_shim_contiguous(tr, &copy, &err));
    tb_shim_info info;
    tb_shim_info_of(copy, &info);
    CHECK(info.is_contiguous && info.sizes[0] == 3 && info.sizes[1] == 2 && info.strides[0] == 2);
    CHECK(info.data != (void *)data);
    float *f = info.data;
    CHECK(f[0] == 1 && f[1] == 4 && f[2] == 2 && f[5] == 6);
    tb_shim_release(t);
    tb_shim_release(tr);
    CHECK(c.releases == 1); /* the copy holds none of the foreign memory */
    tb_shim_release(copy);
}

/* libtorch's stream of a CUDA device: with a libtorch without CUDA every
 * call says so and nothing else happens; with one (a GPU machine), an event
 * is recorded on the default stream and waited for. */
static void test_cuda_stream_calls(void)
{
    tb_shim_error err = {0};
    void *event = NULL;
    if (!tb_shim_cuda_built()) {
        CHECK(tb_shim_cuda_stream_is_default(0) == 0);
        CHECK(!tb_shim_cuda_record_event(0, &event, &err));
        CHECK(strstr(err.message, "without CUDA") != NULL);
        CHECK(event == NULL);
        err.message[0] = 0;
        CHECK(!tb_shim_cuda_wait_event(0, NULL, &err));
        CHECK(strstr(err.message, "without CUDA") != NULL);
        tb_shim_cuda_destroy_event(0, NULL);
        return;
    }
    CHECK(tb_shim_cuda_stream_is_default(0) == 1);
    if (tb_shim_cuda_record_event(0, &event, &err)) {
        CHECK(event != NULL);
        CHECK(tb_shim_cuda_wait_event(0, event, &err));
        tb_shim_cuda_destroy_event(0, event);
    } else {
        /* A CUDA libtorch on a machine without a GPU. */
        CHECK(strlen(err.message) > 0);
    }
}

int main(void)
{
    test_contiguous_copies_a_view();
    test_cuda_stream_calls();
    test_deleter_runs_once_after_last_view();
    test_alias_shares_the_storage();
    test_failure_releases_context_at_once();
    test_unknown_device_type_is_refused();
    test_write_and_read_through_views();
    test_zeros_and_empty();
    test_errors_are_messages();
    test_copies_to_and_from_8_byte_aligned_memory();
    test_scalar_types_match_the_table();
    printf("shim_test (libtorch %s): %d checks, %d failures\n", tb_shim_torch_version(), checks, failures);
    return failures ? 1 : 0;
}
