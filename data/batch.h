#pragma once
/// Batch: what a Dataset returns for one sample and what the DataLoader hands to the steps. It holds
/// positional tensors (`Batch{x, y}`, `b[0]`, range-for, as the std::vector<torch::Tensor> it used to
/// be) and named fields, each a tensor or a nested Batch — the C++ counterpart of the tuples and
/// dicts a PyTorch collate handles:
///
///   Batch b{x, y};                                  // positional
///   b.set("input_ids", ids).set("inputs", Batch{}.set("mask", mask));
///   b["input_ids"]; b.child("inputs").at("mask");
///
/// Copies share tensor storage (as copies of a std::vector<torch::Tensor> do); nested batches are
/// held by value. A Batch is a plain value: concurrent const calls are safe, a call that modifies it
/// needs exclusive access.
#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace volt {

class Batch {
 public:
  using value_type = torch::Tensor;
  using size_type = std::size_t;
  using iterator = std::vector<torch::Tensor>::iterator;
  using const_iterator = std::vector<torch::Tensor>::const_iterator;
  /// A function applied to every tensor by map().
  using TensorFn = std::function<torch::Tensor(const torch::Tensor&)>;

  Batch() = default;
  Batch(std::initializer_list<torch::Tensor> tensors) : tensors_(tensors) {}
  Batch(std::vector<torch::Tensor> tensors) : tensors_(std::move(tensors)) {}  // NOLINT: implicit, as before
  Batch(const Batch& other);
  Batch(Batch&& other) noexcept = default;
  Batch& operator=(const Batch& other);
  Batch& operator=(Batch&& other) noexcept = default;
  ~Batch();

  // Positional tensors, with std::vector's names and meaning (named fields are not counted).
  size_type size() const { return tensors_.size(); }
  bool empty() const { return tensors_.empty(); }
  void reserve(size_type n) { tensors_.reserve(n); }
  void push_back(torch::Tensor t) { tensors_.push_back(std::move(t)); }
  template <class... Args>
  torch::Tensor& emplace_back(Args&&... args) {
    return tensors_.emplace_back(std::forward<Args>(args)...);
  }
  torch::Tensor& operator[](size_type i) { return tensors_[i]; }
  const torch::Tensor& operator[](size_type i) const { return tensors_[i]; }
  /// Bounds-checked; DataError when `i` is out of range.
  torch::Tensor& at(size_type i);
  const torch::Tensor& at(size_type i) const;
  torch::Tensor& front() { return tensors_.front(); }
  const torch::Tensor& front() const { return tensors_.front(); }
  torch::Tensor& back() { return tensors_.back(); }
  const torch::Tensor& back() const { return tensors_.back(); }
  iterator begin() { return tensors_.begin(); }
  iterator end() { return tensors_.end(); }
  const_iterator begin() const { return tensors_.begin(); }
  const_iterator end() const { return tensors_.end(); }
  /// The positional tensors as a vector.
  const std::vector<torch::Tensor>& tensors() const { return tensors_; }

  // Named fields, kept in insertion order; setting an existing name replaces that field.
  Batch& set(const std::string& name, torch::Tensor t);
  Batch& set(const std::string& name, Batch child);
  /// The named tensor; DataError naming the field and listing the fields present when there is no
  /// tensor of that name (absent, or a nested batch).
  torch::Tensor& at(const std::string& name);
  const torch::Tensor& at(const std::string& name) const;
  torch::Tensor& operator[](const std::string& name) { return at(name); }
  const torch::Tensor& operator[](const std::string& name) const { return at(name); }
  /// The nested batch of that name; DataError as at() when there is none.
  Batch& child(const std::string& name);
  const Batch& child(const std::string& name) const;
  /// True when a field (tensor or nested batch) of that name exists.
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  /// True when the field of that name is a nested batch.
  bool is_child(const std::string& name) const;
  /// The names of the named fields (tensors and nested batches), in insertion order.
  std::vector<std::string> names() const;
  /// Every tensor: positional, named and nested, recursively.
  size_type num_tensors() const;

  /// A batch of the same structure with `f` applied to every defined tensor (positional, named and
  /// nested); undefined tensors stay undefined.
  Batch map(const TensorFn& f) const;
  /// Every tensor moved to `device` (map of Tensor::to).
  Batch to(const torch::Device& device, bool non_blocking = false) const;
  /// Every tensor in page-locked host memory when CUDA is available (so a non_blocking copy to the
  /// GPU overlaps with the host); without CUDA the batch itself, unchanged.
  Batch pin_memory() const;

  /// "[0] float [4, 3], input_ids long [4, 35], inputs.mask bool [4, 35]": for messages and logs.
  std::string describe() const;

 private:
  struct Field {
    std::string name;
    torch::Tensor tensor;          // when a tensor field
    std::unique_ptr<Batch> child;  // when a nested batch
    Field(std::string n, torch::Tensor t, std::unique_ptr<Batch> c);
    Field(const Field& o);
    Field(Field&& o) noexcept;
    Field& operator=(const Field& o);
    Field& operator=(Field&& o) noexcept;
    ~Field();
  };
  const Field* find(const std::string& name) const;
  Field* find(const std::string& name);
  [[noreturn]] void missing(const std::string& name, const char* what) const;
  void describe_into(const std::string& prefix, std::string& out) const;

  std::vector<torch::Tensor> tensors_;
  std::vector<Field> fields_;
};

/// PyTorch's default_collate for Batches: stacks every positional, named and nested field of the
/// samples along a new first dimension. Every sample must have the same positional count, the same
/// field names and, field by field, the same shape: otherwise a DataError naming the field, the
/// sample (its position in `samples`) and the shapes. ConfigError when `samples` is empty.
Batch collate(const std::vector<Batch>& samples);

}  // namespace volt
