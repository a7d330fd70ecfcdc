// SPDX-License-Identifier: Apache-2.0
#include "btree/extent_index.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "util/endian.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/thread.h"

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

// ---------------------------------------------------------------------------
// Without I/O (see the header). The node the last call on this thread failed
// on, for LoadMissing.
namespace {
struct PendingLoad {
  const ExtentIndex* index = nullptr;
  uint32_t shard = 0;
  ExtentTree::MissingNode node;
};
thread_local PendingLoad pending_load;
}  // namespace

ExtentTree* ExtentIndex::Tree(Shard* sh) {
  // A serving reactor's call never reads or writes a node.
  sh->tree->set_io(!IsServingThread());
  return sh->tree.get();
}

Status ExtentIndex::NoteMissingLocked(Shard* sh, uint32_t id, Status st) {
  if (st.IsWouldBlock()) {
    const ExtentTree::MissingNode& m = sh->tree->missing();
    pending_load = m.addr == kNoNode ? PendingLoad{} : PendingLoad{this, id, m};
    node_parks_.fetch_add(1, std::memory_order_relaxed);
  }
  return st;
}

Status ExtentIndex::ProbeLocked(Shard* sh, uint32_t id, uint32_t dev, uint64_t start, uint64_t end,
                                bool insert) {
  ExtentTree* t = Tree(sh);
  t->clear_missing();
  return NoteMissingLocked(sh, id, t->Probe(dev, start, end, insert));
}

bool ExtentIndex::HasMissingNode() const { return pending_load.index == this; }

void ExtentIndex::LoadMissing(Callback<void(Status)> done) {
  PendingLoad p = pending_load;
  pending_load = PendingLoad{};
  if (p.index != this) {
    done(Status::WouldBlock("extent index: no node to read (the call needs a thread that may wait)"));
    return;
  }
  Shard* sh = shards_[p.shard].get();
  uint64_t token;
  {
    MutexLock l(&sh->mu);
    token = sh->tree->BeginRead(p.node.addr);
  }
  // Read outside every lock, on this thread's reactor; installed under the
  // shard lock when it completes.
  store_->ReadNodeAsync(p.node.addr, [sh, p, token, done = std::move(done)](
                                         Status st, const uint8_t* data) mutable {
    Status installed;
    {
      MutexLock l(&sh->mu);
      installed = sh->tree->InstallRead(p.node, token, st.ok() ? data : nullptr);
    }
    done(st.ok() ? std::move(installed) : std::move(st));
  });
}

ExtentIndex::ExtentIndex(NodeStore* store, uint32_t nshards, uint64_t stripe, const Options& o)
    : store_(store),
      stripe_(stripe),
      set_id_(o.set_id),
      bucket_bytes_(o.bucket_bytes),
      journaled_(o.journaled),
      on_dirty_(o.on_dirty),
      check_data_(o.check_data),
      on_replayed_insert_(o.on_replayed_insert),
      wake_writer_(o.wake_writer),
      cache_bytes_(o.cache_bytes),
      chunk_seq_(new std::atomic<uint64_t>[kChunkSlots]()),  // zeros (C++20 atomics value-initialise)
      chunk_writes_(new std::atomic<uint32_t>[kChunkSlots]()) {
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
  idx->JournalPowerDomain();
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
  // Rule 9: a flush record follows the entries it covers, so all are known first.
  const FlushCoverage covered =
      ScanBackingFlushes(all, root.journal_seq, idx->set_id_, CurrentPowerDomain());
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
    idx->ApplyFlushCoverage(covered, seq, &ops);
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
  idx->written_seq_ = last;
  idx->run_first_seq_ = last + 1;
  idx->journal_bytes_ = pos;
  if (idx->kept_on_power_) {
    UB_INFO("extent index: kept {} clean copies an earlier run journaled before a backing flush "
            "(no power cut since: same boot)",
            idx->kept_on_power_);
  }
  idx->JournalPowerDomain();
  for (auto& sh : idx->shards_) {
    MutexLock l(&sh->mu);
    UB_RETURN_IF_ERROR(sh->error);
  }
  return idx;
}

ExtentIndex::FlushCoverage ExtentIndex::ScanBackingFlushes(const std::vector<uint8_t>& all,
                                                           uint64_t root_seq, uint64_t set_id,
                                                           const PowerDomain& domain) {
  // The chain Open replays (it stops at the same places); a record in it is
  // a fact whatever replay then does with its entry: it is journaled only
  // after its flush completed.
  FlushCoverage covered;
  std::vector<JournalOp> ops;
  uint64_t last = root_seq;
  bool same_power = false;  // the last power-domain op named `domain`
  for (size_t pos = 0; pos < all.size();) {
    size_t len = 0;
    uint64_t seq = 0;
    if (!DecodeJournalEntry(all.data() + pos, all.size() - pos, &len, &seq, &ops, set_id).ok()) break;
    pos += len;
    if (seq <= root_seq && last == root_seq) continue;
    if (seq != last + 1) break;
    last = seq;
    for (const JournalOp& op : ops) {
      if (op.type == JournalOp::Type::kPowerDomain) {
        // Entries before a run's first op were written by the run before
        // (or the checkpoint's run, before it re-recorded its domain).
        same_power = op.domain == domain;
        if (same_power) covered.same_power.emplace_back(seq, seq);
      }
      if (op.type != JournalOp::Type::kBackingFlushed) continue;
      uint64_t& to = covered.flushed[{op.extent.dev, op.first_seq}];
      to = std::max(to, op.last_seq);
    }
    if (same_power) covered.same_power.back().second = seq;
  }
  return covered;
}

void ExtentIndex::ApplyFlushCoverage(const FlushCoverage& covered, uint64_t seq,
                                     std::vector<JournalOp>* ops) {
  bool same_power = false;
  for (const auto& [first, last] : covered.same_power) same_power |= first <= seq && seq <= last;
  for (JournalOp& op : *ops) {
    if (op.type != JournalOp::Type::kInsert || !op.provisional) continue;
    bool flushed = false;
    for (auto it = covered.flushed.lower_bound({op.extent.dev, 0});
         it != covered.flushed.end() && it->first.first == op.extent.dev && !flushed; ++it)
      flushed = it->first.second <= seq && seq <= it->second;
    op.provisional = false;
    if (flushed) continue;
    if (same_power) {
      kept_on_power_++;
      continue;
    }
    // The backing device may have lost the data this copy mirrors: the
    // range reads the backing device's, whatever that is now.
    op.type = JournalOp::Type::kInvalidate;
    op.shard = ShardOf(op.extent.dev, op.extent.start);
  }
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
  if (op.type == JournalOp::Type::kBackingFlushed || op.type == JournalOp::Type::kPowerDomain)
    return Status::OK();  // read by ScanBackingFlushes
  const Extent& e = op.extent;
  UB_RETURN_IF_ERROR(CheckRange(e.dev, e.start, e.len));
  if (op.type == JournalOp::Type::kKeep || op.type == JournalOp::Type::kUnkeep) return ApplyKeptOp(op);
  if (op.type == JournalOp::Type::kInsert) {
    if (e.start / stripe_ != (e.end() - 1) / stripe_) {
      return Status::Corruption("journal: insert op crosses a stripe");
    }
    Shard* sh = shards_[ShardOf(e.dev, e.start)].get();
    MutexLock l(&sh->mu);
    std::vector<Extent> removed;
    UB_RETURN_IF_ERROR(Tree(sh)->Replace(e.dev, e.start, e.end(), &e, &removed));
    AccountLocked(sh, removed, &e);
    return Status::OK();
  }
  if (op.shard >= shards_.size()) return Status::Corruption("journal: bad shard");
  Shard* sh = shards_[op.shard].get();
  MutexLock l(&sh->mu);
  std::vector<Extent> removed;
  UB_RETURN_IF_ERROR(Tree(sh)->Replace(e.dev, e.start, e.end(), nullptr, &removed));
  AccountLocked(sh, removed, nullptr);
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Dirty accounting

namespace {
// map[key] += len (sign > 0) or -= len, floored at 0; a zero entry is erased.
// One descent of the map either way (a writeback write accounts four maps).
template <typename Map, typename Key>
void AddBytes(Map& map, const Key& key, uint64_t len, int64_t sign) {
  if (sign > 0) {
    if (len > 0) map[key] += len;
    return;
  }
  auto it = map.find(key);
  if (it == map.end()) return;
  if (it->second > len)
    it->second -= len;
  else
    map.erase(it);
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
    AddBytes(sh->epoch_stripes, std::make_tuple(e.dev, e.epoch, e.start / stripe_), e.len, sign);
    AddBytes(sh->dirty_devs, e.dev, e.len, sign);
    if (bucket_bytes_) {
      uint64_t b = e.cache_offset / bucket_bytes_;
      AddBytes(sh->dirty_buckets, b, e.len, sign);
      if (on_dirty_) on_dirty_(b, sign * static_cast<int64_t>(e.len));
    }
  }
}

void ExtentIndex::AccountKeptLocked(Shard* sh, const Extent& e, int64_t sign) {
  // Dirty for the device and its bucket, but no stripe's: address-order
  // writeback never writes a kept version.
  AddBytes(sh->dirty_devs, e.dev, e.len, sign);
  if (bucket_bytes_) {
    uint64_t b = e.cache_offset / bucket_bytes_;
    AddBytes(sh->dirty_buckets, b, e.len, sign);
    if (on_dirty_) on_dirty_(b, sign * static_cast<int64_t>(e.len));
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
  std::vector<std::pair<uint64_t, uint64_t>> buckets(sh->dirty_buckets.begin(), sh->dirty_buckets.end());
  std::sort(buckets.begin(), buckets.end());  // in bucket order, as it always was
  for (const auto& [b, v] : buckets) {
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
  return DecodeEpochs(blob, pos);
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
                               const uint8_t* data, bool provisional) {
  Extent to = e;
  to.cache_offset = new_offset;
  to.gen = new_gen;
  return ChangeIfSame(e, provisional ? Change::kMoveProvisional : Change::kMove, &to, moved, data);
}

Status ExtentIndex::InvalidateClean(uint32_t dev, uint64_t start, uint64_t len, bool* has_dirty,
                                    uint64_t* removed_clean) {
  *has_dirty = false;
  if (removed_clean) *removed_clean = 0;
  UB_RETURN_IF_ERROR(CheckRange(dev, start, len));
  uint64_t end = start + len;
  ShardLocks locks(this, ShardsFor(dev, start, end));
  // Without I/O: every node first (see the header).
  if (IsServingThread()) UB_RETURN_IF_ERROR(ProbeMutationLocked(locks, dev, start, end, false));
  MarkChanged(dev, start, end, seq_.fetch_add(1) + 1);
  Status result;
  std::vector<Extent> cur, removed;
  for (uint32_t id : locks.ids()) {
    Shard* sh = shards_[id].get();
    sh->mu.AssertHeld();
    cur.clear();
    Status st = Tree(sh)->Lookup(dev, start, end, &cur);
    // Kept versions are dirty data too: a write over them never bypasses.
    if (KeptOverlapsLocked(sh, dev, start, end)) *has_dirty = true;
    for (const Extent& x : cur) {
      if (!st.ok()) break;
      if (x.dirty) {
        *has_dirty = true;
        continue;
      }
      removed.clear();
      st = Tree(sh)->Replace(dev, x.start, x.end(), nullptr, &removed);
      JournalInvalidateLocked(sh, id, dev, x.start, x.end());
      if (removed_clean) *removed_clean += x.len;
    }
    if (!st.ok() && result.ok()) result = st;
    EvictLocked(sh);
  }
  return result;
}

Status ExtentIndex::MarkWrite(uint32_t dev, uint64_t start, uint64_t len, bool* has_dirty) {
  if (has_dirty) *has_dirty = false;
  UB_RETURN_IF_ERROR(CheckRange(dev, start, len));
  uint64_t end = start + len;
  ShardLocks locks(this, ShardsFor(dev, start, end));
  // Without I/O: every node the lookup below reads, first (see the header).
  if (has_dirty && IsServingThread()) UB_RETURN_IF_ERROR(ProbeMutationLocked(locks, dev, start, end, false));
  MarkChanged(dev, start, end, seq_.fetch_add(1) + 1);
  if (!has_dirty) return Status::OK();
  std::vector<Extent> cur;
  for (uint32_t id : locks.ids()) {
    Shard* sh = shards_[id].get();
    sh->mu.AssertHeld();
    if (KeptOverlapsLocked(sh, dev, start, end)) {
      *has_dirty = true;
      return Status::OK();
    }
    cur.clear();
    UB_RETURN_IF_ERROR(Tree(sh)->Lookup(dev, start, end, &cur));
    for (const Extent& x : cur) {
      if (x.dirty) {
        *has_dirty = true;
        return Status::OK();
      }
    }
  }
  return Status::OK();
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
  if (IsServingThread()) UB_RETURN_IF_ERROR(ProbeLocked(sh, id, e.dev, e.start, e.end(), false));
  std::vector<Extent> cur;
  Status st = Tree(sh)->Lookup(e.dev, e.start, e.end(), &cur);
  for (const Extent& x : cur) {
    if (!st.ok()) break;
    if ((how == Change::kClean && !x.dirty) || x.gen != e.gen ||
        x.cache_offset - x.start != e.cache_offset - e.start)
      continue;
    Extent c = x;
    if (how == Change::kClean) {
      c.dirty = false;
      c.epoch = 0;  // clean data has no epoch
    }
    if (how == Change::kMove || how == Change::kMoveProvisional) {
      c.cache_offset = to->cache_offset + (x.start - e.start);
      c.gen = to->gen;
    }
    bool keep = how != Change::kRemove;
    std::vector<Extent> removed;
    st = Tree(sh)->Replace(x.dev, x.start, x.end(), keep ? &c : nullptr, &removed);
    // Only a removal changes what the range reads; clean and move keep the
    // bytes (so racing fills stay valid).
    if (!keep) MarkChanged(x.dev, x.start, x.end(), seq_.fetch_add(1) + 1);
    // Journaled as the new piece: replay replaces exactly this range.
    if (st.ok() && keep) {
      // A moved piece points at data just copied: checked when we have it.
      bool moved = how == Change::kMove || how == Change::kMoveProvisional;
      bool checked = moved && data && journaled_;
      uint64_t hash = checked ? Hash64(data + (x.start - e.start), x.len) : 0;
      JournalInsertLocked(sh, c, checked ? &hash : nullptr, how == Change::kMoveProvisional);
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
  ExtentTree* t = Tree(sh);
  t->set_budget(ShardBudget());
  Status st = t->Evict(ShardBudget());
  if (!st.ok()) {
    // The node stays resident and dirty; nothing is lost. Commit reports it.
    UB_WARN("extent index: node write-back failed: {}", st.ToString());
    if (sh->error.ok()) sh->error = st;
  }
  // Without I/O dirty nodes stayed over budget: the writer takes them.
  if (t->dirty_over_budget() && !writer_woken_.exchange(true) && wake_writer_) wake_writer_();
}

Status ExtentIndex::WriteOverBudget() {
  writer_woken_.store(false);
  Status result;
  for (auto& shp : shards_) {
    Shard* sh = shp.get();
    MutexLock l(&sh->mu);
    if (!sh->tree->dirty_over_budget()) continue;
    Status st = Tree(sh)->Evict(ShardBudget());
    if (!st.ok() && result.ok()) result = st;
  }
  return result;
}

// ---------------------------------------------------------------------------
// Change tracking for InsertIfUnchanged. A mutation takes its sequence number
// and marks its chunks while holding the shards of its range; the check runs
// under the same shard locks, so it sees every mutation that finished before.

namespace {
// Whether fn(slot) holds for a chunk slot of [start, end) (stops at the first).
template <typename Fn>
bool AnyChunkSlot(uint32_t dev, uint64_t start, uint64_t end, Fn fn) {
  uint64_t first = start >> kChunkShift, last = (end - 1) >> kChunkShift;
  if (last - first >= kChunkSlots) {
    for (size_t i = 0; i < kChunkSlots; i++)
      if (fn(i)) return true;
    return false;
  }
  for (uint64_t c = first; c <= last; c++)
    if (fn(ChunkSlot(dev, c))) return true;
  return false;
}
}  // namespace

bool ExtentIndex::ChangedSince(uint32_t dev, uint64_t start, uint64_t end, uint64_t since) const {
  return AnyChunkSlot(dev, start, end, [&](size_t slot) { return chunk_seq_[slot].load() > since; });
}

void ExtentIndex::MarkChanged(uint32_t dev, uint64_t start, uint64_t end, uint64_t seq) {
  AnyChunkSlot(dev, start, end, [&](size_t slot) {
    // Max, not store: a colliding slot may be marked from another shard.
    uint64_t cur = chunk_seq_[slot].load();
    while (cur < seq && !chunk_seq_[slot].compare_exchange_weak(cur, seq)) {
    }
    return false;
  });
}

void ExtentIndex::BackingWriteBegins(uint32_t dev, uint64_t start, uint64_t len) {
  if (len == 0) return;
  AnyChunkSlot(dev, start, start + len, [&](size_t slot) {
    chunk_writes_[slot].fetch_add(1);
    return false;
  });
}

void ExtentIndex::BackingWriteEnds(uint32_t dev, uint64_t start, uint64_t len) {
  if (len == 0) return;
  AnyChunkSlot(dev, start, start + len, [&](size_t slot) {
    chunk_writes_[slot].fetch_sub(1);
    return false;
  });
}

bool ExtentIndex::BackingWriteInFlight(uint32_t dev, uint64_t start, uint64_t end) const {
  return AnyChunkSlot(dev, start, end, [&](size_t slot) { return chunk_writes_[slot].load() > 0; });
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
    if (st.ok()) {
      ExtentTree* t = Tree(sh);
      t->clear_missing();
      st = NoteMissingLocked(sh, id, t->Lookup(dev, start, start + len, out));
    }
    // A lookup that stopped at a node not in memory evicts nothing: the
    // nodes it passed are what its next pass needs.
    if (!st.IsWouldBlock()) EvictLocked(sh);
  }
  if (st.IsWouldBlock()) out->clear();
  if (locks.ids().size() > 1) {
    std::sort(out->begin(), out->end(),
              [](const Extent& a, const Extent& b) { return a.start < b.start; });
  }
  return st;
}

Status ExtentIndex::Insert(const Extent& e, const uint8_t* data, bool provisional,
                           const EpochRule* rule) {
  UB_RETURN_IF_ERROR(CheckRange(e.dev, e.start, e.len));
  return Mutate(e.dev, e.start, e.end(), &e, data, nullptr, nullptr, nullptr, provisional, rule);
}

Status ExtentIndex::Invalidate(uint32_t dev, uint64_t start, uint64_t len, uint64_t* removed_dirty) {
  UB_RETURN_IF_ERROR(CheckRange(dev, start, len));
  return Mutate(dev, start, start + len, nullptr, nullptr, nullptr, nullptr, removed_dirty);
}

Status ExtentIndex::InsertIfUnchanged(const Extent& e, uint64_t since, bool* inserted,
                                      bool provisional) {
  UB_RETURN_IF_ERROR(CheckRange(e.dev, e.start, e.len));
  return Mutate(e.dev, e.start, e.end(), &e, nullptr, &since, inserted, nullptr, provisional);
}

Status ExtentIndex::Mutate(uint32_t dev, uint64_t start, uint64_t end, const Extent* insert,
                           const uint8_t* data, const uint64_t* since, bool* inserted,
                           uint64_t* removed_dirty, bool provisional, const EpochRule* rule) {
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
    // A client write still on its way to the backing device may be in what
    // the fill read, and not durable (rule 9): no copy of it.
    *inserted = !ChangedSince(dev, start, end, *since) && !BackingWriteInFlight(dev, start, end);
    if (!*inserted) return Status::OK();
  }
  if (IsServingThread()) {
    Status probed = ProbeMutationLocked(locks, dev, start, end, insert != nullptr);
    if (!probed.ok()) {
      if (inserted) *inserted = false;
      return probed;
    }
  }
  if (!since) {
    // Only content changes mark the range. A fill (InsertIfUnchanged) caches
    // what the backing device already holds, so concurrent fills of
    // neighbouring blocks must not make each other collide.
    MarkChanged(dev, start, end, seq_.fetch_add(1) + 1);
  }
  Status result;
  // Read under the shard locks: two inserts into one range take their
  // epochs in the order they change it (btree/write_epoch.h).
  const bool dirty_rule = insert && insert->dirty && rule && rule->epoch;
  const uint64_t epoch = dirty_rule ? rule->epoch->current() : insert ? insert->epoch : 0;
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
      piece.epoch = piece.dirty ? epoch : 0;
      removed.clear();
      Status st = Tree(sh)->Replace(dev, s, e, &piece, &removed);
      for (const Extent& r : removed) removed_bytes += r.len;
      // Rule 12: an older epoch's version stays until its epoch is written
      // back. Kept (counted in) before the tree's copy is counted out, so
      // its bucket's dirty count never passes through zero (rule 15).
      const bool keep = st.ok() && dirty_rule && rule->keep_older;
      if (keep) KeepReplacedLocked(sh, removed, piece);
      AccountLocked(sh, removed, st.ok() ? &piece : nullptr);
      // A piece that failed half way is journaled as an invalidate: the
      // range may have lost its old extents, and the caller was told it is
      // not cached.
      if (st.ok()) {
        JournalInsertLocked(sh, piece, hashes.empty() ? nullptr : &hashes[n], provisional);
        // The keeps after the insert op: replay replaces, then keeps.
        if (keep) JournalReplacedLocked(sh, removed, piece);
        // Clean data over kept versions: the backing device holds newer
        // data than they do (rule 14).
        if (!piece.dirty) DropKeptLocked(sh, dev, s, e);
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
      Status st = Tree(sh)->Replace(dev, start, end, nullptr, &removed);
      for (const Extent& r : removed) removed_bytes += r.len;
      AccountLocked(sh, removed, nullptr);
      JournalInvalidateLocked(sh, id, dev, start, end);
      // The range is going to the backing device (a write-through over
      // dirty data, a discard) or away: its kept versions are older (rule 14).
      DropKeptLocked(sh, dev, start, end, &removed_bytes);
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

// Without I/O, a change first makes sure every node it touches is resident
// (all shards, all pieces), so it never stops half way.
Status ExtentIndex::ProbeMutationLocked(const ShardLocks& locks, uint32_t dev, uint64_t start,
                                        uint64_t end, bool insert) {
  if (!insert) {
    for (uint32_t id : locks.ids()) {
      Shard* sh = shards_[id].get();
      sh->mu.AssertHeld();
      UB_RETURN_IF_ERROR(ProbeLocked(sh, id, dev, start, end, false));
    }
    return Status::OK();
  }
  for (uint64_t s = start; s < end;) {
    uint64_t e = std::min(end, (s / stripe_ + 1) * stripe_);
    uint32_t id = ShardOf(dev, s);
    Shard* sh = shards_[id].get();
    sh->mu.AssertHeld();
    UB_RETURN_IF_ERROR(ProbeLocked(sh, id, dev, s, e, true));
    s = e;
  }
  return Status::OK();
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
        Status st = Tree(sh)->Collect(from, kForEachBatch, &batch, &done);
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

void ExtentIndex::JournalInsertLocked(Shard* sh, const Extent& piece, const uint64_t* hash,
                                      bool provisional) {
  if (!journaled_) return;
  provisional = provisional && !piece.dirty;
  AppendInsertOp(&sh->journal, piece, hash, provisional);
  sh->journal_ops++;
  sh->journal_provisional |= provisional;
}

void ExtentIndex::JournalBackingFlushed(uint32_t dev, uint64_t first_seq, uint64_t last_seq) {
  if (!journaled_) return;
  Shard* sh = shards_[0].get();  // any shard: the op names no range
  MutexLock l(&sh->mu);
  AppendBackingFlushedOp(&sh->journal, dev, first_seq, last_seq);
  sh->journal_ops++;
}

void ExtentIndex::JournalPowerDomain() {
  if (!journaled_) return;
  Shard* sh = shards_[0].get();  // any shard: the op names no range
  MutexLock l(&sh->mu);
  AppendPowerDomainOp(&sh->journal, CurrentPowerDomain());
  sh->journal_ops++;
}

void ExtentIndex::JournalInvalidateLocked(Shard* sh, uint32_t id, uint32_t dev, uint64_t start,
                                          uint64_t end) {
  if (!journaled_) return;
  AppendInvalidateOp(&sh->journal, id, dev, start, end);
  sh->journal_ops++;
}

void ExtentIndex::ReturnPendingOps(std::vector<std::vector<uint8_t>>* taken,
                                   std::vector<uint32_t>* ops, const std::vector<char>& provisional) {
  // Put ops that did not reach the journal back in front of newer ones, so
  // the shard's order is kept and the next Commit writes them.
  for (size_t i = 0; i < shards_.size(); i++) {
    if ((*ops)[i] == 0) continue;
    Shard* sh = shards_[i].get();
    MutexLock l(&sh->mu);
    (*taken)[i].insert((*taken)[i].end(), sh->journal.begin(), sh->journal.end());
    sh->journal.swap((*taken)[i]);
    sh->journal_ops += (*ops)[i];
    sh->journal_provisional |= provisional[i] != 0;
  }
}

uint64_t ExtentIndex::TakePendingOps(SoftCommit* c) {
  size_t n = shards_.size();
  c->taken.assign(n, {});
  c->ops.assign(n, 0);
  c->provisional.assign(n, 0);
  c->any_provisional = false;
  uint64_t nops = 0, epoch_state = 4;
  for (size_t i = 0; i < n; i++) {
    Shard* sh = shards_[i].get();
    MutexLock l(&sh->mu);
    epoch_state += EpochStateBytesLocked(sh);
    if (!sh->error.ok() && c->sticky.ok()) c->sticky = sh->error;
    sh->error = Status::OK();
    c->taken[i].swap(sh->journal);
    c->ops[i] = sh->journal_ops;
    sh->journal_ops = 0;
    c->provisional[i] = sh->journal_provisional;
    c->any_provisional |= sh->journal_provisional;
    sh->journal_provisional = false;
    nops += c->ops[i];
  }
  NoteEpochState(epoch_state);
  if (nops == 0) return 0;
  std::vector<uint8_t> payload;
  for (auto& t : c->taken) payload.insert(payload.end(), t.begin(), t.end());
  if (payload.size() > UINT32_MAX || nops > UINT32_MAX) {
    ReturnPendingOps(&c->taken, &c->ops, c->provisional);
    c->sticky = Status::Overflow("extent index: more than 4 GiB of uncommitted ops");
    return 0;
  }
  c->entry = EncodeJournalEntry(journal_seq_ + 1, static_cast<uint32_t>(nops), payload, set_id_);
  return nops;
}

Status ExtentIndex::Commit(bool soft) {
  MutexLock c(&commit_mu_);
  SoftCommit t;
  if (TakePendingOps(&t) == 0) {
    if (t.sticky.code() == Status::Code::kOverflow) return t.sticky;
    // Soft entries before this one become durable only with a flush.
    if (!soft) {
      Status st = store_->SyncJournal();
      if (!st.ok()) return st;
    }
    return t.sticky;
  }
  Status st = soft ? store_->AppendJournalSoft(t.entry.data(), t.entry.size())
                   : store_->AppendJournal(t.entry.data(), t.entry.size());
  if (!st.ok()) {
    ReturnPendingOps(&t.taken, &t.ops, t.provisional);
    return st;
  }
  NoteWrittenLocked(t);
  return t.sticky;
}

void ExtentIndex::NoteWrittenLocked(const SoftCommit& c) {
  journal_seq_++;
  journal_bytes_ += c.entry.size();
  if (c.any_provisional) last_provisional_seq_.store(journal_seq_, std::memory_order_seq_cst);
  written_seq_.store(journal_seq_, std::memory_order_seq_cst);
}

void ExtentIndex::BeginSoftCommit(SoftCommit* c) {
  MutexLock l(&commit_mu_);
  TakePendingOps(c);
}

Status ExtentIndex::EndSoftCommit(SoftCommit* c, bool written) {
  MutexLock l(&commit_mu_);
  if (c->entry.empty()) return c->sticky;
  if (!written) {
    ReturnPendingOps(&c->taken, &c->ops, c->provisional);
    return c->sticky;
  }
  NoteWrittenLocked(*c);
  return c->sticky;
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
  std::vector<char> provisional(n, 0);
  std::vector<uint64_t> release;
  CheckpointState state;
  state.dirty.resize(8);
  StoreLE32(state.dirty.data(), kDirtyMagic);
  StoreLE32(state.dirty.data() + 4, static_cast<uint32_t>(n));
  std::vector<uint8_t> epochs(4);  // the epoch section follows every shard's dirty section
  StoreLE32(epochs.data(), kEpochsMagic);
  Status st;
  for (size_t i = 0; i < n && st.ok(); i++) {
    Shard* sh = shards_[i].get();
    MutexLock l(&sh->mu);
    st = Tree(sh)->Flush(&root.shards[i]);
    if (!st.ok()) break;
    EncodeDirtyLocked(sh, &state.dirty);
    EncodeEpochsLocked(sh, &epochs);
    // This shard's pending ops are in the snapshot; its superseded nodes
    // become free once the snapshot's root is durable.
    taken[i].swap(sh->journal);
    ops[i] = sh->journal_ops;
    sh->journal_ops = 0;
    // Provisional inserts among them: the persist hook's backing flush
    // covers them before the root is durable (rule 9).
    provisional[i] = sh->journal_provisional;
    sh->journal_provisional = false;
    std::vector<uint64_t> freed = Tree(sh)->CheckpointTaken();
    release.insert(release.end(), freed.begin(), freed.end());
    EvictLocked(sh);
  }
  state.dirty.insert(state.dirty.end(), epochs.begin(), epochs.end());
  if (st.ok()) NoteEpochState(epochs.size());
  root.journal_seq = journal_seq_;
  root.generation = generation_ + 1;
  state.superseded = release;
  state.superseded.insert(state.superseded.end(), release_.begin(), release_.end());
  if (st.ok() && persist) st = persist(root, state);
  if (!st.ok()) {
    ReturnPendingOps(&taken, &ops, provisional);
    release_.insert(release_.end(), release.begin(), release.end());
    return st;
  }
  generation_++;
  // After the root is durable. If the trim fails the old entries stay, and
  // replay skips them by sequence number.
  st = store_->TrimJournal();
  if (st.ok()) journal_bytes_ = 0;
  // The trimmed entries held this run's power-domain op; the next entry
  // (commit_mu_ is held: none is written before it) records it again.
  JournalPowerDomain();
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
  s.node_parks = node_parks_.load(std::memory_order_relaxed);
  return s;
}

void ExtentIndex::SetCacheBytes(uint64_t bytes) { cache_bytes_.store(bytes); }

}  // namespace ubcache
