// The --moe-layer-freq expression parser (models/input/layer_pattern.h): recursive descent.
#include "models/input/layer_pattern.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "models/errors.h"

namespace trainsim::input {
namespace {

class LayerPatternParser {
 public:
  /// `max_entries`: the longest pattern (model.num_layers' size limit).
  LayerPatternParser(std::string text, std::int64_t max_entries) : max_entries_(max_entries) {
    for (char c : text)
      if (!std::isspace(static_cast<unsigned char>(c))) text_ += c;
  }
  /// The pattern, or a reason in `why`.
  std::optional<std::vector<std::uint8_t>> parse(std::string& why) {
    try {
      Value v = expr();
      if (pos_ != text_.size()) throw InputError(at("unexpected '" + std::string(1, text_[pos_]) + "'"));
      if (!v.is_list) throw InputError("evaluates to an integer, not a list");
      std::vector<std::uint8_t> out;
      for (std::int64_t x : v.list) {
        if (x != 0 && x != 1)
          throw InputError("has the entry " + std::to_string(x) +
                                      "; 1 marks an MoE layer, 0 a dense layer");
        out.push_back(std::uint8_t(x));
      }
      return out;
    } catch (const InputError& e) {
      why = e.what();
      return std::nullopt;
    }
  }

 private:
  struct Value {
    bool is_list = false;
    std::int64_t n = 0;
    std::vector<std::int64_t> list;
  };
  static constexpr int kMaxDepth = 64;
  static constexpr std::int64_t kMaxWork = 1 << 22;

  /// Counts `n` elements produced (or repetitions made); too many is an error.
  void spend(std::int64_t n) {
    work_ += n;
    if (work_ > kMaxWork)
      throw InputError("takes more than " + std::to_string(kMaxWork) +
                                  " list operations to evaluate");
  }
  /// Enters a parenthesis or a list; too deep is an error.
  struct Nest {
    explicit Nest(LayerPatternParser& p) : p_(p) {
      if (++p_.depth_ > kMaxDepth)
        throw InputError(p_.at("nests deeper than " + std::to_string(kMaxDepth) + " levels"));
    }
    ~Nest() { --p_.depth_; }
    LayerPatternParser& p_;
  };

  [[noreturn]] void too_long() const {
    throw InputError("is longer than " + std::to_string(max_entries_) + " layers");
  }
  std::string at(const std::string& what) const {
    return what + " at character " + std::to_string(pos_ + 1);
  }
  bool eat(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Value expr() {
    Value v = term();
    while (eat('+')) {
      Value w = term();
      if (v.is_list != w.is_list) throw InputError(at("adds a list and an integer"));
      if (v.is_list) {
        if (v.list.size() + w.list.size() > std::size_t(max_entries_)) too_long();
        spend(std::int64_t(w.list.size()) + 1);
        v.list.insert(v.list.end(), w.list.begin(), w.list.end());
      } else {
        v.n = std::min(v.n + w.n, max_entries_ + 1);
      }
    }
    return v;
  }
  Value term() {
    Value v = factor();
    while (eat('*')) {
      Value w = factor();
      if (v.is_list && w.is_list) throw InputError(at("multiplies two lists"));
      if (!v.is_list && !w.is_list) {
        v.n = std::min(v.n * w.n, max_entries_ + 1);  // both <= max_entries_ + 1: no overflow
        continue;
      }
      const Value& list = v.is_list ? v : w;
      const std::int64_t times = v.is_list ? w.n : v.n;
      if (std::int64_t(list.list.size()) * times > max_entries_) too_long();
      Value out;
      out.is_list = true;
      spend(list.list.empty() ? 1 : std::int64_t(list.list.size()) * times + 1);
      if (!list.list.empty())
        for (std::int64_t i = 0; i < times; ++i)
          out.list.insert(out.list.end(), list.list.begin(), list.list.end());
      v = std::move(out);
    }
    return v;
  }
  Value factor() {
    if (eat('(')) {
      const Nest nest(*this);
      Value v = expr();
      if (!eat(')')) throw InputError(at("expected ')'"));
      return v;
    }
    if (eat('[')) {
      const Nest nest(*this);
      Value v;
      v.is_list = true;
      if (eat(']')) return v;
      do {
        Value x = expr();
        if (x.is_list) throw InputError(at("nests a list in a list"));
        if (std::int64_t(v.list.size()) >= max_entries_) too_long();
        v.list.push_back(x.n);
      } while (eat(','));
      if (!eat(']')) throw InputError(at("expected ']' or ','"));
      return v;
    }
    const std::size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (start == pos_)
      throw InputError(pos_ < text_.size()
                                      ? at("unexpected '" + std::string(1, text_[pos_]) + "'")
                                      : "ends early");
    Value v;
    const std::string digits = text_.substr(start, pos_ - start);
    // Any integer above the longest pattern acts as that bound plus one (18 digits fit stoll).
    v.n = digits.size() > 18 ? max_entries_ + 1
                             : std::min<std::int64_t>(std::stoll(digits), max_entries_ + 1);
    return v;
  }

  const std::int64_t max_entries_;
  std::string text_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  std::int64_t work_ = 0;
};

}  // namespace

std::optional<std::vector<std::uint8_t>> parse_layer_pattern(const std::string& text,
                                                             std::int64_t max_entries,
                                                             std::string& why) {
  return LayerPatternParser(text, max_entries).parse(why);
}

}  // namespace trainsim::input
