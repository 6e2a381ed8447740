// The libtorch shim: the only C++ in the project and the only file that
// includes libtorch. Each entry is noexcept and turns any exception into a
// message in tb_shim_error, so no C++ exception ever reaches the BEAM.
#include "torch_shim.h"
#include "tb_dtype.h"
#include "tb_fault.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/ScalarType.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/TensorOptions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

using TensorImplPtr = c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

#define TB_TORCH_AT_LEAST(major, minor) \
    (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// The dtype table stores c10::ScalarType as numbers; each must be libtorch's,
// for every group of the table the linked libtorch has (a group is the
// release that brought it, tb_dtype_since).
#define TB_ASSERT_SCALAR_TYPE(id, name, code, bits, size, st, c10_name, nx_kind, nx_bits) \
    static_assert(static_cast<int>(c10::ScalarType::c10_name) == (st), "ScalarType::" #c10_name);

TB_DTYPES_TORCH_1_13(TB_ASSERT_SCALAR_TYPE)
#if TB_TORCH_AT_LEAST(2, 1)
TB_DTYPES_TORCH_2_1(TB_ASSERT_SCALAR_TYPE)
#endif
#if TB_TORCH_AT_LEAST(2, 2)
TB_DTYPES_TORCH_2_2(TB_ASSERT_SCALAR_TYPE)
#endif
#if TB_TORCH_AT_LEAST(2, 3)
TB_DTYPES_TORCH_2_3(TB_ASSERT_SCALAR_TYPE)
#endif
#if TB_TORCH_AT_LEAST(2, 7)
TB_DTYPES_TORCH_2_7(TB_ASSERT_SCALAR_TYPE)
#endif
#if TB_TORCH_AT_LEAST(2, 8)
TB_DTYPES_TORCH_2_8(TB_ASSERT_SCALAR_TYPE)
#endif

namespace
{

void set_error(tb_shim_error *err, const char *what, int no_memory = 0) noexcept
{
    if (err) {
        std::snprintf(err->message, sizeof err->message, "%s", what);
        err->no_memory = no_memory;
        err->vanished = 0;
    }
}

// A host allocation that failed: the callers of allocate() have checked the
// shape, the dtype and the byte count, so the allocator alone can fail.
struct NoHostMemory : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Host memory that vanished under a guarded copy (host_copy).
struct MemoryVanished : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A new tensor of that layout, its elements not set. On the host, any
// failure is the allocator's, said as such (libtorch's own text names its
// source file); a device's allocator throws OutOfMemoryError itself.
at::Tensor allocate(c10::IntArrayRef sizes, const at::TensorOptions &options)
{
    if (options.device().is_cpu()) {
        try {
            return at::empty(sizes, options);
        } catch (const c10::Error &e) {
            throw NoHostMemory(e.what_without_backtrace());
        } catch (const std::bad_alloc &e) {
            throw NoHostMemory(e.what());
        }
    }
    return at::empty(sizes, options);
}

// Runs body; any exception becomes an error message and a 0 return.
template <typename F> int guarded(tb_shim_error *err, F &&body) noexcept
{
    try {
        body();
        return 1;
    } catch (const NoHostMemory &e) {
        set_error(err, e.what(), 1);
    } catch (const MemoryVanished &e) {
        set_error(err, e.what());
        if (err)
            err->vanished = 1;
    } catch (const c10::OutOfMemoryError &e) {
        set_error(err, e.what_without_backtrace(), 1);
    } catch (const std::bad_alloc &e) {
        set_error(err, e.what(), 1);
    } catch (const c10::Error &e) {
        set_error(err, e.what_without_backtrace());
    } catch (const std::exception &e) {
        set_error(err, e.what());
    } catch (...) {
        set_error(err, "unknown libtorch exception");
    }
    return 0;
}

c10::ScalarType scalar_type(int st)
{
    return static_cast<c10::ScalarType>(st);
}

tb_shim_tensor *release_handle(at::Tensor &&t)
{
    return reinterpret_cast<tb_shim_tensor *>(t.unsafeReleaseTensorImpl());
}

c10::TensorImpl *impl_of(const tb_shim_tensor *t)
{
    return reinterpret_cast<c10::TensorImpl *>(const_cast<tb_shim_tensor *>(t));
}

// A new owning at::Tensor for a handle; the handle keeps its own reference.
at::Tensor borrow(tb_shim_tensor *t)
{
    // reclaim_copy takes the new reference itself; a separate incref (which
    // tests for null) made GCC 14+ see a null TensorImpl in reclaim's check.
    return at::Tensor(TensorImplPtr::reclaim_copy(impl_of(t)));
}

c10::Device cuda_device(int device_index)
{
    return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index));
}

// The device table (tb_device.h) agrees with libtorch.
#define TB_DEVICE_CHECK(id, atom, c10name, torch, dlpack, indexed, runtime) \
    static_assert(static_cast<int>(c10::DeviceType::c10name) == (torch), "tb_device.h: " #atom);
TB_DEVICE_TYPES(TB_DEVICE_CHECK)
#undef TB_DEVICE_CHECK

// Our device as libtorch's; a device type the table lacks throws. A device
// type that is not indexed (the CPU) takes no index.
c10::Device torch_device(int device_type, int device_index)
{
    int torch_type = tb_device_torch_type(device_type);
    if (torch_type < 0)
        throw std::invalid_argument("device type " + std::to_string(device_type) + " is not in tb_device.h");
    auto type = static_cast<c10::DeviceType>(torch_type);
    return tb_device_indexed(device_type) ? c10::Device(type, static_cast<c10::DeviceIndex>(device_index))
                                          : c10::Device(type);
}

// CUDA's implementation of c10's device guard interface, registered by
// libc10_cuda when libtorch has CUDA; nullptr otherwise.
const c10::impl::DeviceGuardImplInterface *cuda_guard()
{
    return c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA) ? c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
                                                                : nullptr;
}

const c10::impl::DeviceGuardImplInterface &require_cuda_guard()
{
    const c10::impl::DeviceGuardImplInterface *guard = cuda_guard();
    if (!guard)
        throw std::runtime_error("this libtorch was built without CUDA");
    return *guard;
}

// A plain dense tensor over a storage: the layout starts byte_offset bytes
// in (a multiple of the element size). Its dispatch keys are those of its
// dtype on the storage's device, never a base tensor's, which may carry a
// conjugate or negative bit.
tb_shim_tensor *dense_tensor(c10::Storage storage, uint64_t byte_offset, int ndim, const int64_t *sizes,
                             const int64_t *strides, int st)
{
    caffe2::TypeMeta dtype = c10::scalarTypeToTypeMeta(scalar_type(st));
    c10::DispatchKeySet keys(c10::computeDispatchKey(scalar_type(st), c10::kStrided, storage.device()));
    auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), keys, dtype);
    impl->set_sizes_and_strides(c10::IntArrayRef(sizes, ndim), c10::IntArrayRef(strides, ndim));
    if (byte_offset)
        impl->set_storage_offset(static_cast<int64_t>(byte_offset / dtype.itemsize()));
    return reinterpret_cast<tb_shim_tensor *>(impl.release());
}

// n bytes of host memory as a flat uint8 tensor that does not own them
// (the caller's buffer outlives it: it lives only during one copy).
at::Tensor host_bytes(void *data, size_t n)
{
    c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), n, c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)), nullptr, false));
    int64_t size = static_cast<int64_t>(n), stride = 1;
    tb_shim_tensor *h = dense_tensor(std::move(storage), 0, 1, &size, &stride, static_cast<int>(c10::ScalarType::Byte));
    return at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim(reinterpret_cast<c10::TensorImpl *>(h)));
}

// A dense tensor's memory as a flat uint8 view of it.
at::Tensor bytes_of(const at::Tensor &dense)
{
    return dense.reshape({-1}).view(at::kByte);
}

// A host tensor's elements to or from row-major bytes: on the calling
// thread, under the SIGBUS guard (tb_fault.h), since host memory may be a
// mapping another program shrinks. libtorch's own copies would run on its
// worker threads, where no guard is armed.
void host_copy(const at::Tensor &t, void *dense, bool to_dense)
{
    if (!tb_fault_copy_strided(t.data_ptr(), static_cast<int>(t.dim()), t.sizes().data(), t.strides().data(),
                               t.element_size(), dense, to_dense))
        throw MemoryVanished("the memory vanished under the copy (SIGBUS: a shared-memory region shrunk by "
                             "another program, or a page its file system could not supply)");
}

// Host memory from libtorch's CPU allocator: no file behind it to shrink.
bool allocated_by_libtorch(const at::Tensor &t)
{
    return t.storage().data_ptr().get_deleter() == c10::GetCPUAllocator()->raw_deleter();
}

// A dense device tensor's bytes to or from host memory of any alignment (a
// binary is only 8-byte aligned): one copy across the bus as bytes, which
// have no alignment to keep (copy_ waits for it).
void copy_out(const at::Tensor &dense, void *dst)
{
    host_bytes(dst, dense.nbytes()).copy_(bytes_of(dense));
}

void copy_in(const at::Tensor &dense, const void *src)
{
    bytes_of(dense).copy_(host_bytes(const_cast<void *>(src), dense.nbytes()));
}

} // namespace

extern "C" {

int tb_shim_has_scalar_type(int st) noexcept
{
    // Held when the table's dtype of that number came with this release or
    // an older one: the same groups the checks above are compiled for.
    // Worked out once (every from_blob asks).
    static const std::array<bool, 256> held = [] {
        std::array<bool, 256> h{};
        for (int id = 0; id < TB_DT_COUNT; id++) {
            int major = 0, minor = 0, st_id = tb_dtypes[id].torch_scalar_type;
            std::sscanf(tb_dtype_since[id], "%d.%d", &major, &minor);
            if (st_id >= 0 && st_id < 256)
                h[static_cast<size_t>(st_id)] = TB_TORCH_AT_LEAST(major, minor);
        }
        return h;
    }();
    return st >= 0 && st < 256 && held[static_cast<size_t>(st)];
}

const char *tb_shim_torch_version(void) noexcept
{
    return TORCH_VERSION;
}

int tb_shim_from_blob(void *data, int ndim, const int64_t *sizes, const int64_t *strides, int st, int device_type,
                      int device_index, void *ctx, void (*deleter)(void *), tb_shim_tensor **out,
                      tb_shim_error *err) noexcept
{
    // The storage and the tensor are made here, as at::for_blob would make
    // them, without its options and checks: the layout, dtype and device
    // were checked by the caller. The DataPtr owns ctx from its first line,
    // so whatever throws after it calls deleter(ctx) once.
    c10::DataPtr data_ptr(data, ctx, deleter, c10::Device(c10::DeviceType::CPU));
    return guarded(err, [&] {
        data_ptr.unsafe_set_device(torch_device(device_type, device_index));
        size_t nbytes = at::detail::computeStorageNbytes(c10::IntArrayRef(sizes, ndim), c10::IntArrayRef(strides, ndim),
                                                         c10::elementSize(scalar_type(st)));
        c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                                   std::move(data_ptr), nullptr, false));
        *out = dense_tensor(std::move(storage), 0, ndim, sizes, strides, st);
    });
}

int tb_shim_alias(const tb_shim_tensor *base, uint64_t byte_offset, int ndim, const int64_t *sizes,
                  const int64_t *strides, int st, tb_shim_tensor **out, tb_shim_error *err) noexcept
{
    return guarded(err, [&] { *out = dense_tensor(impl_of(base)->storage(), byte_offset, ndim, sizes, strides, st); });
}

int tb_shim_zeros(int ndim, const int64_t *sizes, int st, tb_shim_tensor **out, tb_shim_error *err) noexcept
{
    return guarded(err, [&] {
        // Every byte zero, for every dtype: libtorch's fill has no kernel
        // for some (float4_e2m1fn_x2 on 2.14).
        at::Tensor t = allocate(c10::IntArrayRef(sizes, ndim), at::TensorOptions().dtype(scalar_type(st)));
        if (t.nbytes() > 0)
            std::memset(t.data_ptr(), 0, t.nbytes());
        *out = release_handle(std::move(t));
    });
}

int tb_shim_empty(int ndim, const int64_t *sizes, int st, tb_shim_tensor **out, tb_shim_error *err) noexcept
{
    return guarded(err, [&] {
        *out = release_handle(allocate(c10::IntArrayRef(sizes, ndim), at::TensorOptions().dtype(scalar_type(st))));
    });
}

int tb_shim_from_bytes(const void *bytes, int ndim, const int64_t *sizes, int st, tb_shim_tensor **out,
                       tb_shim_error *err) noexcept
{
    return guarded(err, [&] {
        at::Tensor t = allocate(c10::IntArrayRef(sizes, ndim), at::TensorOptions().dtype(scalar_type(st)));
        size_t n = t.nbytes();
        if (n > 0)
            std::memcpy(t.data_ptr(), bytes, n);
        *out = release_handle(std::move(t));
    });
}

int tb_shim_to_bytes(tb_shim_tensor *handle, void *dst, tb_shim_error *err) noexcept
{
    return guarded(err, [&] {
        at::Tensor t = borrow(handle);
        if (t.numel() == 0)
            return;
        if (t.device().is_cpu())
            host_copy(t, dst, true);
        else
            copy_out(t.contiguous(), dst);
    });
}

int tb_shim_write_bytes(tb_shim_tensor *handle, const void *src, tb_shim_error *err) noexcept
{
    return guarded(err, [&] {
        at::Tensor t = borrow(handle);
        if (t.numel() == 0)
            return;
        if (t.device().is_cpu())
            return host_copy(t, const_cast<void *>(src), false);
        // Into t itself where it is dense, else into a dense tensor on its
        // device that t then copies from.
        at::Tensor dense = t.is_contiguous() ? t : at::empty(t.sizes(), t.options());
        copy_in(dense, src);
        if (!dense.is_same(t))
            t.copy_(dense);
    });
}

int tb_shim_to_device(tb_shim_tensor *handle, int device_type, int device_index, tb_shim_tensor **out,
                      tb_shim_error *err) noexcept
{
    return guarded(err, [&] {
        c10::Device device = torch_device(device_type, device_index);
        // Always a new tensor: to/2 is the explicit copy, even to the same
        // device. From host memory libtorch did not allocate, the elements
        // are read under the guard first.
        at::Tensor t = borrow(handle);
        if (t.device().is_cpu() && (device.is_cpu() || !allocated_by_libtorch(t))) {
            at::Tensor host = allocate(t.sizes(), t.options());
            if (t.numel() > 0)
                host_copy(t, host.data_ptr(), true);
            t = device.is_cpu() ? host : host.to(device);
        } else {
            t = t.to(device, /*non_blocking=*/false, /*copy=*/true);
        }
        *out = release_handle(std::move(t));
    });
}

int tb_shim_contiguous(tb_shim_tensor *handle, tb_shim_tensor **out, tb_shim_error *err) noexcept
{
    return guarded(err, [&] { *out = release_handle(borrow(handle).contiguous()); });
}

int tb_shim_narrow(tb_shim_tensor *handle, int dim, int64_t start, int64_t length, tb_shim_tensor **out,
                   tb_shim_error *err) noexcept
{
    return guarded(err, [&] { *out = release_handle(borrow(handle).narrow(dim, start, length)); });
}

int tb_shim_transpose(tb_shim_tensor *handle, int dim0, int dim1, tb_shim_tensor **out, tb_shim_error *err) noexcept
{
    return guarded(err, [&] { *out = release_handle(borrow(handle).transpose(dim0, dim1)); });
}

void tb_shim_info_of(const tb_shim_tensor *handle, tb_shim_info *info) noexcept
{
    // Only dense strided tensors are ever made here, so none of these throw.
    const c10::TensorImpl *impl = impl_of(handle);
    c10::IntArrayRef sizes = impl->sizes();
    c10::IntArrayRef strides = impl->strides();
    const c10::Storage &storage = impl->storage();
    const c10::DataPtr &dp = storage.data_ptr();
    c10::ScalarType st = c10::typeMetaToScalarType(impl->dtype());
    char *base = static_cast<char *>(dp.get());

    info->ndim = static_cast<int>(sizes.size());
    info->sizes = sizes.data();
    info->strides = strides.data();
    // Checked: a layout that reached here was validated, but the offset of
    // a slice is libtorch's arithmetic, and an overflow must not be UB.
    int64_t offset_bytes = 0;
    bool wraps = __builtin_mul_overflow(impl->storage_offset(), static_cast<int64_t>(impl->itemsize()), &offset_bytes);
    uintptr_t data = 0;
    wraps =
        wraps || __builtin_add_overflow(reinterpret_cast<uintptr_t>(base), static_cast<uintptr_t>(offset_bytes), &data);
    info->data = base && !wraps ? reinterpret_cast<void *>(data) : nullptr;
    info->scalar_type = static_cast<int>(st);
    info->torch_device_type = static_cast<int>(impl->device().type());
    if (!tb_device_of_torch(info->torch_device_type, &info->device_type))
        info->device_type = -1;
    info->device_index = impl->device().has_index() ? impl->device().index() : 0;
    info->storage_data = base;
    info->storage_bytes = storage.nbytes();
    info->storage_deleter = dp.get_deleter();
    info->storage_context = dp.get_context();
    info->is_contiguous = impl->is_contiguous();
}

int tb_shim_cuda_built(void) noexcept
{
    try {
        return at::globalContext().hasCUDA() ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

int tb_shim_device_built(int device_type) noexcept
{
    if (tb_device_runtime(device_type) == TB_RUNTIME_HOST)
        return 1; // the host's memory needs nothing of libtorch
    int torch_type = tb_device_torch_type(device_type);
    try {
        return torch_type >= 0 && c10::impl::hasDeviceGuardImpl(static_cast<c10::DeviceType>(torch_type)) ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

int tb_shim_cuda_stream_is_default(int device_index) noexcept
{
    try {
        const c10::impl::DeviceGuardImplInterface *guard = cuda_guard();
        // Stream id 0 is the device's default stream in c10.
        return guard && guard->getStream(cuda_device(device_index)).id() == 0 ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

int tb_shim_cuda_record_event(int device_index, void **event, tb_shim_error *err) noexcept
{
    return guarded(err, [&] {
        const c10::impl::DeviceGuardImplInterface &guard = require_cuda_guard();
        void *made = nullptr;
        guard.record(&made, guard.getStream(cuda_device(device_index)), static_cast<c10::DeviceIndex>(device_index),
                     c10::EventFlag::PYTORCH_DEFAULT);
        *event = made;
    });
}

int tb_shim_cuda_wait_event(int device_index, void *event, tb_shim_error *err) noexcept
{
    return guarded(err, [&] {
        const c10::impl::DeviceGuardImplInterface &guard = require_cuda_guard();
        guard.block(event, guard.getStream(cuda_device(device_index)));
    });
}

void tb_shim_cuda_destroy_event(int device_index, void *event) noexcept
{
    try {
        const c10::impl::DeviceGuardImplInterface *guard = cuda_guard();
        if (guard && event)
            guard->destroyEvent(event, static_cast<c10::DeviceIndex>(device_index));
    } catch (...) {
        // destroyEvent is noexcept; nothing to report from here.
    }
}

tb_shim_tensor *tb_shim_retain(tb_shim_tensor *handle) noexcept
{
    // The same TensorImpl, one more reference: the handle is the pointer.
    c10::raw::intrusive_ptr::incref(impl_of(handle));
    return handle;
}

void tb_shim_release(tb_shim_tensor *handle) noexcept
{
    try {
        TensorImplPtr::reclaim(impl_of(handle));
    } catch (...) {
        // Dropping a reference does not throw; nothing can be done if it did.
    }
}

} // extern "C"
