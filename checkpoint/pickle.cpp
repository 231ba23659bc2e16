#include "volt/checkpoint/pickle.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "volt/core/errors.h"

namespace volt::detail {

PyObj::~PyObj() {
  std::vector<Py> pending;
  auto take = [&pending](PyObj& o) {
    for (auto& v : o.items) pending.push_back(std::move(v));
    for (auto& [k, v] : o.entries) {
      pending.push_back(std::move(k));
      pending.push_back(std::move(v));
    }
    pending.push_back(std::move(o.state));
    pending.push_back(std::move(o.storage));
    o.items.clear();
    o.entries.clear();
  };
  take(*this);
  while (!pending.empty()) {
    Py p = std::move(pending.back());
    pending.pop_back();
    // The last owner empties it first, so its destructor below has nothing left to recurse into.
    if (p && p.use_count() == 1) take(*p);
  }
}

namespace {

Py make(PyObj::Kind k) {
  auto p = std::make_shared<PyObj>();
  p->kind = k;
  return p;
}
Py make_str(PyObj::Kind k, std::string s) {
  auto p = make(k);
  p->s = std::move(s);
  return p;
}

at::ScalarType storage_dtype(const std::string& type, const std::string& where) {
  const std::string name = type.substr(type.rfind('.') + 1);  // torch.FloatStorage, torch.cuda.FloatStorage
  static const std::map<std::string, at::ScalarType> kTypes = {{"DoubleStorage", at::kDouble},
                                                               {"FloatStorage", at::kFloat},
                                                               {"HalfStorage", at::kHalf},
                                                               {"BFloat16Storage", at::kBFloat16},
                                                               {"LongStorage", at::kLong},
                                                               {"IntStorage", at::kInt},
                                                               {"ShortStorage", at::kShort},
                                                               {"CharStorage", at::kChar},
                                                               {"ByteStorage", at::kByte},
                                                               {"BoolStorage", at::kBool},
                                                               {"ComplexFloatStorage", at::kComplexFloat},
                                                               {"ComplexDoubleStorage", at::kComplexDouble},
                                                               {"UntypedStorage", at::kByte}};
  auto it = kTypes.find(name);
  VOLT_CHECK(it != kTypes.end(), CheckpointError, where, ": storage type '", type, "' is not supported");
  return it->second;
}

/// Python's pickle virtual machine, without executing anything (see torch_save.h).
class Unpickler {
 public:
  Unpickler(const char* data, size_t size, std::string where) : p_(data), end_(data + size), where_(std::move(where)) {}

  Py run() {
    while (true) {
      const uint8_t op = u8();
      switch (op) {
        case 0x80:  // PROTO
          u8();
          break;
        case 0x95:  // FRAME
          take(8);
          break;
        case '.':  // STOP
          VOLT_CHECK(!stack_.empty(), CheckpointError, where_, ": the pickle ends with an empty stack");
          return stack_.back();
        case '(':  // MARK
          marks_.push_back(stack_.size());
          break;
        case '0':  // POP
          pop();
          break;
        case '1':  // POP_MARK
          pop_mark();
          break;
        case '2':  // DUP
          stack_.push_back(top());
          break;
        case 'N':
          stack_.push_back(make(PyObj::Kind::None));
          break;
        case 0x88:  // NEWTRUE
        case 0x89:  // NEWFALSE
          stack_.push_back(integer(op == 0x88, PyObj::Kind::Bool));
          break;
        case 'J':  // BININT
          stack_.push_back(integer(static_cast<int32_t>(le(4))));
          break;
        case 'K':  // BININT1
          stack_.push_back(integer(le(1)));
          break;
        case 'M':  // BININT2
          stack_.push_back(integer(le(2)));
          break;
        case 0x8a:  // LONG1
          stack_.push_back(long_int(le(1)));
          break;
        case 0x8b:  // LONG4
          stack_.push_back(long_int(le(4)));
          break;
        case 'I': {  // INT (text); I00/I01 are False/True
          const std::string t = line();
          if (t == "00" || t == "01")
            stack_.push_back(integer(t == "01", PyObj::Kind::Bool));
          else
            stack_.push_back(integer(parse_int(t)));
          break;
        }
        case 'L': {  // LONG (text, trailing L)
          std::string t = line();
          if (!t.empty() && t.back() == 'L') t.pop_back();
          stack_.push_back(integer(parse_int(t)));
          break;
        }
        case 'F':  // FLOAT (text)
          line();
          stack_.push_back(make(PyObj::Kind::Float));
          break;
        case 'G':  // BINFLOAT
          take(8);
          stack_.push_back(make(PyObj::Kind::Float));
          break;
        case 'X':  // BINUNICODE
          stack_.push_back(make_str(PyObj::Kind::Str, bytes(le(4))));
          break;
        case 0x8c:  // SHORT_BINUNICODE
          stack_.push_back(make_str(PyObj::Kind::Str, bytes(le(1))));
          break;
        case 0x8d:  // BINUNICODE8
          stack_.push_back(make_str(PyObj::Kind::Str, bytes(le(8))));
          break;
        case 'V':  // UNICODE (text)
          stack_.push_back(make_str(PyObj::Kind::Str, line()));
          break;
        case 'S': {  // STRING (quoted text)
          std::string t = line();
          if (t.size() >= 2 && (t.front() == '\'' || t.front() == '"')) t = t.substr(1, t.size() - 2);
          stack_.push_back(make_str(PyObj::Kind::Str, t));
          break;
        }
        case 'T':  // BINSTRING
          stack_.push_back(make_str(PyObj::Kind::Str, bytes(le(4))));
          break;
        case 'U':  // SHORT_BINSTRING
          stack_.push_back(make_str(PyObj::Kind::Str, bytes(le(1))));
          break;
        case 'B':  // BINBYTES
          stack_.push_back(make_str(PyObj::Kind::Bytes, bytes(le(4))));
          break;
        case 'C':  // SHORT_BINBYTES
          stack_.push_back(make_str(PyObj::Kind::Bytes, bytes(le(1))));
          break;
        case 0x8e:  // BINBYTES8
        case 0x96:  // BYTEARRAY8
          stack_.push_back(make_str(PyObj::Kind::Bytes, bytes(le(8))));
          break;
        case ')':  // EMPTY_TUPLE
          stack_.push_back(make(PyObj::Kind::Tuple));
          break;
        case 0x85:    // TUPLE1
        case 0x86:    // TUPLE2
        case 0x87: {  // TUPLE3
          auto t = make(PyObj::Kind::Tuple);
          t->items.resize(op - 0x84);
          for (auto it = t->items.rbegin(); it != t->items.rend(); ++it) *it = pop();
          stack_.push_back(t);
          break;
        }
        case 't': {  // TUPLE
          auto t = make(PyObj::Kind::Tuple);
          t->items = pop_mark();
          stack_.push_back(t);
          break;
        }
        case ']':  // EMPTY_LIST
          stack_.push_back(make(PyObj::Kind::List));
          break;
        case 'l': {  // LIST
          auto t = make(PyObj::Kind::List);
          t->items = pop_mark();
          stack_.push_back(t);
          break;
        }
        case '}':  // EMPTY_DICT
          stack_.push_back(make(PyObj::Kind::Dict));
          break;
        case 'd': {  // DICT
          auto d = make(PyObj::Kind::Dict);
          set_items(d, pop_mark());
          stack_.push_back(d);
          break;
        }
        case 0x8f:  // EMPTY_SET
          stack_.push_back(make(PyObj::Kind::Set));
          break;
        case 0x91: {  // FROZENSET
          auto t = make(PyObj::Kind::Set);
          t->items = pop_mark();
          stack_.push_back(t);
          break;
        }
        case 'a': {  // APPEND
          Py v = pop();
          append(top(), {v});
          break;
        }
        case 'e': {  // APPENDS
          auto items = pop_mark();
          append(top(), items);
          break;
        }
        case 0x90: {  // ADDITEMS
          auto items = pop_mark();
          append(top(), items);
          break;
        }
        case 's': {  // SETITEM
          Py v = pop();
          Py k = pop();
          set_items(top(), {k, v});
          break;
        }
        case 'u': {  // SETITEMS
          auto kv = pop_mark();
          set_items(top(), kv);
          break;
        }
        case 'p':  // PUT (text)
          memo_[static_cast<uint64_t>(parse_int(line()))] = top();
          break;
        case 'q':  // BINPUT
          memo_[le(1)] = top();
          break;
        case 'r':  // LONG_BINPUT
          memo_[le(4)] = top();
          break;
        case 0x94:  // MEMOIZE
          memo_[memo_.size()] = top();
          break;
        case 'g':  // GET (text)
          stack_.push_back(memo(static_cast<uint64_t>(parse_int(line()))));
          break;
        case 'h':  // BINGET
          stack_.push_back(memo(le(1)));
          break;
        case 'j':  // LONG_BINGET
          stack_.push_back(memo(le(4)));
          break;
        case 'c': {  // GLOBAL
          std::string module = line();
          std::string name = line();
          stack_.push_back(make_str(PyObj::Kind::Global, module + "." + name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Py name = pop();
          Py module = pop();
          stack_.push_back(make_str(PyObj::Kind::Global, module->s + "." + name->s));
          break;
        }
        case 'R': {  // REDUCE
          Py args = pop();
          Py fn = pop();
          stack_.push_back(call(fn, args));
          break;
        }
        case 0x81: {  // NEWOBJ
          Py args = pop();
          Py cls = pop();
          stack_.push_back(call(cls, args));
          break;
        }
        case 0x92: {  // NEWOBJ_EX
          pop();      // kwargs
          Py args = pop();
          Py cls = pop();
          stack_.push_back(call(cls, args));
          break;
        }
        case 'i': {  // INST
          std::string module = line();
          std::string name = line();
          pop_mark();
          stack_.push_back(make_str(PyObj::Kind::Object, module + "." + name));
          break;
        }
        case 'o': {  // OBJ
          auto items = pop_mark();
          VOLT_CHECK(!items.empty(), CheckpointError, where_, ": malformed pickle (OBJ without a class)");
          stack_.push_back(make_str(PyObj::Kind::Object, items[0]->s));
          break;
        }
        case 'b': {  // BUILD
          Py state = pop();
          Py obj = top();
          if (obj->kind == PyObj::Kind::Object) obj->state = state;
          // A dict's state (state_dict's _metadata) and a tensor's (Python attributes) carry no weights.
          break;
        }
        case 'Q': {  // BINPERSID
          Py pid = pop();
          stack_.push_back(persistent(pid));
          break;
        }
        default:
          throw CheckpointError(str_cat(where_, ": the pickle uses opcode 0x", std::hex, int{op}, std::dec, " at byte ",
                                        pos() - 1,
                                        ", which torch.save does not write (damaged or not a torch.save file)"));
      }
    }
  }

 private:
  size_t pos() const { return static_cast<size_t>(p_ - begin_); }
  const char* take(uint64_t n) {
    VOLT_CHECK(n <= static_cast<uint64_t>(end_ - p_), CheckpointError, where_,
               ": the pickle (data.pkl) ends early: truncated or damaged");
    const char* r = p_;
    p_ += n;
    return r;
  }
  uint8_t u8() { return static_cast<uint8_t>(*take(1)); }
  uint64_t le(int n) {
    const auto* b = reinterpret_cast<const unsigned char*>(take(static_cast<uint64_t>(n)));
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | b[k];
    return v;
  }
  std::string bytes(uint64_t n) {
    const char* b = take(n);
    return std::string(b, static_cast<size_t>(n));
  }
  std::string line() {
    const char* nl = static_cast<const char*>(std::memchr(p_, '\n', static_cast<size_t>(end_ - p_)));
    VOLT_CHECK(nl != nullptr, CheckpointError, where_, ": the pickle (data.pkl) ends early: truncated or damaged");
    std::string s(p_, nl);
    p_ = nl + 1;
    return s;
  }
  int64_t parse_int(const std::string& t) {
    try {
      return std::stoll(t);
    } catch (const std::exception&) {
      throw CheckpointError(str_cat(where_, ": malformed integer '", t, "' in the pickle"));
    }
  }
  static Py integer(int64_t v, PyObj::Kind k = PyObj::Kind::Int) {
    auto p = make(k);
    p->i = v;
    return p;
  }
  /// A two's-complement little-endian integer of n bytes; wider than 64 bits is kept as bytes.
  Py long_int(uint64_t n) {
    const auto* b = reinterpret_cast<const unsigned char*>(take(n));
    if (n > 8) return make(PyObj::Kind::Bytes);
    uint64_t v = 0;
    for (int k = static_cast<int>(n) - 1; k >= 0; --k) v = (v << 8) | b[k];
    if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);
    return integer(static_cast<int64_t>(v));
  }
  Py pop() {
    VOLT_CHECK(!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back()), CheckpointError, where_,
               ": malformed pickle (stack underflow at byte ", pos(), ")");
    Py v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Py& top() {
    VOLT_CHECK(!stack_.empty(), CheckpointError, where_, ": malformed pickle (empty stack at byte ", pos(), ")");
    return stack_.back();
  }
  std::vector<Py> pop_mark() {
    VOLT_CHECK(!marks_.empty(), CheckpointError, where_, ": malformed pickle (no mark at byte ", pos(), ")");
    const size_t m = marks_.back();
    marks_.pop_back();
    VOLT_CHECK(m <= stack_.size(), CheckpointError, where_, ": malformed pickle (a mark above the stack at byte ",
               pos(), ")");
    std::vector<Py> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  Py memo(uint64_t k) {
    auto it = memo_.find(k);
    VOLT_CHECK(it != memo_.end(), CheckpointError, where_, ": malformed pickle (memo entry ", k, " is not set)");
    return it->second;
  }
  void append(const Py& target, const std::vector<Py>& items) {
    VOLT_CHECK(
        target->kind == PyObj::Kind::List || target->kind == PyObj::Kind::Set || target->kind == PyObj::Kind::Object,
        CheckpointError, where_, ": malformed pickle (appending to a non-list at byte ", pos(), ")");
    target->items.insert(target->items.end(), items.begin(), items.end());
  }
  void set_items(const Py& target, const std::vector<Py>& kv) {
    VOLT_CHECK(target->kind == PyObj::Kind::Dict || target->kind == PyObj::Kind::Object, CheckpointError, where_,
               ": malformed pickle (setting items of a non-dict at byte ", pos(), ")");
    VOLT_CHECK(kv.size() % 2 == 0, CheckpointError, where_, ": malformed pickle (odd SETITEMS at byte ", pos(), ")");
    for (size_t k = 0; k < kv.size(); k += 2) target->entries.emplace_back(kv[k], kv[k + 1]);
  }

  /// The tensor-making functions torch.save uses become tensors; dict types become dicts; every
  /// other call makes an inert object of that class.
  Py call(const Py& fn, const Py& args) {
    const std::string name = fn->kind == PyObj::Kind::Global ? fn->s : std::string();
    const std::vector<Py>& a = args->items;
    auto arg = [&](size_t k) {
      VOLT_CHECK(args->kind == PyObj::Kind::Tuple && k < a.size(), CheckpointError, where_, ": ", name,
                 " is called with too few arguments");
      return a[k];
    };
    if (name == "collections.OrderedDict" || name == "builtins.dict" || name == "__builtin__.dict") {
      auto d = make(PyObj::Kind::Dict);
      if (!a.empty() && (a[0]->kind == PyObj::Kind::List || a[0]->kind == PyObj::Kind::Tuple))
        for (const Py& pair : a[0]->items)
          if (pair->kind == PyObj::Kind::Tuple && pair->items.size() == 2)
            d->entries.emplace_back(pair->items[0], pair->items[1]);
      return d;
    }
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      Py storage = arg(0), offset = arg(1), size = arg(2), stride = arg(3);
      VOLT_CHECK(storage->kind == PyObj::Kind::Storage && offset->kind == PyObj::Kind::Int &&
                     size->kind == PyObj::Kind::Tuple && stride->kind == PyObj::Kind::Tuple &&
                     size->items.size() == stride->items.size(),
                 CheckpointError, where_, ": malformed tensor in the pickle (", name, " arguments)");
      auto t = make(PyObj::Kind::Tensor);
      t->storage = storage;
      t->offset = offset->i;
      for (size_t k = 0; k < size->items.size(); ++k) {
        VOLT_CHECK(size->items[k]->kind == PyObj::Kind::Int && stride->items[k]->kind == PyObj::Kind::Int,
                   CheckpointError, where_, ": malformed tensor in the pickle (non-integer size or stride)");
        t->size.push_back(size->items[k]->i);
        t->stride.push_back(stride->items[k]->i);
      }
      return t;
    }
    if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state")
      return arg(0);  // nn.Parameter(data, requires_grad, ...): its data
    if (name == "torch.jit._pickle.restore_type_tag") return arg(0);  // LibTorch's typed containers
    if (name == "torch._tensor._rebuild_from_type_v2" || name == "torch._tensor._rebuild_from_type")
      return call(arg(0), arg(2));  // (func, type, args, state): a tensor subclass, as a tensor
    if (name == "copyreg._reconstructor" && args->kind == PyObj::Kind::Tuple && !a.empty())
      return make_str(PyObj::Kind::Object, a[0]->s);
    return make_str(PyObj::Kind::Object, name);
  }

  /// ('storage', type, key, location, numel): a record of the zip.
  Py persistent(const Py& pid) {
    VOLT_CHECK(pid->kind == PyObj::Kind::Tuple && pid->items.size() >= 5 && pid->items[0]->s == "storage" &&
                   pid->items[1]->kind == PyObj::Kind::Global && pid->items[4]->kind == PyObj::Kind::Int,
               CheckpointError, where_, ": the pickle refers to a persistent object that is not a storage");
    auto s = make(PyObj::Kind::Storage);
    s->dtype = storage_dtype(pid->items[1]->s, where_);
    s->key = pid->items[2]->kind == PyObj::Kind::Int ? std::to_string(pid->items[2]->i) : pid->items[2]->s;
    s->numel = pid->items[4]->i;
    VOLT_CHECK(s->numel >= 0 && s->numel <= (int64_t{1} << 58), CheckpointError, where_, ": a storage of ", s->numel,
               " elements (damaged file)");
    return s;
  }

  const char* p_;
  const char* const begin_ = p_;
  const char* end_;
  std::string where_;
  std::vector<Py> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Py> memo_;
};

}  // namespace

Py unpickle(const char* data, size_t size, const std::string& where) { return Unpickler(data, size, where).run(); }

}  // namespace volt::detail
