// flopmeter/array_view.h — a non-owning (pointer, length) view, flopmeter's C++17 stand-in for std::span.
//
// Ownership: the caller owns the viewed memory and keeps it alive for the duration of the call that
// receives the view; flopmeter never stores an array_view beyond that call.
// Thread-safety: a view is a value; reading through it is as safe as reading the memory it points at.
#pragma once

#include <cstddef>
#include <vector>

#include "flopmeter/export.h"

namespace flopmeter FLOPMETER_EXPORT {

template <class T>
class array_view {
 public:
  constexpr array_view() noexcept = default;
  constexpr array_view(const T* data, std::size_t size) noexcept : data_(data), size_(size) {}
  array_view(const std::vector<T>& values) noexcept  // NOLINT(google-explicit-constructor): views convert
      : data_(values.data()), size_(values.size()) {}
  template <std::size_t N>
  constexpr array_view(const T (&values)[N]) noexcept : data_(values), size_(N) {}  // NOLINT

  constexpr const T* data() const noexcept { return data_; }
  constexpr std::size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  constexpr const T* begin() const noexcept { return data_; }
  constexpr const T* end() const noexcept { return data_ + size_; }

 private:
  const T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace FLOPMETER_EXPORT
