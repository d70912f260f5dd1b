// Collectives and messages between the processes of a CPU replay (host_comm.h).
#include "hw_backend/host_comm.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "models/errors.h"

namespace trainsim::hw {
namespace {

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Round to nearest even (the rounding of torch's float -> bfloat16 conversion,
/// c10/util/BFloat16.h round_to_nearest_even); NaN stays a quiet NaN.
std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

float load(const char* p, std::size_t i, kernels::DType t) {
  if (t == kernels::DType::F32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  std::uint16_t b;
  std::memcpy(&b, p + 2 * i, 2);
  return bf16_to_float(b);
}

void store(char* p, std::size_t i, float v, kernels::DType t) {
  if (t == kernels::DType::F32) {
    std::memcpy(p + 4 * i, &v, 4);
    return;
  }
  const std::uint16_t b = float_to_bf16(v);
  std::memcpy(p + 2 * i, &b, 2);
}

/// out[i] = parts[0][first + i] + parts[1][first + i] + ... (member order, float sums).
void sum_in_order(const std::vector<std::string>& parts, std::size_t first, std::size_t count,
                  kernels::DType t, void* out) {
  for (std::size_t i = 0; i < count; ++i) {
    float acc = load(parts[0].data(), first + i, t);
    for (std::size_t m = 1; m < parts.size(); ++m) acc += load(parts[m].data(), first + i, t);
    store(static_cast<char*>(out), i, acc, t);
  }
}

std::size_t element_bytes(kernels::DType t) {
  TRAINSIM_CHECK(t != kernels::DType::F16,
                 "host_comm: fp16 is not a CPU replay's element type (fp32 or bf16)");
  return kernels::dtype_size_bytes(t);
}

}  // namespace

HostGroup::HostGroup(const kernels::FileRendezvous& rv, std::string name,
                     std::vector<int> members, int world_rank)
    : rv_(rv), name_(std::move(name)), members_(std::move(members)) {
  auto it = std::find(members_.begin(), members_.end(), world_rank);
  TRAINSIM_CHECK(it != members_.end(), "host_comm: rank " + std::to_string(world_rank) +
                                           " is not a member of group " + name_);
  me_ = static_cast<int>(it - members_.begin());
}

std::string HostGroup::file(std::int64_t seq, int member) const {
  return "c" + name_ + "." + std::to_string(seq) + ".r" + std::to_string(members_[member]);
}

std::vector<std::string> HostGroup::exchange(const void* data, std::size_t bytes) {
  const std::int64_t seq = seq_++;
  std::string mine(static_cast<const char*>(data), bytes);
  rv_.publish(file(seq, me_), mine);
  std::vector<std::string> parts(members_.size());
  for (int m = 0; m < size(); ++m)
    parts[m] = m == me_ ? mine
                        : rv_.wait(file(seq, m), static_cast<std::int64_t>(bytes),
                                   "rank " + std::to_string(members_[m]) + " (group " + name_ + ")");
  // Every member published `seq`, so each has finished reading `seq - 1` (host_comm.h).
  if (seq > 0) rv_.remove(file(seq - 1, me_));
  return parts;
}

void HostGroup::all_reduce(void* buf, std::size_t count, kernels::DType t) {
  const std::vector<std::string> parts = exchange(buf, count * element_bytes(t));
  sum_in_order(parts, 0, count, t, buf);
}

void HostGroup::reduce_scatter(const void* send, void* recv, std::size_t count, kernels::DType t) {
  const std::vector<std::string> parts = exchange(send, count * size() * element_bytes(t));
  sum_in_order(parts, count * static_cast<std::size_t>(me_), count, t, recv);
}

void HostGroup::all_gather(const void* send, void* recv, std::size_t count, kernels::DType t) {
  const std::size_t bytes = count * element_bytes(t);
  const std::vector<std::string> parts = exchange(send, bytes);
  for (int m = 0; m < size(); ++m)
    std::memmove(static_cast<char*>(recv) + m * bytes, parts[m].data(), bytes);
}

void HostGroup::all_to_all(const void* send, void* recv, std::size_t count, kernels::DType t) {
  const std::size_t bytes = count * element_bytes(t);
  const std::vector<std::string> parts = exchange(send, bytes * size());
  for (int m = 0; m < size(); ++m)
    std::memcpy(static_cast<char*>(recv) + m * bytes, parts[m].data() + me_ * bytes, bytes);
}

HostChannel::HostChannel(const kernels::FileRendezvous& rv, std::string name, int src, int dst)
    : rv_(rv), name_(std::move(name)), src_(src), dst_(dst) {}

std::string HostChannel::file(std::int64_t seq) const {
  return "p" + name_ + "." + std::to_string(seq);
}

void HostChannel::send(const void* data, std::size_t bytes) {
  rv_.publish(file(sent_++), std::string(static_cast<const char*>(data), bytes));
}

void HostChannel::recv(void* data, std::size_t bytes) {
  const std::string name = file(received_++);
  const std::string payload = rv_.wait(name, static_cast<std::int64_t>(bytes),
                                       "rank " + std::to_string(src_) + " (sending to rank " +
                                           std::to_string(dst_) + ")");
  std::memcpy(data, payload.data(), bytes);
  rv_.remove(name);
}

}  // namespace trainsim::hw
