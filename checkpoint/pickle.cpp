#include "volt/checkpoint/pickle.h"

#include <algorithm>
#include <array>
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

std::string unquote(std::string t) {
  if (t.size() >= 2 && (t.front() == '\'' || t.front() == '"')) t = t.substr(1, t.size() - 2);
  return t;
}

/// Python's pickle virtual machine, without executing anything (see torch_save.h): a table of one
/// small handler per opcode, filled family by family.
class Unpickler {
 public:
  Unpickler(const char* data, size_t size, std::string where) : p_(data), end_(data + size), where_(std::move(where)) {}

  Py run() {
    const OpTable& ops = op_table();
    while (!stopped_) {
      const uint8_t op = u8();
      const Op handler = ops[op];
      if (handler == nullptr) unknown_opcode(op);
      handler(*this, op);
    }
    return result_;
  }

 private:
  using K = PyObj::Kind;
  using Op = void (*)(Unpickler&, uint8_t);
  using OpTable = std::array<Op, 256>;

  static const OpTable& op_table() {
    static const OpTable table = [] {
      OpTable t{};
      add_frame_ops(t);
      add_number_ops(t);
      add_text_ops(t);
      add_container_ops(t);
      add_fill_ops(t);
      add_memo_ops(t);
      add_object_ops(t);
      return t;
    }();
    return table;
  }

  /// The protocol and framing, STOP, and the stack's own operations.
  static void add_frame_ops(OpTable& t) {
    t[0x80] = [](Unpickler& u, uint8_t) { u.u8(); };                              // PROTO
    t[0x95] = [](Unpickler& u, uint8_t) { u.take(8); };                           // FRAME
    t['.'] = [](Unpickler& u, uint8_t) { u.stop(); };                             // STOP
    t['('] = [](Unpickler& u, uint8_t) { u.marks_.push_back(u.stack_.size()); };  // MARK
    t['0'] = [](Unpickler& u, uint8_t) { u.pop(); };                              // POP
    t['1'] = [](Unpickler& u, uint8_t) { u.pop_mark(); };                         // POP_MARK
    t['2'] = [](Unpickler& u, uint8_t) { u.push(u.top()); };                      // DUP
  }

  /// None, booleans, integers (binary and text) and floats (kept as a kind only).
  static void add_number_ops(OpTable& t) {
    t['N'] = [](Unpickler& u, uint8_t) { u.push(make(K::None)); };
    t[0x88] = t[0x89] = [](Unpickler& u, uint8_t op) { u.push(integer(op == 0x88, K::Bool)); };  // NEWTRUE/NEWFALSE
    t['J'] = [](Unpickler& u, uint8_t) { u.push(integer(static_cast<int32_t>(u.le(4)))); };      // BININT
    t['K'] = [](Unpickler& u, uint8_t) { u.push(integer(u.le(1))); };                            // BININT1
    t['M'] = [](Unpickler& u, uint8_t) { u.push(integer(u.le(2))); };                            // BININT2
    t[0x8a] = [](Unpickler& u, uint8_t) { u.push(u.long_int(u.le(1))); };                        // LONG1
    t[0x8b] = [](Unpickler& u, uint8_t) { u.push(u.long_int(u.le(4))); };                        // LONG4
    t['I'] = [](Unpickler& u, uint8_t) { u.push(u.text_int()); };                                // INT (text)
    t['L'] = [](Unpickler& u, uint8_t) { u.push(u.text_long()); };                               // LONG (text)
    t['F'] = [](Unpickler& u, uint8_t) {                                                         // FLOAT (text)
      u.line();
      u.push(make(K::Float));
    };
    t['G'] = [](Unpickler& u, uint8_t) {  // BINFLOAT
      u.take(8);
      u.push(make(K::Float));
    };
  }

  /// Strings and bytes: a length of 1, 4 or 8 bytes then the bytes, or a line of text.
  static void add_text_ops(OpTable& t) {
    t['X'] = [](Unpickler& u, uint8_t) { u.push_sized(K::Str, 4); };                      // BINUNICODE
    t[0x8c] = [](Unpickler& u, uint8_t) { u.push_sized(K::Str, 1); };                     // SHORT_BINUNICODE
    t[0x8d] = [](Unpickler& u, uint8_t) { u.push_sized(K::Str, 8); };                     // BINUNICODE8
    t['T'] = [](Unpickler& u, uint8_t) { u.push_sized(K::Str, 4); };                      // BINSTRING
    t['U'] = [](Unpickler& u, uint8_t) { u.push_sized(K::Str, 1); };                      // SHORT_BINSTRING
    t['B'] = [](Unpickler& u, uint8_t) { u.push_sized(K::Bytes, 4); };                    // BINBYTES
    t['C'] = [](Unpickler& u, uint8_t) { u.push_sized(K::Bytes, 1); };                    // SHORT_BINBYTES
    t[0x8e] = t[0x96] = [](Unpickler& u, uint8_t) { u.push_sized(K::Bytes, 8); };         // BINBYTES8, BYTEARRAY8
    t['V'] = [](Unpickler& u, uint8_t) { u.push(make_str(K::Str, u.line())); };           // UNICODE (text)
    t['S'] = [](Unpickler& u, uint8_t) { u.push(make_str(K::Str, unquote(u.line()))); };  // STRING (quoted)
  }

  /// Empty containers, and tuples, lists, sets and dicts built from the stack.
  static void add_container_ops(OpTable& t) {
    t[')'] = [](Unpickler& u, uint8_t) { u.push(make(K::Tuple)); };                                  // EMPTY_TUPLE
    t[']'] = [](Unpickler& u, uint8_t) { u.push(make(K::List)); };                                   // EMPTY_LIST
    t['}'] = [](Unpickler& u, uint8_t) { u.push(make(K::Dict)); };                                   // EMPTY_DICT
    t[0x8f] = [](Unpickler& u, uint8_t) { u.push(make(K::Set)); };                                   // EMPTY_SET
    t[0x85] = t[0x86] = t[0x87] = [](Unpickler& u, uint8_t op) { u.push(u.pop_tuple(op - 0x84)); };  // TUPLE1-3
    t['t'] = [](Unpickler& u, uint8_t) { u.push(u.from_mark(K::Tuple)); };                           // TUPLE
    t['l'] = [](Unpickler& u, uint8_t) { u.push(u.from_mark(K::List)); };                            // LIST
    t[0x91] = [](Unpickler& u, uint8_t) { u.push(u.from_mark(K::Set)); };                            // FROZENSET
    t['d'] = [](Unpickler& u, uint8_t) {                                                             // DICT
      auto d = make(K::Dict);
      u.set_items(d, u.pop_mark());
      u.push(d);
    };
  }

  /// Items added to the container (or object) below them on the stack.
  static void add_fill_ops(OpTable& t) {
    t['a'] = [](Unpickler& u, uint8_t) {  // APPEND
      Py v = u.pop();
      u.append(u.top(), {v});
    };
    t['e'] = t[0x90] = [](Unpickler& u, uint8_t) {  // APPENDS, ADDITEMS
      auto items = u.pop_mark();
      u.append(u.top(), items);
    };
    t['s'] = [](Unpickler& u, uint8_t) {  // SETITEM
      Py v = u.pop();
      Py k = u.pop();
      u.set_items(u.top(), {k, v});
    };
    t['u'] = [](Unpickler& u, uint8_t) {  // SETITEMS
      auto kv = u.pop_mark();
      u.set_items(u.top(), kv);
    };
  }

  /// The memo: PUT stores the top of the stack under a key, GET pushes it again.
  static void add_memo_ops(OpTable& t) {
    t['p'] = [](Unpickler& u, uint8_t) { u.put_text(); };                  // PUT (text)
    t['q'] = [](Unpickler& u, uint8_t) { u.put_binary(1); };               // BINPUT
    t['r'] = [](Unpickler& u, uint8_t) { u.put_binary(4); };               // LONG_BINPUT
    t[0x94] = [](Unpickler& u, uint8_t) { u.put_binary(0); };              // MEMOIZE
    t['g'] = [](Unpickler& u, uint8_t) { u.push(u.memo(u.text_key())); };  // GET (text)
    t['h'] = [](Unpickler& u, uint8_t) { u.push(u.memo(u.le(1))); };       // BINGET
    t['j'] = [](Unpickler& u, uint8_t) { u.push(u.memo(u.le(4))); };       // LONG_BINGET
  }

  /// Globals, calls (REDUCE and its kin; see call()), objects, their state and persistent ids.
  static void add_object_ops(OpTable& t) {
    t['c'] = [](Unpickler& u, uint8_t) { u.push(make_str(K::Global, u.qualified_name())); };  // GLOBAL
    t[0x93] = [](Unpickler& u, uint8_t) {                                                     // STACK_GLOBAL
      Py name = u.pop();
      Py module = u.pop();
      u.push(make_str(K::Global, module->s + "." + name->s));
    };
    t['R'] = t[0x81] = [](Unpickler& u, uint8_t) { u.call_from_stack(); };  // REDUCE, NEWOBJ
    t[0x92] = [](Unpickler& u, uint8_t) {                                   // NEWOBJ_EX
      u.pop();                                                              // kwargs
      u.call_from_stack();
    };
    t['i'] = [](Unpickler& u, uint8_t) {  // INST
      const std::string name = u.qualified_name();
      u.pop_mark();
      u.push(make_str(K::Object, name));
    };
    t['o'] = [](Unpickler& u, uint8_t) { u.obj(); };    // OBJ
    t['b'] = [](Unpickler& u, uint8_t) { u.build(); };  // BUILD
    t['Q'] = [](Unpickler& u, uint8_t) {                // BINPERSID
      Py pid = u.pop();
      u.push(u.persistent(pid));
    };
  }

  [[noreturn]] void unknown_opcode(uint8_t op) const {
    throw CheckpointError(str_cat(where_, ": the pickle uses opcode 0x", std::hex, int{op}, std::dec, " at byte ",
                                  pos() - 1, ", which torch.save does not write (damaged or not a torch.save file)"));
  }
  void stop() {
    VOLT_CHECK(!stack_.empty(), CheckpointError, where_, ": the pickle ends with an empty stack");
    result_ = stack_.back();
    stopped_ = true;
  }
  void push(Py v) { stack_.push_back(std::move(v)); }
  /// A string or bytes value whose length comes first, in `length_bytes` little-endian bytes.
  void push_sized(K kind, int length_bytes) { push(make_str(kind, bytes(le(length_bytes)))); }
  /// INT's text; I00 and I01 are False and True.
  Py text_int() {
    const std::string t = line();
    if (t == "00" || t == "01") return integer(t == "01", K::Bool);
    return integer(parse_int(t));
  }
  /// LONG's text, with its trailing L.
  Py text_long() {
    std::string t = line();
    if (!t.empty() && t.back() == 'L') t.pop_back();
    return integer(parse_int(t));
  }
  uint64_t text_key() { return static_cast<uint64_t>(parse_int(line())); }
  /// "module.name" from two lines of text (GLOBAL, INST).
  std::string qualified_name() {
    const std::string module = line();
    return module + "." + line();
  }
  Py pop_tuple(int n) {
    auto t = make(K::Tuple);
    t->items.resize(static_cast<size_t>(n));
    for (auto it = t->items.rbegin(); it != t->items.rend(); ++it) *it = pop();
    return t;
  }
  /// A container of `kind` holding what lies above the last mark.
  Py from_mark(K kind) {
    auto t = make(kind);
    t->items = pop_mark();
    return t;
  }
  void put_text() {
    Py v = top();
    memo_[text_key()] = v;
  }
  /// BINPUT / LONG_BINPUT (a key of `key_bytes` bytes) or MEMOIZE (0: the next key).
  void put_binary(int key_bytes) {
    Py v = top();
    const uint64_t key = key_bytes > 0 ? le(key_bytes) : memo_.size();
    memo_[key] = v;
  }
  void call_from_stack() {
    Py args = pop();
    Py fn = pop();
    push(call(fn, args));
  }
  void obj() {
    auto items = pop_mark();
    VOLT_CHECK(!items.empty(), CheckpointError, where_, ": malformed pickle (OBJ without a class)");
    push(make_str(K::Object, items[0]->s));
  }
  void build() {
    Py state = pop();
    Py obj = top();
    if (obj->kind == K::Object) obj->state = state;
    // A dict's state (state_dict's _metadata) and a tensor's (Python attributes) carry no weights.
  }

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
  bool stopped_ = false;
  Py result_;
};

}  // namespace

Py unpickle(const char* data, size_t size, const std::string& where) { return Unpickler(data, size, where).run(); }

}  // namespace volt::detail
