#include "volt/data/batch.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <sstream>

#include "volt/core/errors.h"

namespace volt {

Batch::Field::Field(std::string n, torch::Tensor t, std::unique_ptr<Batch> c)
    : name(std::move(n)), tensor(std::move(t)), child(std::move(c)) {}
Batch::Field::Field(const Field& o)
    : name(o.name), tensor(o.tensor), child(o.child ? std::make_unique<Batch>(*o.child) : nullptr) {}
Batch::Field::Field(Field&& o) noexcept = default;
Batch::Field& Batch::Field::operator=(const Field& o) {
  if (this != &o) *this = Field(o);
  return *this;
}
Batch::Field& Batch::Field::operator=(Field&& o) noexcept = default;
Batch::Field::~Field() = default;

Batch::Batch(const Batch& other) = default;
Batch& Batch::operator=(const Batch& other) = default;
Batch::~Batch() = default;

torch::Tensor& Batch::at(size_type i) {
  VOLT_CHECK(i < tensors_.size(), DataError, "Batch: no positional tensor [", i, "]; the batch has ", tensors_.size(),
             " (", describe(), ")");
  return tensors_[i];
}
const torch::Tensor& Batch::at(size_type i) const { return const_cast<Batch*>(this)->at(i); }

const Batch::Field* Batch::find(const std::string& name) const {
  for (const auto& f : fields_)
    if (f.name == name) return &f;
  return nullptr;
}
Batch::Field* Batch::find(const std::string& name) {
  return const_cast<Field*>(static_cast<const Batch*>(this)->find(name));
}

void Batch::missing(const std::string& name, const char* what) const {
  std::string present;
  for (const auto& f : fields_) present += (present.empty() ? "" : ", ") + f.name + (f.child ? " (nested)" : "");
  throw DataError(detail::str_cat(
      "Batch: no ", what, " field '", name, "'",
      find(name) ? (find(name)->child ? " (it is a nested batch: use child())" : " (it is a tensor: use at())") : "",
      "; named fields present: ", present.empty() ? "none" : present, ", positional: ", tensors_.size()));
}

Batch& Batch::set(const std::string& name, torch::Tensor t) {
  if (Field* f = find(name)) {
    f->tensor = std::move(t);
    f->child.reset();
  } else {
    fields_.emplace_back(name, std::move(t), nullptr);
  }
  return *this;
}

Batch& Batch::set(const std::string& name, Batch child) {
  auto c = std::make_unique<Batch>(std::move(child));
  if (Field* f = find(name)) {
    f->tensor = torch::Tensor();
    f->child = std::move(c);
  } else {
    fields_.emplace_back(name, torch::Tensor(), std::move(c));
  }
  return *this;
}

torch::Tensor& Batch::at(const std::string& name) {
  Field* f = find(name);
  if (!f || f->child) missing(name, "tensor");
  return f->tensor;
}
const torch::Tensor& Batch::at(const std::string& name) const { return const_cast<Batch*>(this)->at(name); }

Batch& Batch::child(const std::string& name) {
  Field* f = find(name);
  if (!f || !f->child) missing(name, "nested");
  return *f->child;
}
const Batch& Batch::child(const std::string& name) const { return const_cast<Batch*>(this)->child(name); }

bool Batch::is_child(const std::string& name) const {
  const Field* f = find(name);
  return f && f->child;
}

std::vector<std::string> Batch::names() const {
  std::vector<std::string> out;
  out.reserve(fields_.size());
  for (const auto& f : fields_) out.push_back(f.name);
  return out;
}

Batch::size_type Batch::num_tensors() const {
  size_type n = tensors_.size();
  for (const auto& f : fields_) n += f.child ? f.child->num_tensors() : 1;
  return n;
}

Batch Batch::map(const TensorFn& f) const {
  Batch out;
  out.tensors_.reserve(tensors_.size());
  for (const auto& t : tensors_) out.tensors_.push_back(t.defined() ? f(t) : t);
  out.fields_.reserve(fields_.size());
  for (const auto& fld : fields_) {
    if (fld.child)
      out.fields_.emplace_back(fld.name, torch::Tensor(), std::make_unique<Batch>(fld.child->map(f)));
    else
      out.fields_.emplace_back(fld.name, fld.tensor.defined() ? f(fld.tensor) : fld.tensor, nullptr);
  }
  return out;
}

Batch Batch::to(const torch::Device& device, bool non_blocking) const {
  return map([&](const torch::Tensor& t) { return t.to(device, non_blocking); });
}

Batch Batch::pin_memory() const {
  if (!torch::cuda::is_available()) return *this;
  return map([](const torch::Tensor& t) { return t.is_pinned() || !t.device().is_cpu() ? t : t.pin_memory(); });
}

namespace {
std::string shape_of(const torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream os;
  os << c10::toString(t.scalar_type()) << " " << t.sizes();
  return os.str();
}
}  // namespace

void Batch::describe_into(const std::string& prefix, std::string& out) const {
  auto add = [&](const std::string& key, const torch::Tensor& t) {
    out += (out.empty() ? "" : ", ") + key + " " + shape_of(t);
  };
  for (size_t i = 0; i < tensors_.size(); ++i) add(prefix + "[" + std::to_string(i) + "]", tensors_[i]);
  for (const auto& f : fields_) {
    const std::string key = prefix.empty() ? f.name : prefix + "." + f.name;
    if (f.child)
      f.child->describe_into(key, out);
    else
      add(key, f.tensor);
  }
}

std::string Batch::describe() const {
  std::string out;
  describe_into("", out);
  return out.empty() ? "empty" : out;
}

namespace {

std::string field_key(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

torch::Tensor stack_field(const std::vector<const torch::Tensor*>& column, const std::string& key) {
  const torch::Tensor& first = *column[0];
  for (size_t k = 0; k < column.size(); ++k) {
    const torch::Tensor& t = *column[k];
    VOLT_CHECK(t.defined(), DataError, "collate: field '", key, "' of sample ", k,
               " is an undefined tensor; every field of a sample must hold a tensor");
    VOLT_CHECK(t.sizes() == first.sizes(), DataError, "collate: field '", key, "' of sample ", k, " has shape ",
               t.sizes(), " but sample 0 has ", first.sizes(),
               "; the samples of a batch must agree in shape field by field (pad them in Dataset::get, or give "
               "DataLoaderOptions::collate_fn)");
  }
  std::vector<torch::Tensor> ts;
  ts.reserve(column.size());
  for (const auto* t : column) ts.push_back(*t);
  try {
    return torch::stack(ts);
  } catch (const c10::Error& e) {
    throw DataError(detail::str_cat("collate: field '", key, "' cannot be stacked: ", e.what_without_backtrace()));
  }
}

Batch collate_level(const std::vector<const Batch*>& samples, const std::string& prefix) {
  const Batch& first = *samples[0];
  const std::string where = prefix.empty() ? "" : " in '" + prefix + "'";
  const std::vector<std::string> names = first.names();
  for (size_t k = 1; k < samples.size(); ++k) {
    const Batch& s = *samples[k];
    VOLT_CHECK(s.size() == first.size(), DataError, "collate: sample ", k, " has ", s.size(), " positional tensors",
               where, " but sample 0 has ", first.size(), "; every sample of a batch must have the same fields");
    for (const auto& n : names) {
      VOLT_CHECK(s.contains(n), DataError, "collate: field '", field_key(prefix, n), "' is missing from sample ", k,
                 " (present in sample 0)");
      VOLT_CHECK(s.is_child(n) == first.is_child(n), DataError, "collate: field '", field_key(prefix, n),
                 "' is a nested batch in one of samples 0 and ", k, " and a tensor in the other");
    }
    for (const auto& n : s.names())
      VOLT_CHECK(first.contains(n), DataError, "collate: field '", field_key(prefix, n), "' of sample ", k,
                 " is missing from sample 0");
  }
  Batch out;
  out.reserve(first.size());
  std::vector<const torch::Tensor*> column(samples.size());
  for (size_t j = 0; j < first.size(); ++j) {
    for (size_t k = 0; k < samples.size(); ++k) column[k] = &(*samples[k])[j];
    out.push_back(stack_field(column, prefix + "[" + std::to_string(j) + "]"));
  }
  for (const auto& n : names) {
    const std::string key = field_key(prefix, n);
    if (first.is_child(n)) {
      std::vector<const Batch*> children(samples.size());
      for (size_t k = 0; k < samples.size(); ++k) children[k] = &samples[k]->child(n);
      out.set(n, collate_level(children, key));
    } else {
      for (size_t k = 0; k < samples.size(); ++k) column[k] = &samples[k]->at(n);
      out.set(n, stack_field(column, key));
    }
  }
  return out;
}

}  // namespace

Batch collate(const std::vector<Batch>& samples) {
  VOLT_CHECK(!samples.empty(), ConfigError, "collate: no samples");
  std::vector<const Batch*> ptrs;
  ptrs.reserve(samples.size());
  for (const auto& s : samples) ptrs.push_back(&s);
  return collate_level(ptrs, "");
}

}  // namespace volt
