// SPDX-License-Identifier: Apache-2.0
// ExtentTree: one shard of the extent index — a B+tree of extents keyed by
// (dev, end offset), with its own bounded cache of decoded nodes.
//
// Not thread-safe: ExtentIndex calls every method with the shard's mutex held
// (the counters are atomics so stats() can read them without it).
//
// Node cache. The resident nodes form a subtree that contains the root: a
// node is resident only while its parent is. Only a node with no resident
// children can be evicted; evicting a dirty node writes it first. Writes are
// copy-on-write with respect to the last checkpoint: a node that the last
// checkpoint's tree may reference gets a new address (the old one is freed
// only after the next checkpoint is durable), while a node whose address was
// allocated after the last checkpoint is rewritten in place — no durable root
// reaches it, so a torn write there cannot hurt recovery. The parent then
// points at the new address and becomes dirty. Evictions happen only between
// operations (Evict), never in the middle of one, so node pointers stay valid
// within an operation.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_set>
#include <vector>

#include "btree/extent.h"
#include "btree/node_format.h"
#include "btree/node_store.h"
#include "util/status.h"

namespace ubcache {

// Counters a shard keeps for stats(): written under the shard mutex, read
// lock-free.
struct TreeCounters {
  std::atomic<uint64_t> extents{0}, nodes{0}, cached_nodes{0}, cached_bytes{0};
  std::atomic<uint64_t> node_reads{0}, node_writes{0};
};

// What a checkpoint records per shard.
struct ShardRoot {
  uint64_t addr = kNoNode;  // kNoNode: empty tree, never written
  uint8_t level = 0;
  uint64_t extents = 0;
  uint64_t nodes = 0;
};

class ExtentTree {
 public:
  ExtentTree(NodeStore* store, uint32_t shard, uint64_t set_id, TreeCounters* counters);
  ~ExtentTree();
  ExtentTree(const ExtentTree&) = delete;
  ExtentTree& operator=(const ExtentTree&) = delete;

  // An empty tree (root.addr == kNoNode), or the checkpointed root: reads the
  // root node only; everything below loads on demand.
  Status Init(const ShardRoot& root);

  // Appends the extents of dev overlapping [start, end), clipped, in order.
  Status Lookup(uint32_t dev, uint64_t start, uint64_t end, std::vector<Extent>* out);
  // Removes [start, end) of dev (trimming and splitting extents at the
  // edges), then inserts *insert if given (which must lie within the range).
  // With `removed_dirty`, appends the dirty pieces it removed, clipped.
  Status Replace(uint32_t dev, uint64_t start, uint64_t end, const Extent* insert,
                 std::vector<Extent>* removed_dirty = nullptr);
  // Up to `max` extents with key >= from, in key order; *done when the tree
  // has no more.
  Status Collect(ExtentKey from, size_t max, std::vector<Extent>* out, bool* done);

  // Evicts cold nodes until the decoded nodes fit in budget bytes (the root
  // path may stay above it).
  Status Evict(uint64_t budget);
  // Writes every dirty resident node, bottom-up, and returns the new root.
  Status Flush(ShardRoot* root);
  // After a checkpoint captured Flush's root: every address now belongs to a
  // durable tree, and the superseded ones may be freed once it is durable.
  std::vector<uint64_t> CheckpointTaken();
  uint64_t dirty_nodes() const;
  // The budget Replace evicts to between batches of a long range operation.
  void set_budget(uint64_t bytes) { budget_ = bytes; }

 private:
  struct Node;
  struct Child {
    ExtentKey key;
    uint64_t addr = kNoNode;
    std::unique_ptr<Node> node;  // resident, or null
  };
  struct Node {
    uint64_t addr = kNoNode;
    uint8_t level = 0;
    bool dirty = false;
    Node* parent = nullptr;
    uint32_t resident_children = 0;
    Node* lru_prev = nullptr;  // toward hotter
    Node* lru_next = nullptr;  // toward colder
    bool in_lru = false;
    size_t charged = 0;
    std::vector<Extent> ext;   // level 0
    std::vector<Child> kids;   // level > 0
    size_t count() const { return level == 0 ? ext.size() : kids.size(); }
  };
  struct Cursor {
    std::vector<Node*> nodes;  // root .. leaf
    std::vector<size_t> idx;   // child index taken, and the leaf position
    bool end = false;
  };

  Result<std::unique_ptr<Node>> ReadNode(uint64_t addr, int level);
  Result<Node*> LoadChild(Node* parent, size_t i);
  static size_t ChildIndex(const Node* n, ExtentKey k);
  size_t IndexInParent(const Node* n) const;
  Status SeekGE(ExtentKey k, Cursor* c);
  Status NextLeaf(Cursor* c);
  Status Next(Cursor* c);
  static const Extent& Cur(const Cursor& c) { return c.nodes.back()->ext[c.idx.back()]; }
  Result<Node*> DescendToLeaf(ExtentKey k);
  Status InsertExtent(const Extent& e);
  Status DeleteKey(ExtentKey k);
  Status UpdateInPlace(const Extent& e);
  void Split(Node* n, bool appending);
  void Rebalance(Node* n);
  void RemoveChild(Node* parent, size_t i);
  Status WriteBack(Node* n);
  Status FlushSubtree(Node* n);
  void FreeAddr(uint64_t addr);
  void MarkDirty(Node* n);
  void Charge(Node* n);
  void LruTouch(Node* n);
  void LruRemove(Node* n);
  void DropResident(Node* n);

  NodeStore* const store_;
  const uint32_t shard_;
  const uint64_t set_id_;
  const uint32_t node_size_;
  const size_t leaf_cap_, internal_cap_;
  TreeCounters* const counters_;
  std::unique_ptr<Node> root_;
  Node* lru_head_ = nullptr;  // hottest
  Node* lru_tail_ = nullptr;  // coldest
  uint64_t dirty_ = 0;
  uint64_t budget_ = ~uint64_t{0};
  uint64_t write_seq_ = 0;
  // Addresses allocated since the last checkpoint: no durable root reaches
  // them, so they are rewritten in place and freed at once.
  std::unordered_set<uint64_t> fresh_;
  // Superseded addresses that a durable root may still reach.
  std::vector<uint64_t> deferred_free_;
  std::vector<uint8_t> buf_;
};

}  // namespace ubcache
