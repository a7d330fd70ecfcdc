// SPDX-License-Identifier: Apache-2.0
// ExtentIndex: write epochs and kept versions (see extent_index.h, "Write
// epochs"; the rules are doc/design.md "Durability", 9-12).
#include <algorithm>
#include <set>

#include "btree/extent_index.h"
#include "util/clock.h"
#include "util/endian.h"
#include "util/log.h"

namespace ubcache {

namespace {
// A kept version's key in its shard: (dev, epoch, start).
std::tuple<uint32_t, uint64_t, uint64_t> KeptKey(const Extent& e) { return {e.dev, e.epoch, e.start}; }

bool Overlaps(const Extent& x, uint64_t start, uint64_t end) { return x.start < end && start < x.end(); }

// The part of x inside [start, end).
Extent Clip(const Extent& x, uint64_t start, uint64_t end) {
  Extent c = x;
  c.start = std::max(x.start, start);
  c.len = std::min(x.end(), end) - c.start;
  c.cache_offset = x.cache_offset + (c.start - x.start);
  return c;
}
}  // namespace

// Rule 15 (doc/design.md "Durability"): a bucket's dirty count never passes
// through zero while data in it stays needed. The count is the allocator's
// only guard against reclaim (BucketAllocator::AddDirty), and the refill
// thread reads it under no shard lock: a change that moves dirty bytes from
// one account to another in the same bucket (a replaced piece kept, a kept
// version split) adds the new account before it subtracts the old one.
// Else a refill between the two reclaims the bucket, bumps its gen, and the
// kept version is stale: writeback can never write it, its epoch never
// drains, and nothing dirty of a later epoch is ever cleaned.

void ExtentIndex::KeptAddLocked(Shard* sh, const Extent& k) {
  sh->kept[KeptKey(k)] = k;
  sh->kept_by_addr.insert({k.dev, k.start, k.epoch});
  sh->kept_max_len = std::max(sh->kept_max_len, k.len);
}

void ExtentIndex::KeptEraseLocked(Shard* sh, const Extent& k) {
  sh->kept.erase(KeptKey(k));
  sh->kept_by_addr.erase({k.dev, k.start, k.epoch});
}

std::vector<Extent> ExtentIndex::KeptOverlappingLocked(Shard* sh, uint32_t dev, uint64_t start, uint64_t end) {
  std::vector<Extent> out;
  if (sh->kept.empty() || end <= start) return out;
  // One that overlaps starts after start - kept_max_len.
  uint64_t from = start > sh->kept_max_len ? start - sh->kept_max_len + 1 : 0;
  for (auto it = sh->kept_by_addr.lower_bound({dev, from, 0});
       it != sh->kept_by_addr.end() && std::get<0>(*it) == dev && std::get<1>(*it) < end; ++it) {
    const Extent& x = sh->kept.at({dev, std::get<2>(*it), std::get<1>(*it)});
    if (Overlaps(x, start, end)) out.push_back(x);
  }
  return out;
}

void ExtentIndex::KeepLocked(Shard* sh, const Extent& e, bool journal) {
  Extent k = e;
  k.dirty = true;
  AccountKeptLocked(sh, k, 1);  // first (rule 15)
  auto it = sh->kept.find(KeptKey(k));
  if (it != sh->kept.end())  // replay of a keep over one it already holds: replaced
    AccountKeptLocked(sh, it->second, -1);
  KeptAddLocked(sh, k);
  if (journal) JournalKeepLocked(sh, k);
}

void ExtentIndex::JournalKeepLocked(Shard* sh, const Extent& k) {
  if (!journaled_) return;
  AppendKeepOp(&sh->journal, k);
  sh->journal_ops++;
}

bool ExtentIndex::Replaced(const Extent& r, const Extent& piece) { return r.dirty && r.epoch < piece.epoch; }

void ExtentIndex::KeepReplacedLocked(Shard* sh, const std::vector<Extent>& removed, const Extent& piece) {
  for (const Extent& r : removed)
    if (Replaced(r, piece)) KeepLocked(sh, r, false);
}

void ExtentIndex::JournalReplacedLocked(Shard* sh, const std::vector<Extent>& removed, const Extent& piece) {
  for (const Extent& r : removed) {
    if (!Replaced(r, piece)) continue;
    Extent k = r;
    k.dirty = true;
    JournalKeepLocked(sh, k);
  }
}

bool ExtentIndex::KeptOverlapsLocked(Shard* sh, uint32_t dev, uint64_t start, uint64_t end) {
  return !KeptOverlappingLocked(sh, dev, start, end).empty();
}

void ExtentIndex::DropKeptLocked(Shard* sh, uint32_t dev, uint64_t start, uint64_t end, uint64_t* bytes) {
  if (sh->kept.empty()) return;
  std::vector<Extent> hit = KeptOverlappingLocked(sh, dev, start, end);
  for (const Extent& x : hit) {
    KeptEraseLocked(sh, x);
    if (journaled_) {
      AppendUnkeepOp(&sh->journal, x.dev, x.epoch, x.start);
      sh->journal_ops++;
    }
    if (bytes) *bytes += Clip(x, start, end).len;
    // The parts outside the range stay kept (journaled after the unkeep:
    // replay erases, then keeps them), counted before x is counted out
    // (rule 15).
    if (x.start < start) KeepLocked(sh, Clip(x, x.start, start), true);
    if (x.end() > end) KeepLocked(sh, Clip(x, end, x.end()), true);
    AccountKeptLocked(sh, x, -1);
  }
}

Status ExtentIndex::ApplyKeptOp(const JournalOp& op) {
  const Extent& e = op.extent;
  if (op.type == JournalOp::Type::kKeep && e.start / stripe_ != (e.end() - 1) / stripe_)
    return Status::Corruption("journal: keep op crosses a stripe");
  Shard* sh = shards_[ShardOf(e.dev, e.start)].get();
  MutexLock l(&sh->mu);
  if (op.type == JournalOp::Type::kKeep) {
    KeepLocked(sh, e, false);
    return Status::OK();
  }
  auto it = sh->kept.find(KeptKey(e));
  if (it != sh->kept.end()) {
    AccountKeptLocked(sh, it->second, -1);
    KeptEraseLocked(sh, Extent(it->second));
  }
  return Status::OK();
}

uint64_t ExtentIndex::NewestEpoch(uint32_t dev) {
  uint64_t newest = 0;
  for (auto& shp : shards_) {
    Shard* sh = shp.get();
    MutexLock l(&sh->mu);
    auto a = sh->epoch_stripes.lower_bound({dev + 1, 0, 0});
    if (a != sh->epoch_stripes.begin() && std::get<0>(std::prev(a)->first) == dev)
      newest = std::max(newest, std::get<1>(std::prev(a)->first));
    auto k = sh->kept.lower_bound({dev + 1, 0, 0});
    if (k != sh->kept.begin() && std::get<0>(std::prev(k)->first) == dev)
      newest = std::max(newest, std::get<1>(std::prev(k)->first));
  }
  return newest;
}

std::optional<uint64_t> ExtentIndex::OldestEpoch(uint32_t dev) {
  std::optional<uint64_t> oldest;
  auto see = [&oldest](uint64_t epoch) { oldest = oldest ? std::min(*oldest, epoch) : epoch; };
  for (auto& shp : shards_) {
    Shard* sh = shp.get();
    MutexLock l(&sh->mu);
    auto a = sh->epoch_stripes.lower_bound({dev, 0, 0});
    if (a != sh->epoch_stripes.end() && std::get<0>(a->first) == dev) see(std::get<1>(a->first));
    auto k = sh->kept.lower_bound({dev, 0, 0});
    if (k != sh->kept.end() && std::get<0>(k->first) == dev) see(std::get<1>(k->first));
  }
  return oldest;
}

uint64_t ExtentIndex::DirtyEpochs(uint32_t dev) {
  std::set<uint64_t> epochs;
  for (auto& shp : shards_) {
    Shard* sh = shp.get();
    MutexLock l(&sh->mu);
    // One lookup per distinct epoch: skip to the first key past it.
    for (auto a = sh->epoch_stripes.lower_bound({dev, 0, 0});
         a != sh->epoch_stripes.end() && std::get<0>(a->first) == dev;
         a = sh->epoch_stripes.lower_bound({dev, std::get<1>(a->first) + 1, 0}))
      epochs.insert(std::get<1>(a->first));
    for (auto k = sh->kept.lower_bound({dev, 0, 0}); k != sh->kept.end() && std::get<0>(k->first) == dev;
         k = sh->kept.lower_bound({dev, std::get<1>(k->first) + 1, 0}))
      epochs.insert(std::get<1>(k->first));
  }
  return epochs.size();
}

std::vector<uint64_t> ExtentIndex::EpochStripes(uint32_t dev, uint64_t epoch, size_t max) {
  std::set<uint64_t> stripes;
  for (auto& shp : shards_) {
    Shard* sh = shp.get();
    MutexLock l(&sh->mu);
    for (auto it = sh->epoch_stripes.lower_bound({dev, epoch, 0});
         it != sh->epoch_stripes.end() && std::get<0>(it->first) == dev && std::get<1>(it->first) == epoch; ++it)
      stripes.insert(std::get<2>(it->first));
    for (auto it = sh->kept.lower_bound({dev, epoch, 0});
         it != sh->kept.end() && std::get<0>(it->first) == dev && std::get<1>(it->first) == epoch; ++it)
      stripes.insert(it->second.start / stripe_);
  }
  std::vector<uint64_t> out(stripes.begin(), stripes.end());
  if (out.size() > max) out.resize(max);
  return out;
}

std::vector<Extent> ExtentIndex::KeptVersions(uint32_t dev, uint64_t epoch, uint64_t start, uint64_t end) {
  std::vector<Extent> out;
  if (end <= start) return out;
  for (uint32_t id : ShardsFor(dev, start, end)) {
    Shard* sh = shards_[id].get();
    MutexLock l(&sh->mu);
    for (auto it = sh->kept.lower_bound({dev, epoch, start});
         it != sh->kept.end() && it->first < std::make_tuple(dev, epoch, end); ++it)
      out.push_back(it->second);
  }
  std::sort(out.begin(), out.end(), [](const Extent& a, const Extent& b) { return a.start < b.start; });
  return out;
}

Status ExtentIndex::Unkeep(const Extent& p, uint64_t* dropped) {
  *dropped = 0;
  if (p.len == 0 || p.start / stripe_ != (p.end() - 1) / stripe_)
    return Status::InvalidArgument("extent index: unkeep across a stripe");
  Shard* sh = shards_[ShardOf(p.dev, p.start)].get();
  MutexLock l(&sh->mu);
  if (sh->kept.empty()) return Status::OK();
  // Exactly the kept parts of p's data: same epoch, inside p's range, and
  // mapping to the same place on the cache device.
  std::vector<Extent> gone;
  for (auto it = sh->kept.lower_bound(KeptKey(p));
       it != sh->kept.end() && it->first < std::make_tuple(p.dev, p.epoch, p.end()); ++it) {
    const Extent& x = it->second;
    if (x.end() <= p.end() && x.gen == p.gen && x.cache_offset - x.start == p.cache_offset - p.start)
      gone.push_back(x);
  }
  for (const Extent& x : gone) {
    KeptEraseLocked(sh, x);
    AccountKeptLocked(sh, x, -1);
    if (journaled_) {
      AppendUnkeepOp(&sh->journal, x.dev, x.epoch, x.start);
      sh->journal_ops++;
    }
    *dropped += x.len;
  }
  return Status::OK();
}

uint64_t ExtentIndex::DropKeptVersions(uint32_t dev) {
  uint64_t bytes = 0;
  for (auto& shp : shards_) {
    Shard* sh = shp.get();
    MutexLock l(&sh->mu);
    DropKeptLocked(sh, dev, 0, ~uint64_t{0}, &bytes);
  }
  return bytes;
}

void ExtentIndex::ForEachKept(const std::function<void(const Extent&)>& fn) {
  std::vector<Extent> batch;
  for (auto& shp : shards_) {
    batch.clear();
    {
      MutexLock l(&shp->mu);
      for (const auto& [key, e] : shp->kept) batch.push_back(e);
    }
    for (const Extent& e : batch) fn(e);
  }
}

// ---------------------------------------------------------------------------
// The checkpoint's epoch section, after every shard's dirty section (inside
// the checksummed bucket table, doc/format.md §6): u32 magic "UBEK", then
// per shard u32 nepochs, u32 nkept, nepochs x {u32 dev, u64 epoch, u64
// stripe, u64 bytes}, nkept x {u32 dev, u64 start, u64 len, u64
// cache_offset, u8 gen, u64 epoch}.

namespace {
constexpr size_t kEpochEntry = 28, kKeptEntry = 37;
}

uint64_t ExtentIndex::EpochStateBytesLocked(Shard* sh) {
  return 8 + kEpochEntry * sh->epoch_stripes.size() + kKeptEntry * sh->kept.size();
}

void ExtentIndex::NoteEpochState(uint64_t bytes) {
  const uint64_t budget = epoch_state_budget_.load(std::memory_order_relaxed);
  const uint64_t before = epoch_state_bytes_.exchange(bytes, std::memory_order_relaxed);
  if (bytes <= budget || before > budget) return;
  uint64_t now = NowNanos(), last = epoch_state_logged_ns_.load(std::memory_order_relaxed);
  if (now - last < 10'000'000'000 || !epoch_state_logged_ns_.compare_exchange_strong(last, now)) return;
  UB_WARN("cache index: the write epochs' state ({} bytes: dirty epochs x stripes, kept versions) is past its "
          "budget ({} bytes, half of a journal half): dirty writes wait for writeback (flush order) or go "
          "through (lba) until writeback has retired epochs",
          bytes, budget);
}

void ExtentIndex::EncodeEpochsLocked(Shard* sh, std::vector<uint8_t>* out) {
  size_t at = out->size();
  out->resize(at + 8 + kEpochEntry * sh->epoch_stripes.size() + kKeptEntry * sh->kept.size());
  uint8_t* p = out->data() + at;
  StoreLE32(p, static_cast<uint32_t>(sh->epoch_stripes.size()));
  StoreLE32(p + 4, static_cast<uint32_t>(sh->kept.size()));
  p += 8;
  for (const auto& [k, bytes] : sh->epoch_stripes) {
    StoreLE32(p, std::get<0>(k));
    StoreLE64(p + 4, std::get<1>(k));
    StoreLE64(p + 12, std::get<2>(k));
    StoreLE64(p + 20, bytes);
    p += kEpochEntry;
  }
  for (const auto& [k, e] : sh->kept) {
    StoreLE32(p, e.dev);
    StoreLE64(p + 4, e.start);
    StoreLE64(p + 12, e.len);
    StoreLE64(p + 20, e.cache_offset);
    p[28] = e.gen;
    StoreLE64(p + 29, e.epoch);
    p += kKeptEntry;
  }
}

Status ExtentIndex::DecodeEpochs(const std::vector<uint8_t>& blob, size_t pos) {
  auto bad = [] { return Status::Corruption("index dirty state: bad epoch section"); };
  if (pos == blob.size()) {
    // A checkpoint from before epochs: all its dirty data is epoch 0.
    for (auto& shp : shards_) {
      MutexLock l(&shp->mu);
      for (const auto& [k, bytes] : shp->dirty_stripes) shp->epoch_stripes[{k.first, 0, k.second}] += bytes;
    }
    return Status::OK();
  }
  if (blob.size() - pos < 4 || LoadLE32(blob.data() + pos) != kEpochsMagic) return bad();
  pos += 4;
  for (auto& shp : shards_) {
    Shard* sh = shp.get();
    MutexLock l(&sh->mu);
    if (blob.size() - pos < 8) return bad();
    uint64_t ne = LoadLE32(blob.data() + pos), nk = LoadLE32(blob.data() + pos + 4);
    pos += 8;
    if ((blob.size() - pos) / kEpochEntry < ne || (blob.size() - pos - kEpochEntry * ne) / kKeptEntry < nk)
      return bad();
    for (uint64_t i = 0; i < ne; i++, pos += kEpochEntry) {
      const uint8_t* p = blob.data() + pos;
      sh->epoch_stripes[{LoadLE32(p), LoadLE64(p + 4), LoadLE64(p + 12)}] += LoadLE64(p + 20);
    }
    for (uint64_t i = 0; i < nk; i++, pos += kKeptEntry) {
      const uint8_t* p = blob.data() + pos;
      Extent e{.dev = LoadLE32(p),
               .start = LoadLE64(p + 4),
               .len = LoadLE64(p + 12),
               .cache_offset = LoadLE64(p + 20),
               .gen = p[28],
               .dirty = true,
               .epoch = LoadLE64(p + 29)};
      if (e.len == 0 || e.start % kIndexBlock || e.len % kIndexBlock) return bad();
      KeptAddLocked(sh, e);
      // Its bucket's bytes came with the dirty section; the device's total
      // counts only the tree's stripes there.
      sh->dirty_devs[e.dev] += e.len;
    }
  }
  if (pos != blob.size()) return bad();
  return Status::OK();
}

}  // namespace ubcache
