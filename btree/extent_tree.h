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
//
// Without I/O (set_io(false): a serving reactor's call, extent_index.h). A
// node that is not resident is never read: the operation fails with
// WouldBlock before it changed anything and missing() names the node (the
// first one met; the next pass finds the next). A change is preceded by
// Probe, which walks every node the change will touch, so the change itself
// meets no missing node: under it a merge with a sibling that is not
// resident does not happen, an emptied leaf stays (removing it would route
// the range's insert to a neighbour nobody probed), and Evict writes
// nothing — a dirty node stays resident, over budget, until an Evict with
// I/O (the index's background writer, or a checkpoint) writes it
// (dirty_over_budget()). The node is read by the caller, outside the shard
// lock, and put in place by InstallRead. A read raced by a write of the
// same address (the node was loaded, changed and written back meanwhile)
// is dropped: BeginRead/InstallRead keep a clock per address being read.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "btree/extent.h"
#include "btree/extent_runs.h"
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

  // ---- Without I/O (see the top) ----
  void set_io(bool allowed) { io_ = allowed; }
  // A node an operation without I/O needed: `route` is a key whose descent
  // from the root reaches it (the child's lowest key), `level` its level.
  struct MissingNode {
    uint64_t addr = kNoNode;
    uint8_t level = 0;
    ExtentKey route;
  };
  // The node the last operation failed on with WouldBlock (addr kNoNode
  // when it failed for another reason: a range too large to change without
  // I/O, whose caller goes to a thread that may wait).
  const MissingNode& missing() const { return missing_; }
  void clear_missing() { missing_ = MissingNode{}; }
  // Whether every node Replace(dev, start, end, insert? ...) touches is
  // resident, and the range holds at most 1024 extents (a change without
  // I/O evicts nothing until it is done, so it must stay small). OK, or
  // WouldBlock (missing() says which node, or none when the range is too
  // large).
  Status Probe(uint32_t dev, uint64_t start, uint64_t end, bool insert);
  // A read of m.addr starts: a token for InstallRead.
  uint64_t BeginRead(uint64_t addr);
  // The read started with `token` ended (data null: it failed). Puts the
  // node in place if its parent is resident, still points at m.addr and has
  // no copy of it, and no write reached m.addr since the read began; else
  // drops it (the operation's next pass asks again). Corruption when the
  // node was to be installed and does not decode.
  Status InstallRead(const MissingNode& m, uint64_t token, const uint8_t* data);
  // An Evict without I/O left dirty nodes over budget: an Evict with I/O
  // should run (and clears it).
  bool dirty_over_budget() const { return dirty_over_budget_; }

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
    ExtentRuns ext;            // level 0
    std::vector<Child> kids;   // level > 0
    size_t count() const { return level == 0 ? ext.size() : kids.size(); }
  };
  struct Cursor {
    std::vector<Node*> nodes;  // root .. leaf
    std::vector<size_t> idx;   // child index taken, and the leaf position
    bool end = false;
  };

  Result<std::unique_ptr<Node>> ReadNode(uint64_t addr, int level);
  std::unique_ptr<Node> MakeNode(uint64_t addr, DecodedNode& d);
  Result<Node*> LoadChild(Node* parent, size_t i);
  // Without I/O: child i if resident, else null (nothing recorded: for a
  // merge or a collapse that may simply not happen).
  Node* ResidentChild(Node* parent, size_t i);
  Node* Attach(Node* parent, size_t i, std::unique_ptr<Node> n);
  ExtentKey RouteKey(const Node* parent, size_t i) const;
  Node* FindParentOf(uint64_t addr, uint8_t level, ExtentKey route);
  void NoteWritten(uint64_t addr);
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
  std::vector<Extent> flat_;  // a leaf's extents in one vector, for EncodeLeafNode
  bool io_ = true;
  MissingNode missing_;
  bool dirty_over_budget_ = false;
  // Addresses being read without the lock (BeginRead): readers, and the
  // read clock at the last write of the address.
  struct Reading {
    uint32_t readers = 0;
    uint64_t written_at = 0;
  };
  std::unordered_map<uint64_t, Reading> reading_;
  uint64_t read_clock_ = 0;
};

}  // namespace ubcache
