// peer_boost.cc - Boost.Interprocess managed_shared_memory: named objects
// (find, find_or_construct, destroy) as a store, allocate/deallocate as an
// allocator.  A shared store: every process opens the segment by name.
// Named objects live in one flat namespace: a scope is a key prefix and there
// is no parent chain (and no rename).
#include <cstdint>
#include <cstdio>
#include <new>
#include <string>

#include <boost/interprocess/managed_shared_memory.hpp>

#include "peers.h"

namespace bip = boost::interprocess;

struct bstore {
  bip::managed_shared_memory *m;
  std::string name;
};

namespace {

const size_t kSegSize = size_t{1} << 30; // sparse: pages are taken when touched

struct BVar {
  uint64_t value;
};

struct BScope {
  bstore *st;
  std::string prefix; // "" at the root, "name/" below
};

bstore *open_seg(const char *tag, bool create) {
  try {
    auto *m = create ? new bip::managed_shared_memory(bip::create_only, tag, kSegSize)
                     : new bip::managed_shared_memory(bip::open_only, tag);
    return new bstore{m, tag};
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pdshm-bench: boost %s: %s\n", tag, e.what());
    return nullptr;
  }
}

bstore *create(const char *tag) { return open_seg(tag, true); }
bstore *attach(const char *tag) { return open_seg(tag, false); }

void close(bstore *st, bool destroy) {
  delete st->m;
  if (destroy) bip::shared_memory_object::remove(st->name.c_str());
  delete st;
}

void *root(bstore *st) { return new BScope{st, ""}; }

void *scope_new(bstore *st, void *parent, const char *name) {
  char anon[64];
  return new BScope{st, (parent ? static_cast<BScope *>(parent)->prefix : "") +
                            (name ? name : peer_anon(anon, sizeof anon)) + "/"};
}

void *scope_open(bstore *st, const char *name) { return new BScope{st, std::string(name) + "/"}; }
void scope_free(bstore *, void *sc) { delete static_cast<BScope *>(sc); }

// The object's key: the name itself at the root (no copy), else prefix+name.
const char *key(const BScope *s, const char *name, char *buf, size_t cap) {
  return s->prefix.empty() ? name : peer_key(buf, cap, s->prefix.c_str(), name);
}

void *find(void *sc, const char *name) {
  auto *s = static_cast<BScope *>(sc);
  char buf[512];
  return s->st->m->find<BVar>(key(s, name, buf, sizeof buf)).first;
}

int get(void *sc, const char *name) {
  auto *s = static_cast<BScope *>(sc);
  char buf[512];
  try {
    return s->st->m->find_or_construct<BVar>(key(s, name, buf, sizeof buf))(BVar{0}) ? 0 : -1;
  } catch (const std::exception &) {
    return -1;
  }
}

int erase(void *sc, const char *name) {
  auto *s = static_cast<BScope *>(sc);
  char buf[512];
  return s->st->m->destroy<BVar>(key(s, name, buf, sizeof buf)) ? 0 : -1;
}

void *alloc_open(const char *tag) { return create(tag); }
void *alloc(void *ctx, size_t n) {
  return static_cast<bstore *>(ctx)->m->allocate(n, std::nothrow);
}
void dealloc(void *ctx, void *p) { static_cast<bstore *>(ctx)->m->deallocate(p); }
void alloc_close(void *ctx) { close(static_cast<bstore *>(ctx), true); }

} // namespace

extern "C" {
const store_ops store_boost = {"boost",    true,       false,      create, attach, close, root,
                               scope_new, scope_open, scope_free, find,   get,    erase, nullptr};
const alloc_ops alloc_boost = {"boost", alloc_open, alloc, dealloc, alloc_close};
}
