// SPDX-License-Identifier: Apache-2.0
#include "btree/extent_index.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "util/endian.h"
#include "util/hash.h"
#include "util/log.h"

namespace ubcache {
namespace {

constexpr uint32_t kRootMagic = 0x52494255;  // "UBIR"
constexpr uint16_t kRootVersion = 1;
constexpr unsigned kMaxShards = 4096;
constexpr uint64_t kMaxStripe = uint64_t{1} << 30;  // an extent piece's len fits u32
constexpr uint64_t kMaxOffset = uint64_t{1} << 62;  // keeps end + 1 from overflowing
// InsertIfUnchanged tracks changes per 64 KiB chunk in a fixed hashed table.
constexpr unsigned kChunkShift = 16;
constexpr size_t kChunkSlots = 16384;
constexpr size_t kForEachBatch = 1024;

uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

size_t ChunkSlot(uint32_t dev, uint64_t chunk) {
  return Mix(chunk * 0x100000001b3ULL ^ dev) & (kChunkSlots - 1);
}

Status CheckRange(uint32_t dev, uint64_t start, uint64_t len) {
  if (len == 0 || start % kIndexBlock || len % kIndexBlock) {
    return Status::InvalidArgument("extent index: range not in whole 4 KiB blocks");
  }
  if (start >= kMaxOffset || len > kMaxOffset - start) {
    return Status::InvalidArgument("extent index: range beyond 2^62");
  }
  return Status::OK();
}

}  // namespace

// ---------------------------------------------------------------------------
// IndexRoot encoding:
//   0 u64 csum (XXH3-64 of [8, end))  8 u32 magic "UBIR"  12 u16 version
//  14 u16 nshards  16 u32 node_size  20 u32 reserved  24 u64 stripe_bytes
//  32 u64 journal_seq  40 u64 generation
//  48 + 32*i: u64 root addr, u8 level, 7 bytes 0, u64 extents, u64 nodes

std::vector<uint8_t> IndexRoot::Encode() const {
  std::vector<uint8_t> out(EncodedSize(shards.size()), 0);
  uint8_t* p = out.data();
  StoreLE32(p + 8, kRootMagic);
  StoreLE16(p + 12, kRootVersion);
  StoreLE16(p + 14, static_cast<uint16_t>(shards.size()));
  StoreLE32(p + 16, node_size);
  StoreLE64(p + 24, stripe_bytes);
  StoreLE64(p + 32, journal_seq);
  StoreLE64(p + 40, generation);
  for (size_t i = 0; i < shards.size(); i++) {
    uint8_t* s = p + 48 + 32 * i;
    StoreLE64(s, shards[i].addr);
    s[8] = shards[i].level;
    StoreLE64(s + 16, shards[i].extents);
    StoreLE64(s + 24, shards[i].nodes);
  }
  StoreLE64(p, Hash64(p + 8, out.size() - 8));
  return out;
}

Result<IndexRoot> IndexRoot::Decode(const uint8_t* p, size_t len) {
  const char* err = nullptr;
  size_t n = len >= 48 ? LoadLE16(p + 14) : 0;
  if (len < 48) {
    err = "short";
  } else if (LoadLE32(p + 8) != kRootMagic) {
    err = "bad magic";
  } else if (LoadLE16(p + 12) != kRootVersion) {
    err = "bad version";
  } else if (n == 0 || n > kMaxShards || EncodedSize(n) > len) {
    err = "bad shard count";
  } else if (LoadLE64(p) != Hash64(p + 8, EncodedSize(n) - 8)) {
    err = "bad csum";
  }
  if (err) return Status::Corruption(std::string("index root: ") + err);
  IndexRoot r;
  r.node_size = LoadLE32(p + 16);
  r.stripe_bytes = LoadLE64(p + 24);
  r.journal_seq = LoadLE64(p + 32);
  r.generation = LoadLE64(p + 40);
  if (r.node_size < kMinNodeSize || r.stripe_bytes < kIndexBlock || r.stripe_bytes > kMaxStripe ||
      (r.stripe_bytes & (r.stripe_bytes - 1))) {
    return Status::Corruption("index root: bad geometry");
  }
  r.shards.resize(n);
  for (size_t i = 0; i < n; i++) {
    const uint8_t* s = p + 48 + 32 * i;
    r.shards[i].addr = LoadLE64(s);
    r.shards[i].level = s[8];
    r.shards[i].extents = LoadLE64(s + 16);
    r.shards[i].nodes = LoadLE64(s + 24);
    if (r.shards[i].level > kMaxLevel) return Status::Corruption("index root: bad level");
  }
  return r;
}

// ---------------------------------------------------------------------------
// Locks a set of shards in ascending index order, the one global order, so two
// operations over overlapping sets cannot deadlock. The analysis cannot follow
// a runtime-sized set: code under it says sh->mu.AssertHeld() per shard.
class ExtentIndex::ShardLocks {
 public:
  ShardLocks(ExtentIndex* idx, std::vector<uint32_t> ids) NO_THREAD_SAFETY_ANALYSIS
      : idx_(idx), ids_(std::move(ids)) {
    for (uint32_t id : ids_) idx_->shards_[id]->mu.Lock();
  }
  ~ShardLocks() NO_THREAD_SAFETY_ANALYSIS {
    for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) idx_->shards_[*it]->mu.Unlock();
  }
  const std::vector<uint32_t>& ids() const { return ids_; }

 private:
  ExtentIndex* idx_;
  std::vector<uint32_t> ids_;
};

ExtentIndex::ExtentIndex(NodeStore* store, uint32_t nshards, uint64_t stripe, const Options& o)
    : store_(store),
      stripe_(stripe),
      set_id_(o.set_id),
      bucket_bytes_(o.bucket_bytes),
      journaled_(o.journaled),
      on_dirty_(o.on_dirty),
      check_data_(o.check_data),
      on_replayed_insert_(o.on_replayed_insert),
      cache_bytes_(o.cache_bytes),
      chunk_seq_(new std::atomic<uint64_t>[kChunkSlots]()) {  // zeros (C++20 atomics value-initialise)
  for (uint32_t i = 0; i < nshards; i++) {
    auto sh = std::make_unique<Shard>();
    MutexLock l(&sh->mu);
    sh->tree = std::make_unique<ExtentTree>(store, i, o.set_id, &sh->counters);
    shards_.push_back(std::move(sh));
  }
}

ExtentIndex::~ExtentIndex() = default;

Result<std::unique_ptr<ExtentIndex>> ExtentIndex::Create(NodeStore* store, Options o) {
  if (store->node_size() < kMinNodeSize) {
    return Status::InvalidArgument("extent index: node size below 512 bytes");
  }
  if (o.shards == 0 || o.shards > kMaxShards) {
    return Status::InvalidArgument("extent index: shards must be 1..4096");
  }
  if (o.stripe_bytes < kIndexBlock || o.stripe_bytes > kMaxStripe ||
      (o.stripe_bytes & (o.stripe_bytes - 1))) {
    return Status::InvalidArgument("extent index: stripe must be a power of two, 4 KiB..1 GiB");
  }
  std::unique_ptr<ExtentIndex> idx(new ExtentIndex(store, o.shards, o.stripe_bytes, o));
  for (auto& sh : idx->shards_) {
    MutexLock l(&sh->mu);
    UB_RETURN_IF_ERROR(sh->tree->Init(ShardRoot{}));
  }
  return idx;
}

Result<std::unique_ptr<ExtentIndex>> ExtentIndex::Open(NodeStore* store, const IndexRoot& root,
                                                       Options o, const std::vector<uint8_t>* dirty) {
  if (root.node_size != store->node_size()) {
    return Status::InvalidArgument("extent index: root was written with node size " +
                                   std::to_string(root.node_size) + ", store has " +
                                   std::to_string(store->node_size()));
  }
  if (root.shards.empty() || root.shards.size() > kMaxShards || root.stripe_bytes < kIndexBlock ||
      root.stripe_bytes > kMaxStripe || (root.stripe_bytes & (root.stripe_bytes - 1))) {
    return Status::InvalidArgument("extent index: bad root geometry");
  }
  std::unique_ptr<ExtentIndex> idx(
      new ExtentIndex(store, static_cast<uint32_t>(root.shards.size()), root.stripe_bytes, o));
  // The roots only; every other node loads when an operation reaches it.
  for (size_t i = 0; i < root.shards.size(); i++) {
    Shard* sh = idx->shards_[i].get();
    MutexLock l(&sh->mu);
    UB_RETURN_IF_ERROR(sh->tree->Init(root.shards[i]));
  }
  if (dirty) UB_RETURN_IF_ERROR(idx->DecodeDirty(*dirty));

  // Replay the entries after the checkpoint. Entries at or below its
  // journal_seq are left from a crash between the superblock write and the
  // trim: their ops are already in the tree. The first entry that fails to
  // decode, or breaks the sequence, is the torn tail of a crash: stop there.
  std::vector<uint8_t> all;
  size_t unconfirmed = 0;
  UB_RETURN_IF_ERROR(store->ReadJournal(&all, &unconfirmed));
  size_t pos = 0;
  uint64_t last = root.journal_seq;
  std::vector<JournalOp> ops;
  while (pos < all.size()) {
    size_t len = 0;
    uint64_t seq = 0;
    Status st =
        DecodeJournalEntry(all.data() + pos, all.size() - pos, &len, &seq, &ops, idx->set_id_);
    if (!st.ok()) {
      UB_WARN("extent index: journal replay ends at byte {} of {}: {}", pos, all.size(),
              st.message());
      break;
    }
    if (seq <= root.journal_seq && last == root.journal_seq) {
      pos += len;  // already in the checkpoint
      continue;
    }
    if (seq != last + 1) {
      UB_WARN("extent index: journal replay ends at byte {}: seq {} after {}", pos, seq, last);
      break;
    }
    // Soft-committed and not known to be flushed: a power cut may have kept
    // this entry and lost data it points at (see Commit).
    if (pos >= unconfirmed && !idx->ConfirmOps(&ops)) {
      UB_WARN("extent index: journal replay ends at byte {} (entry {}): its data did not all "
              "reach the cache device before the crash",
              pos, seq);
      break;
    }
    for (const JournalOp& op : ops) {
      UB_RETURN_IF_ERROR(idx->ApplyJournalOp(op));
      if (op.type == JournalOp::Type::kInsert && idx->on_replayed_insert_) idx->on_replayed_insert_(op.extent);
    }
    for (auto& sh : idx->shards_) {
      MutexLock l(&sh->mu);
      idx->EvictLocked(sh.get());
    }
    last = seq;
    pos += len;
  }
  if (pos < all.size()) UB_RETURN_IF_ERROR(store->DiscardJournalTail(pos));
  {
    MutexLock l(&idx->commit_mu_);
    idx->journal_seq_ = last;
    idx->generation_ = root.generation;
  }
  idx->journal_bytes_ = pos;
  for (auto& sh : idx->shards_) {
    MutexLock l(&sh->mu);
    UB_RETURN_IF_ERROR(sh->error);
  }
  return idx;
}

bool ExtentIndex::ConfirmOps(std::vector<JournalOp>* ops) const {
  for (JournalOp& op : *ops) {
    if (op.type != JournalOp::Type::kInsert) continue;
    if (op.checked) {
      if (check_data_ && !check_data_(op.extent, op.data_hash)) return false;
    } else if (op.extent.dirty) {
      return false;  // nothing to tell whether its data is there
    } else {
      // A clean piece: the backing device holds its data, whatever the
      // cache device does; forget the range rather than trust the copy.
      op.type = JournalOp::Type::kInvalidate;
      op.shard = ShardOf(op.extent.dev, op.extent.start);
    }
  }
  return true;
}

Status ExtentIndex::ApplyJournalOp(const JournalOp& op) {
  const Extent& e = op.extent;
  UB_RETURN_IF_ERROR(CheckRange(e.dev, e.start, e.len));
  if (op.type == JournalOp::Type::kInsert) {
    if (e.start / stripe_ != (e.end() - 1) / stripe_) {
      return Status::Corruption("journal: insert op crosses a stripe");
    }
    Shard* sh = shards_[ShardOf(e.dev, e.start)].get();
    MutexLock l(&sh->mu);
    std::vector<Extent> removed;
    UB_RETURN_IF_ERROR(sh->tree->Replace(e.dev, e.start, e.end(), &e, &removed));
    AccountLocked(sh, removed, &e);
    return Status::OK();
  }
  if (op.shard >= shards_.size()) return Status::Corruption("journal: bad shard");
  Shard* sh = shards_[op.shard].get();
  MutexLock l(&sh->mu);
  std::vector<Extent> removed;
  UB_RETURN_IF_ERROR(sh->tree->Replace(e.dev, e.start, e.end(), nullptr, &removed));
  AccountLocked(sh, removed, nullptr);
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Dirty accounting

namespace {
// map[key] += len (sign > 0) or -= len, floored at 0; a zero entry is erased.
template <typename Map, typename Key>
void AddBytes(Map& map, const Key& key, uint64_t len, int64_t sign) {
  uint64_t& v = map[key];
  v = sign > 0 ? v + len : (v > len ? v - len : 0);
  if (v == 0) map.erase(key);
}
}  // namespace

void ExtentIndex::AccountLocked(Shard* sh, const std::vector<Extent>& removed, const Extent* added) {
  // No lambdas here: clang's thread-safety analysis checks a lambda's body
  // as a function of its own, without sh->mu held.
  const size_t n = removed.size() + (added && added->dirty ? 1 : 0);
  for (size_t i = 0; i < n; i++) {
    const Extent& e = i < removed.size() ? removed[i] : *added;
    int64_t sign = i < removed.size() ? -1 : 1;
    AddBytes(sh->dirty_stripes, std::make_pair(e.dev, e.start / stripe_), e.len, sign);
    AddBytes(sh->dirty_devs, e.dev, e.len, sign);
    if (bucket_bytes_) {
      uint64_t b = e.cache_offset / bucket_bytes_;
      AddBytes(sh->dirty_buckets, b, e.len, sign);
      if (on_dirty_) on_dirty_(b, sign * static_cast<int64_t>(e.len));
    }
  }
}

// Shard's dirty state: u32 nstripes, u32 nbuckets, nstripes x {u32 dev,
// u64 stripe, u64 bytes}, nbuckets x {u64 bucket, u64 bytes}; the blob is
// u32 magic "UBDS", u32 nshards, then each shard (inside the checksummed
// bucket table, doc/format.md §6).
constexpr uint32_t kDirtyMagic = 0x53444255;

void ExtentIndex::EncodeDirtyLocked(Shard* sh, std::vector<uint8_t>* out) {
  size_t at = out->size();
  out->resize(at + 8 + 20 * sh->dirty_stripes.size() + 16 * sh->dirty_buckets.size());
  uint8_t* p = out->data() + at;
  StoreLE32(p, static_cast<uint32_t>(sh->dirty_stripes.size()));
  StoreLE32(p + 4, static_cast<uint32_t>(sh->dirty_buckets.size()));
  p += 8;
  for (const auto& [k, v] : sh->dirty_stripes) {
    StoreLE32(p, k.first);
    StoreLE64(p + 4, k.second);
    StoreLE64(p + 12, v);
    p += 20;
  }
  for (const auto& [b, v] : sh->dirty_buckets) {
    StoreLE64(p, b);
    StoreLE64(p + 8, v);
    p += 16;
  }
}

Status ExtentIndex::DecodeDirty(const std::vector<uint8_t>& blob) {
  auto bad = [] { return Status::Corruption("index dirty state: bad length"); };
  if (blob.empty()) return Status::OK();
  if (blob.size() < 8 || LoadLE32(blob.data()) != kDirtyMagic) return Status::Corruption("index dirty state: bad magic");
  if (LoadLE32(blob.data() + 4) != shards_.size()) return Status::Corruption("index dirty state: bad shard count");
  size_t pos = 8;
  for (auto& shp : shards_) {
    Shard* sh = shp.get();
    MutexLock l(&sh->mu);
    if (blob.size() - pos < 8) return bad();
    uint64_t ns = LoadLE32(blob.data() + pos), nb = LoadLE32(blob.data() + pos + 4);
    pos += 8;
    if ((blob.size() - pos) / 20 < ns || (blob.size() - pos - 20 * ns) / 16 < nb) return bad();
    for (uint64_t i = 0; i < ns; i++, pos += 20) {
      const uint8_t* p = blob.data() + pos;
      uint64_t v = LoadLE64(p + 12);
      sh->dirty_stripes[{LoadLE32(p), LoadLE64(p + 4)}] += v;
      sh->dirty_devs[LoadLE32(p)] += v;
    }
    for (uint64_t i = 0; i < nb; i++, pos += 16) {
      const uint8_t* p = blob.data() + pos;
      uint64_t b = LoadLE64(p), v = LoadLE64(p + 8);
      sh->dirty_buckets[b] += v;
      if (on_dirty_) on_dirty_(b, static_cast<int64_t>(v));
    }
  }
  if (pos != blob.size()) return bad();
  return Status::OK();
}

uint64_t ExtentIndex::DirtyBytes(uint32_t dev) {
  uint64_t sum = 0;
  for (auto& shp : shards_) {
    MutexLock l(&shp->mu);
    auto it = shp->dirty_devs.find(dev);
    if (it != shp->dirty_devs.end()) sum += it->second;
  }
  return sum;
}

std::vector<uint64_t> ExtentIndex::DirtyStripes(uint32_t dev, uint64_t from, size_t max) {
  std::vector<uint64_t> out;
  for (auto& shp : shards_) {
    MutexLock l(&shp->mu);
    size_t n = 0;
    for (auto it = shp->dirty_stripes.lower_bound({dev, from});
         it != shp->dirty_stripes.end() && it->first.first == dev && n < max; ++it, ++n)
      out.push_back(it->first.second);
  }
  std::sort(out.begin(), out.end());
  if (out.size() > max) out.resize(max);
  return out;
}

Status ExtentIndex::MarkClean(const Extent& e, uint64_t* cleaned) {
  return ChangeIfSame(e, Change::kClean, nullptr, cleaned);
}

Status ExtentIndex::MoveIfSame(const Extent& e, uint64_t new_offset, uint8_t new_gen, uint64_t* moved,
                               const uint8_t* data) {
  Extent to = e;
  to.cache_offset = new_offset;
  to.gen = new_gen;
  return ChangeIfSame(e, Change::kMove, &to, moved, data);
}

Status ExtentIndex::InvalidateClean(uint32_t dev, uint64_t start, uint64_t len, bool* has_dirty,
                                    uint64_t* removed_clean) {
  *has_dirty = false;
  if (removed_clean) *removed_clean = 0;
  UB_RETURN_IF_ERROR(CheckRange(dev, start, len));
  uint64_t end = start + len;
  ShardLocks locks(this, ShardsFor(dev, start, end));
  MarkChanged(dev, start, end, seq_.fetch_add(1) + 1);
  Status result;
  std::vector<Extent> cur, removed;
  for (uint32_t id : locks.ids()) {
    Shard* sh = shards_[id].get();
    sh->mu.AssertHeld();
    cur.clear();
    Status st = sh->tree->Lookup(dev, start, end, &cur);
    for (const Extent& x : cur) {
      if (!st.ok()) break;
      if (x.dirty) {
        *has_dirty = true;
        continue;
      }
      removed.clear();
      st = sh->tree->Replace(dev, x.start, x.end(), nullptr, &removed);
      JournalInvalidateLocked(sh, id, dev, x.start, x.end());
      if (removed_clean) *removed_clean += x.len;
    }
    if (!st.ok() && result.ok()) result = st;
    EvictLocked(sh);
  }
  return result;
}

Status ExtentIndex::RemoveIfSame(const Extent& e) {
  uint64_t n = 0;
  return ChangeIfSame(e, Change::kRemove, nullptr, &n);
}

Status ExtentIndex::ChangeIfSame(const Extent& e, Change how, const Extent* to, uint64_t* changed,
                                 const uint8_t* data) {
  *changed = 0;
  UB_RETURN_IF_ERROR(CheckRange(e.dev, e.start, e.len));
  if (e.start / stripe_ != (e.end() - 1) / stripe_)
    return Status::InvalidArgument("extent index: a conditional change across a stripe");
  uint32_t id = ShardOf(e.dev, e.start);
  Shard* sh = shards_[id].get();
  MutexLock l(&sh->mu);
  std::vector<Extent> cur;
  Status st = sh->tree->Lookup(e.dev, e.start, e.end(), &cur);
  for (const Extent& x : cur) {
    if (!st.ok()) break;
    if ((how == Change::kClean && !x.dirty) || x.gen != e.gen ||
        x.cache_offset - x.start != e.cache_offset - e.start)
      continue;
    Extent c = x;
    if (how == Change::kClean) c.dirty = false;
    if (how == Change::kMove) {
      c.cache_offset = to->cache_offset + (x.start - e.start);
      c.gen = to->gen;
    }
    bool keep = how != Change::kRemove;
    std::vector<Extent> removed;
    st = sh->tree->Replace(x.dev, x.start, x.end(), keep ? &c : nullptr, &removed);
    // Only a removal changes what the range reads; clean and move keep the
    // bytes (so racing fills stay valid).
    if (!keep) MarkChanged(x.dev, x.start, x.end(), seq_.fetch_add(1) + 1);
    // Journaled as the new piece: replay replaces exactly this range.
    if (st.ok() && keep) {
      // A moved piece points at data just copied: checked when we have it.
      bool checked = how == Change::kMove && data && journaled_;
      uint64_t hash = checked ? Hash64(data + (x.start - e.start), x.len) : 0;
      JournalInsertLocked(sh, c, checked ? &hash : nullptr);
    } else {
      JournalInvalidateLocked(sh, id, x.dev, x.start, x.end());
    }
    AccountLocked(sh, removed, st.ok() && keep ? &c : nullptr);
    if (st.ok()) *changed += x.len;
  }
  EvictLocked(sh);
  return st;
}

// ---------------------------------------------------------------------------
// Sharding

uint32_t ExtentIndex::ShardOf(uint32_t dev, uint64_t offset) const {
  uint64_t stripe = offset / stripe_;
  return static_cast<uint32_t>(Mix(stripe ^ (uint64_t{dev} << 44) ^ dev) % shards_.size());
}

std::vector<uint32_t> ExtentIndex::ShardsFor(uint32_t dev, uint64_t start, uint64_t end) const {
  std::vector<uint32_t> ids;
  uint64_t first = start / stripe_, last = (end - 1) / stripe_;
  if (last - first + 1 >= shards_.size()) {
    for (uint32_t i = 0; i < shards_.size(); i++) ids.push_back(i);
    return ids;
  }
  for (uint64_t s = first; s <= last; s++) ids.push_back(ShardOf(dev, s * stripe_));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

uint64_t ExtentIndex::ShardBudget() const {
  return cache_bytes_.load(std::memory_order_relaxed) / shards_.size();
}

void ExtentIndex::EvictLocked(Shard* sh) {
  sh->tree->set_budget(ShardBudget());
  Status st = sh->tree->Evict(ShardBudget());
  if (!st.ok()) {
    // The node stays resident and dirty; nothing is lost. Commit reports it.
    UB_WARN("extent index: node write-back failed: {}", st.ToString());
    if (sh->error.ok()) sh->error = st;
  }
}

// ---------------------------------------------------------------------------
// Change tracking for InsertIfUnchanged. A mutation takes its sequence number
// and marks its chunks while holding the shards of its range; the check runs
// under the same shard locks, so it sees every mutation that finished before.

bool ExtentIndex::ChangedSince(uint32_t dev, uint64_t start, uint64_t end, uint64_t since) const {
  uint64_t first = start >> kChunkShift, last = (end - 1) >> kChunkShift;
  if (last - first >= kChunkSlots) {
    for (size_t i = 0; i < kChunkSlots; i++) {
      if (chunk_seq_[i].load() > since) return true;
    }
    return false;
  }
  for (uint64_t c = first; c <= last; c++) {
    if (chunk_seq_[ChunkSlot(dev, c)].load() > since) return true;
  }
  return false;
}

void ExtentIndex::MarkChanged(uint32_t dev, uint64_t start, uint64_t end, uint64_t seq) {
  auto mark = [&](size_t slot) {
    // Max, not store: a colliding slot may be marked from another shard.
    uint64_t cur = chunk_seq_[slot].load();
    while (cur < seq && !chunk_seq_[slot].compare_exchange_weak(cur, seq)) {
    }
  };
  uint64_t first = start >> kChunkShift, last = (end - 1) >> kChunkShift;
  if (last - first >= kChunkSlots) {
    for (size_t i = 0; i < kChunkSlots; i++) mark(i);
    return;
  }
  for (uint64_t c = first; c <= last; c++) mark(ChunkSlot(dev, c));
}

uint64_t ExtentIndex::Sequence(uint32_t, uint64_t, uint64_t) { return seq_.load(); }

// ---------------------------------------------------------------------------
// Operations

Status ExtentIndex::Lookup(uint32_t dev, uint64_t start, uint64_t len, std::vector<Extent>* out) {
  out->clear();
  UB_RETURN_IF_ERROR(CheckRange(dev, start, len));
  ShardLocks locks(this, ShardsFor(dev, start, start + len));
  Status st;
  for (uint32_t id : locks.ids()) {
    Shard* sh = shards_[id].get();
    sh->mu.AssertHeld();
    if (st.ok()) st = sh->tree->Lookup(dev, start, start + len, out);
    EvictLocked(sh);
  }
  if (locks.ids().size() > 1) {
    std::sort(out->begin(), out->end(),
              [](const Extent& a, const Extent& b) { return a.start < b.start; });
  }
  return st;
}

Status ExtentIndex::Insert(const Extent& e, const uint8_t* data) {
  UB_RETURN_IF_ERROR(CheckRange(e.dev, e.start, e.len));
  return Mutate(e.dev, e.start, e.end(), &e, data, nullptr, nullptr, nullptr);
}

Status ExtentIndex::Invalidate(uint32_t dev, uint64_t start, uint64_t len, uint64_t* removed_dirty) {
  UB_RETURN_IF_ERROR(CheckRange(dev, start, len));
  return Mutate(dev, start, start + len, nullptr, nullptr, nullptr, nullptr, removed_dirty);
}

Status ExtentIndex::InsertIfUnchanged(const Extent& e, uint64_t since, bool* inserted) {
  UB_RETURN_IF_ERROR(CheckRange(e.dev, e.start, e.len));
  return Mutate(e.dev, e.start, e.end(), &e, nullptr, &since, inserted, nullptr);
}

Status ExtentIndex::Mutate(uint32_t dev, uint64_t start, uint64_t end, const Extent* insert,
                           const uint8_t* data, const uint64_t* since, bool* inserted,
                           uint64_t* removed_dirty) {
  // The pieces' data hashes, before any lock is taken.
  std::vector<uint64_t> hashes;
  if (insert && data && journaled_) {
    for (uint64_t s = start; s < end;) {
      uint64_t e = std::min(end, (s / stripe_ + 1) * stripe_);
      hashes.push_back(Hash64(data + (s - start), e - s));
      s = e;
    }
  }
  ShardLocks locks(this, ShardsFor(dev, start, end));
  std::vector<Extent> removed;
  uint64_t removed_bytes = 0;
  if (since) {
    *inserted = !ChangedSince(dev, start, end, *since);
    if (!*inserted) return Status::OK();
  } else {
    // Only content changes mark the range. A fill (InsertIfUnchanged) caches
    // what the backing device already holds, so concurrent fills of
    // neighbouring blocks must not make each other collide.
    MarkChanged(dev, start, end, seq_.fetch_add(1) + 1);
  }
  Status result;
  if (insert) {
    // One piece per stripe, each into its stripe's shard.
    size_t n = 0;
    for (uint64_t s = start; s < end; n++) {
      uint64_t e = std::min(end, (s / stripe_ + 1) * stripe_);
      uint32_t id = ShardOf(dev, s);
      Shard* sh = shards_[id].get();
      sh->mu.AssertHeld();
      Extent piece = *insert;
      piece.start = s;
      piece.len = e - s;
      piece.cache_offset = insert->cache_offset + (s - insert->start);
      removed.clear();
      Status st = sh->tree->Replace(dev, s, e, &piece, &removed);
      for (const Extent& r : removed) removed_bytes += r.len;
      AccountLocked(sh, removed, st.ok() ? &piece : nullptr);
      // A piece that failed half way is journaled as an invalidate: the
      // range may have lost its old extents, and the caller was told it is
      // not cached.
      if (st.ok()) {
        JournalInsertLocked(sh, piece, hashes.empty() ? nullptr : &hashes[n]);
      } else {
        JournalInvalidateLocked(sh, id, dev, s, e);
        if (result.ok()) result = st;
      }
      s = e;
    }
  } else {
    for (uint32_t id : locks.ids()) {
      Shard* sh = shards_[id].get();
      sh->mu.AssertHeld();
      removed.clear();
      Status st = sh->tree->Replace(dev, start, end, nullptr, &removed);
      for (const Extent& r : removed) removed_bytes += r.len;
      AccountLocked(sh, removed, nullptr);
      JournalInvalidateLocked(sh, id, dev, start, end);
      if (!st.ok() && result.ok()) result = st;
    }
  }
  for (uint32_t id : locks.ids()) {
    Shard* sh = shards_[id].get();
    sh->mu.AssertHeld();
    EvictLocked(sh);
  }
  if (inserted && !result.ok()) *inserted = false;
  if (removed_dirty) *removed_dirty = removed_bytes;
  return result;
}

Status ExtentIndex::ForEach(const std::function<void(const Extent&)>& fn) {
  std::vector<Extent> batch;
  for (auto& shp : shards_) {
    Shard* sh = shp.get();
    ExtentKey from{0, 0};
    for (;;) {
      batch.clear();
      bool done = false;
      {
        MutexLock l(&sh->mu);
        Status st = sh->tree->Collect(from, kForEachBatch, &batch, &done);
        EvictLocked(sh);
        UB_RETURN_IF_ERROR(st);
      }
      for (const Extent& e : batch) fn(e);
      if (done || batch.empty()) break;
      from = {batch.back().dev, batch.back().end() + 1};
    }
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Journal and checkpoint

void ExtentIndex::JournalInsertLocked(Shard* sh, const Extent& piece, const uint64_t* hash) {
  if (!journaled_) return;
  AppendInsertOp(&sh->journal, piece, hash);
  sh->journal_ops++;
}

void ExtentIndex::JournalInvalidateLocked(Shard* sh, uint32_t id, uint32_t dev, uint64_t start,
                                          uint64_t end) {
  if (!journaled_) return;
  AppendInvalidateOp(&sh->journal, id, dev, start, end);
  sh->journal_ops++;
}

void ExtentIndex::ReturnPendingOps(std::vector<std::vector<uint8_t>>* taken,
                                   std::vector<uint32_t>* ops) {
  // Put ops that did not reach the journal back in front of newer ones, so
  // the shard's order is kept and the next Commit writes them.
  for (size_t i = 0; i < shards_.size(); i++) {
    if ((*ops)[i] == 0) continue;
    Shard* sh = shards_[i].get();
    MutexLock l(&sh->mu);
    (*taken)[i].insert((*taken)[i].end(), sh->journal.begin(), sh->journal.end());
    sh->journal.swap((*taken)[i]);
    sh->journal_ops += (*ops)[i];
  }
}

Status ExtentIndex::Commit(bool soft) {
  MutexLock c(&commit_mu_);
  size_t n = shards_.size();
  std::vector<std::vector<uint8_t>> taken(n);
  std::vector<uint32_t> ops(n, 0);
  uint64_t nops = 0;
  Status sticky;
  for (size_t i = 0; i < n; i++) {
    Shard* sh = shards_[i].get();
    MutexLock l(&sh->mu);
    if (!sh->error.ok() && sticky.ok()) sticky = sh->error;
    sh->error = Status::OK();
    taken[i].swap(sh->journal);
    ops[i] = sh->journal_ops;
    sh->journal_ops = 0;
    nops += ops[i];
  }
  if (nops == 0) {
    // Soft entries before this one become durable only with a flush.
    if (!soft) {
      Status st = store_->SyncJournal();
      if (!st.ok()) return st;
    }
    return sticky;
  }
  std::vector<uint8_t> payload;
  for (auto& t : taken) payload.insert(payload.end(), t.begin(), t.end());
  if (payload.size() > UINT32_MAX || nops > UINT32_MAX) {
    ReturnPendingOps(&taken, &ops);
    return Status::Overflow("extent index: more than 4 GiB of uncommitted ops");
  }
  std::vector<uint8_t> entry =
      EncodeJournalEntry(journal_seq_ + 1, static_cast<uint32_t>(nops), payload, set_id_);
  Status st = soft ? store_->AppendJournalSoft(entry.data(), entry.size())
                   : store_->AppendJournal(entry.data(), entry.size());
  if (!st.ok()) {
    ReturnPendingOps(&taken, &ops);
    return st;
  }
  journal_seq_++;
  journal_bytes_ += entry.size();
  return sticky;
}

Result<IndexRoot> ExtentIndex::Checkpoint(const PersistRootFn& persist) {
  if (!persist) return Checkpoint(PersistStateFn());
  return Checkpoint(PersistStateFn(
      [&persist](const IndexRoot& root, const CheckpointState&) { return persist(root); }));
}

Result<IndexRoot> ExtentIndex::Checkpoint(const PersistStateFn& persist) {
  // Holding commit_mu_ keeps Commit out: everything in the journal now is
  // older than every shard's snapshot, so trimming it loses nothing, and
  // ops after a shard's snapshot stay pending for the next Commit.
  MutexLock c(&commit_mu_);
  size_t n = shards_.size();
  IndexRoot root;
  root.node_size = store_->node_size();
  root.stripe_bytes = stripe_;
  root.shards.resize(n);
  std::vector<std::vector<uint8_t>> taken(n);
  std::vector<uint32_t> ops(n, 0);
  std::vector<uint64_t> release;
  CheckpointState state;
  state.dirty.resize(8);
  StoreLE32(state.dirty.data(), kDirtyMagic);
  StoreLE32(state.dirty.data() + 4, static_cast<uint32_t>(n));
  Status st;
  for (size_t i = 0; i < n && st.ok(); i++) {
    Shard* sh = shards_[i].get();
    MutexLock l(&sh->mu);
    st = sh->tree->Flush(&root.shards[i]);
    if (!st.ok()) break;
    EncodeDirtyLocked(sh, &state.dirty);
    // This shard's pending ops are in the snapshot; its superseded nodes
    // become free once the snapshot's root is durable.
    taken[i].swap(sh->journal);
    ops[i] = sh->journal_ops;
    sh->journal_ops = 0;
    std::vector<uint64_t> freed = sh->tree->CheckpointTaken();
    release.insert(release.end(), freed.begin(), freed.end());
    EvictLocked(sh);
  }
  root.journal_seq = journal_seq_;
  root.generation = generation_ + 1;
  state.superseded = release;
  state.superseded.insert(state.superseded.end(), release_.begin(), release_.end());
  if (st.ok() && persist) st = persist(root, state);
  if (!st.ok()) {
    ReturnPendingOps(&taken, &ops);
    release_.insert(release_.end(), release.begin(), release.end());
    return st;
  }
  generation_++;
  // After the root is durable. If the trim fails the old entries stay, and
  // replay skips them by sequence number.
  st = store_->TrimJournal();
  if (st.ok()) journal_bytes_ = 0;
  if (persist) {
    release_.insert(release_.end(), release.begin(), release.end());
    for (uint64_t a : release_) store_->FreeNode(a);
    release_.clear();
  } else {
    for (uint64_t a : release_) store_->FreeNode(a);
    release_ = std::move(release);
  }
  if (!st.ok()) return st;
  return root;
}

ExtentIndex::Stats ExtentIndex::stats() const {
  Stats s{};
  for (const auto& sh : shards_) {
    const TreeCounters& c = sh->counters;
    s.extents += c.extents.load(std::memory_order_relaxed);
    s.nodes += c.nodes.load(std::memory_order_relaxed);
    s.cached_nodes += c.cached_nodes.load(std::memory_order_relaxed);
    s.cached_bytes += c.cached_bytes.load(std::memory_order_relaxed);
    s.node_reads += c.node_reads.load(std::memory_order_relaxed);
    s.node_writes += c.node_writes.load(std::memory_order_relaxed);
  }
  s.journal_bytes = journal_bytes_.load(std::memory_order_relaxed);
  return s;
}

void ExtentIndex::SetCacheBytes(uint64_t bytes) { cache_bytes_.store(bytes); }

}  // namespace ubcache
