// SPDX-License-Identifier: Apache-2.0
#include "btree/extent_tree.h"

#include <algorithm>
#include <cassert>
#include <string>

namespace ubcache {
namespace {

// Below this fill a node tries to merge with a sibling; a merge happens only
// if the result is at most kMergeMax full, so a merge is not undone by the
// next insert.
constexpr size_t kMinFillDiv = 4;     // 1/4
constexpr size_t kMergeMaxNum = 3;    // 3/4
constexpr size_t kMergeMaxDen = 4;
// Range operations work in batches so a huge invalidate never holds more
// than a few leaves resident at once.
constexpr size_t kBatch = 256;
// Without I/O a change runs its batches with nothing evicted between them;
// Probe bounds what it may hold resident that way.
constexpr size_t kProbeMax = 4 * kBatch;

}  // namespace

ExtentTree::ExtentTree(NodeStore* store, uint32_t shard, uint64_t set_id,
                       TreeCounters* counters)
    : store_(store),
      shard_(shard),
      set_id_(set_id),
      node_size_(store->node_size()),
      leaf_cap_(LeafCapacity(store->node_size())),
      internal_cap_(InternalCapacity(store->node_size())),
      counters_(counters),
      buf_(store->node_size()) {}

ExtentTree::~ExtentTree() {
  // Tear down without writing anything: a destroyed index is a crashed one
  // unless it was checkpointed. Iteratively, so deep trees don't recurse.
  counters_->cached_nodes = 0;
  counters_->cached_bytes = 0;
}

Status ExtentTree::Init(const ShardRoot& root) {
  if (root.addr == kNoNode) {
    root_ = std::make_unique<Node>();
    root_->dirty = true;
    dirty_ = 1;
    counters_->extents = 0;
    counters_->nodes = 1;
  } else {
    UB_ASSIGN_OR_RETURN(root_, ReadNode(root.addr, root.level));
    counters_->extents = root.extents;
    counters_->nodes = root.nodes;
  }
  counters_->cached_nodes = 1;
  Charge(root_.get());
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Node cache

Result<std::unique_ptr<ExtentTree::Node>> ExtentTree::ReadNode(uint64_t addr, int level) {
  UB_RETURN_IF_ERROR(store_->ReadNode(addr, buf_.data()));
  counters_->node_reads++;
  DecodedNode d;
  UB_RETURN_IF_ERROR(DecodeNode(buf_.data(), node_size_, {addr, shard_, level, set_id_}, &d));
  return MakeNode(addr, d);
}

std::unique_ptr<ExtentTree::Node> ExtentTree::MakeNode(uint64_t addr, DecodedNode& d) {
  auto n = std::make_unique<Node>();
  n->addr = addr;
  n->level = d.level;
  if (d.level == 0) {
    n->ext.Assign(std::move(d.extents));
  } else {
    n->kids.reserve(d.children.size());
    for (const NodeChildRef& c : d.children) n->kids.push_back(Child{c.key, c.addr, nullptr});
  }
  return n;
}

ExtentTree::Node* ExtentTree::Attach(Node* parent, size_t i, std::unique_ptr<Node> node) {
  Child& c = parent->kids[i];
  c.node = std::move(node);
  Node* n = c.node.get();
  n->parent = parent;
  parent->resident_children++;
  counters_->cached_nodes++;
  Charge(n);
  LruTouch(n);
  return n;
}

Result<ExtentTree::Node*> ExtentTree::LoadChild(Node* parent, size_t i) {
  Child& c = parent->kids[i];
  if (c.node) {
    LruTouch(c.node.get());
    return c.node.get();
  }
  if (!io_) {
    missing_ = MissingNode{c.addr, static_cast<uint8_t>(parent->level - 1), RouteKey(parent, i)};
    return Status::WouldBlock("extent index: node " + std::to_string(c.addr) + " not in memory");
  }
  UB_ASSIGN_OR_RETURN(std::unique_ptr<Node> n, ReadNode(c.addr, parent->level - 1));
  return Attach(parent, i, std::move(n));
}

ExtentTree::Node* ExtentTree::ResidentChild(Node* parent, size_t i) {
  if (io_) {
    auto r = LoadChild(parent, i);
    return r.ok() ? *r : nullptr;
  }
  Node* n = parent->kids[i].node.get();
  if (n) LruTouch(n);
  return n;
}

// A key whose descent from the root reaches child i of parent: the child's
// lowest key (child 0's is its parent's).
ExtentKey ExtentTree::RouteKey(const Node* parent, size_t i) const {
  while (i == 0 && parent->parent) {
    i = IndexInParent(parent);
    parent = parent->parent;
  }
  return i == 0 ? ExtentKey{0, 0} : parent->kids[i].key;
}

// ---------------------------------------------------------------------------
// Reads without the lock (see the header)

uint64_t ExtentTree::BeginRead(uint64_t addr) {
  reading_[addr].readers++;
  return ++read_clock_;
}

void ExtentTree::NoteWritten(uint64_t addr) {
  auto it = reading_.find(addr);
  if (it != reading_.end()) it->second.written_at = ++read_clock_;
}

// The resident node at `level` + 1 with a non-resident child at `addr`:
// along `route` first, else any (the route may have moved under a split or
// merge since the read began), else null.
ExtentTree::Node* ExtentTree::FindParentOf(uint64_t addr, uint8_t level, ExtentKey route) {
  auto holds = [&](Node* p) {
    for (const Child& c : p->kids)
      if (c.addr == addr && !c.node) return true;
    return false;
  };
  Node* n = root_.get();
  while (n && n->level > level + 1 && !n->kids.empty()) n = n->kids[ChildIndex(n, route)].node.get();
  if (n && n->level == level + 1 && holds(n)) return n;
  std::vector<Node*> todo{root_.get()};
  while (!todo.empty()) {
    Node* p = todo.back();
    todo.pop_back();
    if (p->level == level + 1) {
      if (holds(p)) return p;
      continue;
    }
    if (p->level <= level + 1 || p->resident_children == 0) continue;
    for (Child& c : p->kids)
      if (c.node) todo.push_back(c.node.get());
  }
  return nullptr;
}

// Ordering rule 10 (doc/design.md): a node read without the lock goes in
// only if no write reached its address since the read began, and only
// under a resident parent that still points there with no copy of it.
Status ExtentTree::InstallRead(const MissingNode& m, uint64_t token, const uint8_t* data) {
  auto it = reading_.find(m.addr);
  assert(it != reading_.end() && "InstallRead without BeginRead");
  bool written = it->second.written_at > token;
  if (--it->second.readers == 0) reading_.erase(it);
  if (written || !data) return Status::OK();
  Node* parent = FindParentOf(m.addr, m.level, m.route);
  if (!parent) return Status::OK();
  counters_->node_reads++;
  DecodedNode d;
  UB_RETURN_IF_ERROR(DecodeNode(data, node_size_, {m.addr, shard_, m.level, set_id_}, &d));
  for (size_t i = 0; i < parent->kids.size(); i++) {
    if (parent->kids[i].addr == m.addr && !parent->kids[i].node) {
      Attach(parent, i, MakeNode(m.addr, d));
      break;
    }
  }
  return Status::OK();
}

void ExtentTree::Charge(Node* n) {
  size_t bytes = sizeof(Node) + n->ext.bytes() +
                 n->kids.capacity() * sizeof(Child);
  counters_->cached_bytes += bytes - n->charged;  // unsigned wrap is fine
  n->charged = bytes;
}

void ExtentTree::LruTouch(Node* n) {
  if (n == root_.get()) return;  // the root is always resident
  if (n->in_lru) {
    if (lru_head_ == n) return;
    LruRemove(n);
  }
  n->lru_prev = nullptr;
  n->lru_next = lru_head_;
  if (lru_head_) lru_head_->lru_prev = n;
  lru_head_ = n;
  if (!lru_tail_) lru_tail_ = n;
  n->in_lru = true;
}

void ExtentTree::LruRemove(Node* n) {
  if (!n->in_lru) return;
  (n->lru_prev ? n->lru_prev->lru_next : lru_head_) = n->lru_next;
  (n->lru_next ? n->lru_next->lru_prev : lru_tail_) = n->lru_prev;
  n->lru_prev = n->lru_next = nullptr;
  n->in_lru = false;
}

// Forgets a resident node's memory accounting before it is destroyed or
// handed elsewhere. Its resident children must already be gone or moved.
void ExtentTree::DropResident(Node* n) {
  LruRemove(n);
  counters_->cached_bytes -= n->charged;
  n->charged = 0;
  counters_->cached_nodes--;
  if (n->dirty) dirty_--;
  n->dirty = false;
}

void ExtentTree::MarkDirty(Node* n) {
  if (!n->dirty) {
    n->dirty = true;
    dirty_++;
  }
}

uint64_t ExtentTree::dirty_nodes() const { return dirty_; }

size_t ExtentTree::IndexInParent(const Node* n) const {
  const Node* p = n->parent;
  for (size_t i = 0; i < p->kids.size(); i++) {
    if (p->kids[i].node.get() == n) return i;
  }
  assert(false && "node not found in its parent");
  return 0;
}

void ExtentTree::FreeAddr(uint64_t addr) {
  if (addr == kNoNode) return;
  if (fresh_.erase(addr)) {
    store_->FreeNode(addr);  // no durable root reaches it
  } else {
    deferred_free_.push_back(addr);  // the last checkpoint's tree may
  }
}

Status ExtentTree::WriteBack(Node* n) {
  // Copy-on-write unless no durable root can reach the current address.
  uint64_t old = n->addr;
  bool cow = old == kNoNode || !fresh_.count(old);
  uint64_t addr = old;
  if (cow) {
    UB_ASSIGN_OR_RETURN(addr, store_->AllocNode());
  }
  ++write_seq_;
  if (n->level == 0) {
    n->ext.CopyTo(&flat_);
    EncodeLeafNode(buf_.data(), node_size_, shard_, write_seq_, addr, flat_, set_id_);
  } else {
    std::vector<NodeChildRef> refs;
    refs.reserve(n->kids.size());
    for (const Child& c : n->kids) {
      assert(c.addr != kNoNode && "children are written before their parent");
      refs.push_back({c.key, c.addr});
    }
    EncodeInternalNode(buf_.data(), node_size_, n->level, shard_, write_seq_, addr, refs,
                       set_id_);
  }
  NoteWritten(addr);  // rule 10 (doc/design.md): a read of addr begun before this write is stale
  Status st = store_->WriteNode(addr, buf_.data());
  if (!st.ok()) {
    if (cow) store_->FreeNode(addr);  // nobody references it
    return st;
  }
  counters_->node_writes++;
  if (cow) {
    fresh_.insert(addr);
    FreeAddr(old);
    n->addr = addr;
    if (n->parent) {
      n->parent->kids[IndexInParent(n)].addr = addr;
      MarkDirty(n->parent);
    }
  }
  n->dirty = false;
  dirty_--;
  return Status::OK();
}

Status ExtentTree::Evict(uint64_t budget) {
  // Without I/O, once dirty nodes are what is left over budget, nothing
  // more is done until the writer has run (each pass would walk them all).
  if (!io_ && dirty_over_budget_) return Status::OK();
  dirty_over_budget_ = false;
  while (counters_->cached_bytes > budget) {
    // The coldest node with no resident children; internal nodes stay until
    // their children have gone.
    // Without I/O, dirty nodes stay: the writer with I/O takes them.
    Node* victim = lru_tail_;
    while (victim && (victim->resident_children > 0 || (!io_ && victim->dirty)))
      victim = victim->lru_prev;
    if (!victim) {
      if (!io_) dirty_over_budget_ = true;
      break;
    }
    if (victim->dirty) UB_RETURN_IF_ERROR(WriteBack(victim));
    Node* p = victim->parent;
    size_t i = IndexInParent(victim);
    DropResident(victim);
    p->kids[i].node.reset();
    p->resident_children--;
  }
  return Status::OK();
}

Status ExtentTree::FlushSubtree(Node* n) {
  if (n->level > 0 && n->resident_children > 0) {
    for (Child& c : n->kids) {
      if (c.node) UB_RETURN_IF_ERROR(FlushSubtree(c.node.get()));
    }
  }
  if (n->dirty) UB_RETURN_IF_ERROR(WriteBack(n));
  return Status::OK();
}

Status ExtentTree::Flush(ShardRoot* root) {
  UB_RETURN_IF_ERROR(FlushSubtree(root_.get()));
  root->addr = root_->addr;
  root->level = root_->level;
  root->extents = counters_->extents;
  root->nodes = counters_->nodes;
  return Status::OK();
}

std::vector<uint64_t> ExtentTree::CheckpointTaken() {
  fresh_.clear();
  std::vector<uint64_t> out;
  out.swap(deferred_free_);
  return out;
}

// ---------------------------------------------------------------------------
// Search

size_t ExtentTree::ChildIndex(const Node* n, ExtentKey k) {
  // The last child whose lowest key <= k; child 0 takes everything below.
  auto it = std::upper_bound(n->kids.begin() + 1, n->kids.end(), k,
                             [](ExtentKey key, const Child& c) { return key < c.key; });
  return static_cast<size_t>(it - n->kids.begin()) - 1;
}

Status ExtentTree::SeekGE(ExtentKey k, Cursor* c) {
  c->nodes.clear();
  c->idx.clear();
  c->end = false;
  Node* n = root_.get();
  while (n->level > 0) {
    size_t i = ChildIndex(n, k);
    c->nodes.push_back(n);
    c->idx.push_back(i);
    UB_ASSIGN_OR_RETURN(n, LoadChild(n, i));
  }
  size_t pos = n->ext.LowerBound(k);
  c->nodes.push_back(n);
  c->idx.push_back(pos);
  if (pos == n->ext.size()) return NextLeaf(c);
  return Status::OK();
}

Status ExtentTree::NextLeaf(Cursor* c) {
  c->nodes.pop_back();
  c->idx.pop_back();
  while (!c->nodes.empty()) {
    Node* n = c->nodes.back();
    size_t& i = c->idx.back();
    if (i + 1 < n->kids.size()) {
      ++i;
      UB_ASSIGN_OR_RETURN(Node * child, LoadChild(n, i));
      while (child->level > 0) {
        c->nodes.push_back(child);
        c->idx.push_back(0);
        UB_ASSIGN_OR_RETURN(child, LoadChild(child, 0));
      }
      c->nodes.push_back(child);
      c->idx.push_back(0);
      if (!child->ext.empty()) return Status::OK();
      c->nodes.pop_back();  // an empty leaf (only transiently): keep going
      c->idx.pop_back();
      continue;
    }
    c->nodes.pop_back();
    c->idx.pop_back();
  }
  c->end = true;
  return Status::OK();
}

Status ExtentTree::Next(Cursor* c) {
  const Node* leaf = c->nodes.back();
  if (++c->idx.back() < leaf->ext.size()) return Status::OK();
  const Extent last = leaf->ext.back();
  UB_RETURN_IF_ERROR(NextLeaf(c));
  if (c->end) return Status::OK();
  // Each leaf is checked in itself when it is read (DecodeNode); across
  // leaves, only here: extents follow one another in key order without
  // overlap. Two leaves that do not are a corrupt tree whose checksums
  // held (lying separators): an error, never two answers for one block.
  const Extent& x = Cur(*c);
  if (KeyOf(x) <= KeyOf(last) || (x.dev == last.dev && x.start < last.end())) {
    return Status::Corruption("extent index: shard " + std::to_string(shard_) + ": the leaf at " +
                              std::to_string(c->nodes.back()->addr) +
                              " overlaps or precedes the leaf before it");
  }
  return Status::OK();
}

Status ExtentTree::Lookup(uint32_t dev, uint64_t start, uint64_t end, std::vector<Extent>* out) {
  Cursor c;
  UB_RETURN_IF_ERROR(SeekGE({dev, start + 1}, &c));  // first extent ending after start
  while (!c.end) {
    const Extent& x = Cur(c);
    if (x.dev != dev || x.start >= end) break;
    Extent clipped = x;
    clipped.start = std::max(x.start, start);
    clipped.len = std::min(x.end(), end) - clipped.start;
    clipped.cache_offset = x.cache_offset + (clipped.start - x.start);
    out->push_back(clipped);
    UB_RETURN_IF_ERROR(Next(&c));
  }
  return Status::OK();
}

Status ExtentTree::Probe(uint32_t dev, uint64_t start, uint64_t end, bool insert) {
  Cursor c;
  UB_RETURN_IF_ERROR(SeekGE({dev, start + 1}, &c));  // Replace's read phase, without the copies
  size_t n = 0;
  while (!c.end) {
    const Extent& x = Cur(c);
    if (x.dev != dev || x.start >= end) break;
    if (++n > kProbeMax) {
      clear_missing();
      return Status::WouldBlock("extent index: a change of more than " + std::to_string(kProbeMax) +
                                " extents needs a thread that may wait");
    }
    UB_RETURN_IF_ERROR(Next(&c));
  }
  if (insert) UB_RETURN_IF_ERROR(DescendToLeaf({dev, end}).status());
  return Status::OK();
}

Status ExtentTree::Collect(ExtentKey from, size_t max, std::vector<Extent>* out, bool* done) {
  Cursor c;
  UB_RETURN_IF_ERROR(SeekGE(from, &c));
  while (!c.end && out->size() < max) {
    out->push_back(Cur(c));
    UB_RETURN_IF_ERROR(Next(&c));
  }
  *done = c.end;
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Mutation. Each primitive descends from the root by key; the nodes on the
// way were made resident by the batch's read phase, so a mutation reads
// nothing (only an optional merge may), and a failed read leaves the tree
// untouched.

Result<ExtentTree::Node*> ExtentTree::DescendToLeaf(ExtentKey k) {
  Node* n = root_.get();
  while (n->level > 0) {
    UB_ASSIGN_OR_RETURN(n, LoadChild(n, ChildIndex(n, k)));
  }
  return n;
}

Status ExtentTree::InsertExtent(const Extent& e) {
  UB_ASSIGN_OR_RETURN(Node * leaf, DescendToLeaf(KeyOf(e)));
  size_t pos = leaf->ext.LowerBound(KeyOf(e));
  assert(pos == leaf->ext.size() || KeyOf(leaf->ext[pos]) != KeyOf(e));
  bool at_end = pos == leaf->ext.size();
  leaf->ext.Insert(pos, e);
  counters_->extents++;
  MarkDirty(leaf);
  Charge(leaf);
  if (leaf->ext.size() > leaf_cap_) Split(leaf, at_end);
  return Status::OK();
}

Status ExtentTree::UpdateInPlace(const Extent& e) {
  UB_ASSIGN_OR_RETURN(Node * leaf, DescendToLeaf(KeyOf(e)));
  size_t pos = leaf->ext.LowerBound(KeyOf(e));
  assert(pos < leaf->ext.size() && KeyOf(leaf->ext[pos]) == KeyOf(e));
  leaf->ext.Set(pos, e);
  MarkDirty(leaf);
  return Status::OK();
}

Status ExtentTree::DeleteKey(ExtentKey k) {
  UB_ASSIGN_OR_RETURN(Node * leaf, DescendToLeaf(k));
  size_t pos = leaf->ext.LowerBound(k);
  assert(pos < leaf->ext.size() && KeyOf(leaf->ext[pos]) == k);
  leaf->ext.Erase(pos);
  counters_->extents--;
  MarkDirty(leaf);
  Rebalance(leaf);
  return Status::OK();
}

void ExtentTree::Split(Node* n, bool appending) {
  auto right = std::make_unique<Node>();
  right->level = n->level;
  ExtentKey sep;
  size_t count = n->count();
  // Appending at the right end (a sequential fill) leaves the left node
  // 7/8 full instead of half full, as most B-trees do.
  size_t mid = appending ? count - count / 8 : count / 2;
  if (n->level == 0) {
    n->ext.MoveTailTo(mid, &right->ext);
    sep = KeyOf(right->ext.front());
  } else {
    for (size_t i = mid; i < count; i++) {
      Child& c = n->kids[i];
      if (c.node) {
        c.node->parent = right.get();
        n->resident_children--;
        right->resident_children++;
      }
      right->kids.push_back(std::move(c));
    }
    n->kids.resize(mid);
    sep = right->kids.front().key;
  }
  counters_->nodes++;
  counters_->cached_nodes++;
  MarkDirty(n);
  MarkDirty(right.get());
  Node* r = right.get();
  Charge(n);
  Charge(r);

  if (n == root_.get()) {
    // The tree grows a level: a new root over the old root and its sibling.
    auto root = std::make_unique<Node>();
    root->level = n->level + 1;
    ExtentKey low{0, 0};
    root->kids.push_back(Child{low, n->addr, std::move(root_)});
    root->kids.push_back(Child{sep, kNoNode, std::move(right)});
    n->parent = r->parent = root.get();
    root->resident_children = 2;
    root_ = std::move(root);
    counters_->nodes++;
    counters_->cached_nodes++;
    MarkDirty(root_.get());
    Charge(root_.get());
    LruTouch(n);
    LruTouch(r);
    return;
  }
  Node* p = n->parent;
  size_t i = IndexInParent(n);
  r->parent = p;
  p->kids.insert(p->kids.begin() + i + 1, Child{sep, kNoNode, std::move(right)});
  p->resident_children++;
  LruTouch(r);
  MarkDirty(p);
  Charge(p);
  if (p->kids.size() > internal_cap_) Split(p, appending && i + 2 == p->kids.size());
}

// Removes child i of p (resident or not) and frees its address.
void ExtentTree::RemoveChild(Node* p, size_t i) {
  Child& c = p->kids[i];
  FreeAddr(c.addr);
  if (c.node) {
    assert(c.node->resident_children == 0);
    DropResident(c.node.get());
    p->resident_children--;
  }
  p->kids.erase(p->kids.begin() + i);
  counters_->nodes--;
  MarkDirty(p);
}

void ExtentTree::Rebalance(Node* n) {
  if (n == root_.get()) {
    // A root with one child hands the root over to it: the tree shrinks.
    while (root_->level > 0 && root_->kids.size() == 1) {
      if (!ResidentChild(root_.get(), 0)) return;  // keep the taller tree; still correct
      std::unique_ptr<Node> old = std::move(root_);
      root_ = std::move(old->kids[0].node);
      root_->parent = nullptr;
      LruRemove(root_.get());
      FreeAddr(old->addr);
      old->kids.clear();
      old->resident_children = 0;
      DropResident(old.get());
      counters_->nodes--;
    }
    if (root_->level > 0 && root_->kids.empty()) {
      // Only after a failed collapse above: restart from an empty leaf.
      FreeAddr(root_->addr);
      DropResident(root_.get());
      root_ = std::make_unique<Node>();
      counters_->cached_nodes++;
      MarkDirty(root_.get());
      Charge(root_.get());
    }
    return;
  }
  size_t count = n->count();
  size_t cap = n->level == 0 ? leaf_cap_ : internal_cap_;
  if (count >= cap / kMinFillDiv && count > 0) return;
  Node* p = n->parent;
  size_t i = IndexInParent(n);
  if (count == 0) {
    // Without I/O an emptied leaf stays (see the header): the range's
    // insert, probed to land here, must not be routed to a neighbour.
    if (!io_ && n->level == 0) return;
    // Children are never resident in an empty internal node.
    RemoveChild(p, i);
    Rebalance(p);
    return;
  }
  if (p->kids.size() < 2) return;
  size_t li = i > 0 ? i - 1 : i;  // merge the pair (li, li + 1)
  Node* left = ResidentChild(p, li);
  Node* right = left ? ResidentChild(p, li + 1) : nullptr;
  if (!left || !right) return;  // no merge; still correct
  if (left->count() + right->count() > cap * kMergeMaxNum / kMergeMaxDen) return;
  if (n->level == 0) {
    left->ext.Append(&right->ext);
  } else {
    right->kids[0].key = p->kids[li + 1].key;  // entry 0's key becomes a real bound
    for (Child& c : right->kids) {
      if (c.node) {
        c.node->parent = left;
        right->resident_children--;
        left->resident_children++;
      }
      left->kids.push_back(std::move(c));
    }
    right->kids.clear();
  }
  MarkDirty(left);
  Charge(left);
  RemoveChild(p, li + 1);
  Rebalance(p);
}

Status ExtentTree::Replace(uint32_t dev, uint64_t start, uint64_t end, const Extent* insert,
                           std::vector<Extent>* removed_dirty) {
  std::vector<Extent> olds;
  uint64_t pos = start;
  bool inserted = false;
  for (;;) {
    // Read phase: the next batch of overlapping extents.
    olds.clear();
    Cursor c;
    UB_RETURN_IF_ERROR(SeekGE({dev, pos + 1}, &c));
    while (!c.end && olds.size() < kBatch) {
      const Extent& x = Cur(c);
      if (x.dev != dev || x.start >= end) break;
      olds.push_back(x);
      UB_RETURN_IF_ERROR(Next(&c));
    }
    // Write phase: remove exactly [start, end) from each.
    for (const Extent& x : olds) {
      if (removed_dirty && x.dirty) {
        Extent piece = x;
        piece.start = std::max(x.start, start);
        piece.len = std::min(x.end(), end) - piece.start;
        piece.cache_offset = x.cache_offset + (piece.start - x.start);
        removed_dirty->push_back(piece);
      }
      bool keep_left = x.start < start;
      bool keep_right = x.end() > end;
      if (keep_right) {
        // The right remainder keeps x's key: an in-place update.
        Extent r = x;
        r.start = end;
        r.len = x.end() - end;
        r.cache_offset = x.cache_offset + (end - x.start);
        UB_RETURN_IF_ERROR(UpdateInPlace(r));
      } else if (insert && !inserted && insert->end() == x.end()) {
        // The insert takes x's key (an overwrite of the same blocks, the
        // common case): one in-place update, where a delete and an insert
        // would each descend and shift a run of the leaf (ExtentRuns).
        UB_RETURN_IF_ERROR(UpdateInPlace(*insert));
        inserted = true;
      } else {
        UB_RETURN_IF_ERROR(DeleteKey(KeyOf(x)));
      }
      if (keep_left) {
        Extent l = x;
        l.len = start - x.start;
        UB_RETURN_IF_ERROR(InsertExtent(l));
      }
    }
    if (olds.size() < kBatch) break;
    pos = olds.back().end();
    // Without I/O nothing is evicted in the middle: the next batch's nodes
    // are the ones Probe found resident.
    if (io_) UB_RETURN_IF_ERROR(Evict(budget_));
  }
  if (insert && !inserted) {
    assert(insert->dev == dev && insert->start >= start && insert->end() <= end);
    UB_RETURN_IF_ERROR(InsertExtent(*insert));
  }
  return Status::OK();
}

}  // namespace ubcache
