// tp_group.cc: TpGroup (NCCL through dlopen) and RankThreads (tp_group.h).
#include "packserve/model/cuda/tp_group.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "packserve/model/cuda/ops.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define PACKSERVE_HAVE_NCCL_HEADER 1
#endif

namespace packserve::model::cuda {
namespace {

#ifdef PACKSERVE_HAVE_NCCL_HEADER
// The NCCL entry points used here, resolved once from libnccl.so.2.
struct Nccl {
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

Result<const Nccl*> load_nccl() {
  static const Result<Nccl> loaded = []() -> Result<Nccl> {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      return unimplemented(
          std::string("tensor parallelism needs NCCL: cannot load libnccl.so.2 (") +
          (why != nullptr ? why : "?") + "); put its directory on LD_LIBRARY_PATH");
    }
    Nccl n;
    const auto resolve = [&](auto& fn, const char* name) -> Status {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr) return unimplemented(std::string("libnccl.so.2 has no ") + name);
      return ok_status();
    };
    PS_RETURN_IF_ERROR(resolve(n.comm_init_all, "ncclCommInitAll"));
    PS_RETURN_IF_ERROR(resolve(n.all_reduce, "ncclAllReduce"));
    PS_RETURN_IF_ERROR(resolve(n.comm_destroy, "ncclCommDestroy"));
    PS_RETURN_IF_ERROR(resolve(n.comm_abort, "ncclCommAbort"));
    PS_RETURN_IF_ERROR(resolve(n.error_string, "ncclGetErrorString"));
    return n;
  }();
  if (!loaded.ok()) return loaded.status();
  return &loaded.value();
}

Status nccl_status(const Nccl& n, ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return ok_status();
  return internal_error(std::string(what) + ": " + n.error_string(r));
}
#endif

}  // namespace

// A barrier of n host threads that abort() releases for good (a rank that never arrives).
class AbortableBarrier {
 public:
  explicit AbortableBarrier(int n) : n_(n) {}
  // False once aborted.
  bool arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
    }
    return !aborted_;
  }
  void abort() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int n_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

struct TpGroup::OneDevice {
  explicit OneDevice(int n) : arrived(n), summed(n), x(static_cast<size_t>(n)) {}
  ~OneDevice() {
    for (cudaEvent_t e : ready) (void)cudaEventDestroy(e);
    if (done != nullptr) (void)cudaEventDestroy(done);
  }
  AbortableBarrier arrived, summed;
  std::vector<float*> x;           // each rank's buffer of the all-reduce in flight
  std::vector<cudaEvent_t> ready;  // [n]: rank r's x is complete on its stream
  cudaEvent_t done = nullptr;      // rank 0's stream has the sum in every x
};

Result<std::unique_ptr<TpGroup>> TpGroup::create_on_one_device(int n) {
  if (n < 1) return invalid_argument("create_on_one_device: n = " + std::to_string(n));
  std::unique_ptr<TpGroup> g(new TpGroup());
  g->one_device_ = std::make_unique<OneDevice>(n);
  for (int r = 0; r < n; ++r) {
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      (void)cudaGetLastError();
      return internal_error("create_on_one_device: cudaEventCreateWithFlags failed");
    }
    g->one_device_->ready.push_back(e);
  }
  if (cudaEventCreateWithFlags(&g->one_device_->done, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    return internal_error("create_on_one_device: cudaEventCreateWithFlags failed");
  }
  return g;
}

int TpGroup::size() const {
  return one_device_ != nullptr ? static_cast<int>(one_device_->x.size())
                                : static_cast<int>(comms_.size());
}

Status TpGroup::one_device_all_reduce(int rank, float* x, size_t count, cudaStream_t stream) {
  OneDevice& o = *one_device_;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  Status status;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess ||
      capturing != cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    status = failed_precondition(
        "a one-device tensor-parallel group cannot be captured in a CUDA graph: run eagerly");
  }
  const auto check = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess && status.ok()) status = internal_error(std::string(what) + " failed");
  };
  o.x[static_cast<size_t>(rank)] = x;
  if (status.ok()) check(cudaEventRecord(o.ready[static_cast<size_t>(rank)], stream), "record");
  if (!o.arrived.arrive_and_wait()) return internal_error("tensor-parallel group: aborted");
  if (rank == 0 && status.ok()) {
    for (size_t r = 1; r < o.x.size(); ++r)
      check(cudaStreamWaitEvent(stream, o.ready[r], 0), "wait");
    for (size_t r = 1; r < o.x.size() && status.ok(); ++r)
      status = add_f32(x, o.x[r], count, stream);
    for (size_t r = 1; r < o.x.size(); ++r) {
      check(cudaMemcpyAsync(o.x[r], x, count * sizeof(float), cudaMemcpyDeviceToDevice, stream),
            "copy");
    }
    check(cudaEventRecord(o.done, stream), "record");
  }
  if (!o.summed.arrive_and_wait()) return internal_error("tensor-parallel group: aborted");
  if (rank != 0 && status.ok()) check(cudaStreamWaitEvent(stream, o.done, 0), "wait");
  return status;
}

Result<std::unique_ptr<TpGroup>> TpGroup::create(const std::vector<int>& devices) {
#ifdef PACKSERVE_HAVE_NCCL_HEADER
  PS_ASSIGN_OR_RETURN(const Nccl* n, load_nccl());
  // NVLink SHARP multicast can take a shared host's GPUs out of service; off unless asked for.
  (void)setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  std::vector<ncclComm_t> comms(devices.size());
  PS_RETURN_IF_ERROR(nccl_status(
      *n, n->comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data()),
      "ncclCommInitAll"));
  std::unique_ptr<TpGroup> g(new TpGroup());
  for (ncclComm_t c : comms) g->comms_.push_back(c);
  return g;
#else
  (void)devices;
  return unimplemented("tensor parallelism: this packserve was built without nccl.h");
#endif
}

TpGroup::~TpGroup() {
#ifdef PACKSERVE_HAVE_NCCL_HEADER
  Result<const Nccl*> n = load_nccl();
  if (!n.ok()) return;
  for (void* c : comms_) {
    if (aborted_) continue;  // ncclCommAbort freed it
    (void)(*n)->comm_destroy(static_cast<ncclComm_t>(c));
  }
#endif
}

Status TpGroup::all_reduce_sum(int rank, float* x, size_t count, cudaStream_t stream) {
  if (aborted_) return internal_error("tensor-parallel group: aborted by an earlier failure");
  if (one_device_ != nullptr) return one_device_all_reduce(rank, x, count, stream);
#ifdef PACKSERVE_HAVE_NCCL_HEADER
  PS_ASSIGN_OR_RETURN(const Nccl* n, load_nccl());
  return nccl_status(
      *n,
      n->all_reduce(x, x, count, ncclFloat32, ncclSum,
                    static_cast<ncclComm_t>(comms_[static_cast<size_t>(rank)]), stream),
      "ncclAllReduce");
#else
  (void)rank, (void)x, (void)count, (void)stream;
  return unimplemented("tensor parallelism: this packserve was built without nccl.h");
#endif
}

void TpGroup::abort() {
  if (aborted_.exchange(true)) return;
  if (one_device_ != nullptr) {
    one_device_->arrived.abort();
    one_device_->summed.abort();
    return;
  }
#ifdef PACKSERVE_HAVE_NCCL_HEADER
  Result<const Nccl*> n = load_nccl();
  if (!n.ok()) return;
  for (void* c : comms_) (void)(*n)->comm_abort(static_cast<ncclComm_t>(c));
#endif
}

RankThreads::RankThreads(int n) {
  for (int i = 0; i < n; ++i) {
    auto slot = std::make_unique<Slot>();
    Slot* s = slot.get();
    s->thread = std::thread([s] {
      std::unique_lock<std::mutex> lock(s->mu);
      for (;;) {
        s->cv.wait(lock, [s] { return s->stop || s->task != nullptr; });
        if (s->task == nullptr) return;  // stop
        const std::function<Status()>* task = std::exchange(s->task, nullptr);
        lock.unlock();
        Status result = (*task)();
        lock.lock();
        s->result = std::move(result);
        s->done = true;
        s->cv.notify_all();
      }
    });
    slots_.push_back(std::move(slot));
  }
}

RankThreads::~RankThreads() {
  for (auto& s : slots_) {
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->cv.wait(lock, [&s] { return s->done; });  // a started task finishes first
      s->stop = true;
    }
    s->cv.notify_all();
    s->thread.join();
  }
}

void RankThreads::start(const std::vector<std::function<Status()>>& tasks) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = *slots_[i];
    std::lock_guard<std::mutex> lock(s.mu);
    s.task = &tasks[i];
    s.done = false;
    s.cv.notify_all();
  }
}

std::vector<Status> RankThreads::wait() {
  std::vector<Status> results(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = *slots_[i];
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, [&s] { return s.done; });
    results[i] = std::move(s.result);
    s.result = Status();
  }
  return results;
}

}  // namespace packserve::model::cuda
