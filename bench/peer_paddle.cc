// peer_paddle.cc - the in-process scope a Paddle user has today: a
// std::unordered_map<std::string, std::unique_ptr<Variable>> per scope, a
// std::shared_mutex per scope, a parent chain (Paddle's framework/scope.cc).
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "peers.h"

namespace {

struct Variable {
  std::unique_ptr<unsigned char[]> data;
  size_t bytes = 0;
};

struct Scope {
  explicit Scope(Scope *parent) : parent_(parent) {}
  Variable *Var(const char *name) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto &slot = vars_[name];
    if (!slot) slot.reset(new Variable);
    return slot.get();
  }
  Variable *FindVarLocally(const char *name) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = vars_.find(name);
    return it == vars_.end() ? nullptr : it->second.get();
  }
  Variable *FindVar(const char *name) {
    for (Scope *s = this; s; s = s->parent_)
      if (Variable *v = s->FindVarLocally(name)) return v;
    return nullptr;
  }
  void EraseVar(const char *name) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    vars_.erase(name);
  }
  Scope *parent_;
  std::shared_mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Variable>> vars_;
};

}  // namespace

extern "C" {
void *pp_scope_new(void *parent) { return new Scope(static_cast<Scope *>(parent)); }
void pp_scope_delete(void *s) { delete static_cast<Scope *>(s); }
void *pp_var(void *s, const char *name) { return static_cast<Scope *>(s)->Var(name); }
void *pp_find(void *s, const char *name) { return static_cast<Scope *>(s)->FindVar(name); }
void pp_erase(void *s, const char *name) { static_cast<Scope *>(s)->EraseVar(name); }
void *pp_resize(void *v, size_t bytes) {
  Variable *var = static_cast<Variable *>(v);
  var->data.reset(new unsigned char[bytes]);
  var->bytes = bytes;
  return var->data.get();
}
}
