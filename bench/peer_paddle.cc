// peer_paddle.cc - the in-process scope a Paddle user has today: a
// std::unordered_map<std::string, std::unique_ptr<Variable>> per scope, a
// std::shared_mutex per scope, a parent chain (Paddle's framework/scope.cc).
// A private store: each process builds its own.
#include <cstdint>
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
  bool EraseVar(const char *name) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    return vars_.erase(name) > 0;
  }
  bool Rename(const char *from, const char *to) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto it = vars_.find(from);
    if (it == vars_.end() || vars_.count(to)) return false;
    auto v = std::move(it->second);
    vars_.erase(it);
    vars_.emplace(to, std::move(v));
    return true;
  }
  Scope *parent_;
  std::shared_mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Variable>> vars_;
};

Scope *S(void *s) { return static_cast<Scope *>(s); }

// The store interface (peers.h).
bstore *create(const char *) { return reinterpret_cast<bstore *>(uintptr_t{1}); }
void close(bstore *, bool) {}
void *root(bstore *) { return new Scope(nullptr); }
void *scope_new(bstore *, void *parent, const char *) { return new Scope(S(parent)); }
void scope_free(bstore *, void *s) { delete S(s); }
void *find(void *s, const char *name) { return S(s)->FindVar(name); }
int get(void *s, const char *name) { return S(s)->Var(name) ? 0 : -1; }
int erase(void *s, const char *name) { return S(s)->EraseVar(name) ? 0 : -1; }
int rename_var(void *s, const char *from, const char *to) {
  return S(s)->Rename(from, to) ? 0 : -1;
}

}  // namespace

extern "C" {
const store_ops store_paddle = {"paddle",  false,   true,       create, nullptr, close, root,
                                scope_new, nullptr, scope_free, find,   get,     erase, rename_var};

void *pp_scope_new(void *parent) { return new Scope(S(parent)); }
void pp_scope_delete(void *s) { delete S(s); }
void *pp_var(void *s, const char *name) { return S(s)->Var(name); }
void *pp_resize(void *v, size_t bytes) {
  Variable *var = static_cast<Variable *>(v);
  var->data.reset(new unsigned char[bytes]);
  var->bytes = bytes;
  return var->data.get();
}
}
