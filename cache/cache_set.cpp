// SPDX-License-Identifier: Apache-2.0
#include "cache/cache_set.h"

#include <algorithm>
#include <chrono>

#include "btree/mem_node_store.h"
#include "cache/backing_durability.h"
#include "cache/bucket_table.h"
#include "backend/sync_io.h"
#include "util/aligned_buffer.h"
#include "util/endian.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/size.h"
#include "util/thread.h"

namespace ubcache {

namespace {
constexpr uint32_t kNodeSize = 64 * 1024;
}  // namespace

Result<std::unique_ptr<BucketAllocator>> CacheSet::MakeAllocator(BlockDevice* dev,
                                                                 const Options& o) {
  if (o.bucket_size < 64 * 1024 || (o.bucket_size & (o.bucket_size - 1)))
    return Status::InvalidArgument("bucket size must be a power of two >= 64 KiB");
  uint64_t nbuckets = dev->size() / o.bucket_size;
  uint64_t first = (o.reserved_bytes + o.bucket_size - 1) / o.bucket_size;
  BucketAllocator::Options bo;
  bo.bucket_size = o.bucket_size;
  bo.nbuckets = static_cast<uint32_t>(nbuckets);
  bo.first_bucket = static_cast<uint32_t>(first);
  // Enough free buckets for a checkpoint's nodes (two levels of 16 shards)
  // whatever else has taken the cache: with one node per bucket that is 32.
  uint64_t slots = std::max<uint64_t>(1, o.bucket_size / kNodeSize);
  // (At most an eighth of a tiny cache.)
  bo.metadata_reserve = static_cast<uint32_t>(std::max<uint64_t>(2, std::min<uint64_t>(32 / slots, nbuckets / 8)));
  bo.writers = Reactor::kMaxReactors;
  if (nbuckets < first + bo.metadata_reserve + 4)
    return Status::InvalidArgument(dev->spec() + ": too small for a cache (" +
                                   FormatSize(dev->size()) + " with " +
                                   FormatSize(o.bucket_size) + " buckets)");
  return std::make_unique<BucketAllocator>(bo);
}

Result<std::unique_ptr<CacheSet>> CacheSet::Create(BlockDevice* cache_dev, Options o) {
  std::unique_ptr<CacheSet> set(new CacheSet(cache_dev, o));
  UB_ASSIGN_OR_RETURN(set->buckets_, MakeAllocator(cache_dev, o));
  set->knobs_.btree_cache_size = o.btree_cache_size;
  set->store_ = std::make_unique<MemNodeStore>();
  UB_ASSIGN_OR_RETURN(set->index_, ExtentIndex::Create(set->store_.get(), set->IndexOptions()));
  set->StartThreads();
  const auto& bo = set->buckets_->options();
  UB_INFO("cache set on {}: {} buckets of {}", cache_dev->Describe(), bo.nbuckets - bo.first_bucket,
          FormatSize(o.bucket_size));
  return set;
}

Result<std::unique_ptr<CacheSet>> CacheSet::Open(BlockDevice* cache_dev, const CacheSuperblock& sb,
                                                 Options o) {
  uint64_t t0 = NowNanos();
  o.bucket_size = sb.bucket_size;
  o.reserved_bytes = sb.bucket_offset(sb.data_bucket());
  std::unique_ptr<CacheSet> set(new CacheSet(cache_dev, o));
  set->knobs_.btree_cache_size = o.btree_cache_size;
  set->persistent_ = true;
  set->set_uuid_ = sb.set_uuid;
  set->set_id_ = Hash64(sb.set_uuid.data(), sb.set_uuid.size());
  {
    MutexLock l(&set->sb_mu_);
    set->sb_ = sb;
  }
  bool can_recover = sb.has_warm_state() && !sb.index_root.empty() && sb.bucket_table_len != 0;
  if (can_recover) {
    Status st = set->Recover();
    if (st.ok()) {
      set->warm_ = true;
    } else {
      UB_ERROR("cache {}: cannot recover the saved index ({}); starting cold — cached data, "
               "dirty data included, is dropped",
               cache_dev->spec(), st.ToString());
      set->index_.reset();
    }
  } else {
    UB_INFO("cache {}: {}; starting cold (empty index)", cache_dev->spec(),
            !sb.has_warm_state() ? "formatted by an older ubcache (no saved index)" : "no saved index");
  }
  if (!set->warm_) UB_RETURN_IF_ERROR(set->StartCold());
  // A recovered allocator has no free bucket (a saved free one may have been
  // written since): reclaim the first batch, gens journaled, before serving.
  if (set->warm_) set->buckets_->Refill(set->knobs_.replacement.load());
  set->startup_.micros = (NowNanos() - t0) / 1000;
  set->startup_.bytes_read = set->disk_store_->counters().bytes_read.load();
  auto ist = set->index_->stats();
  set->startup_.node_reads = ist.node_reads;
  // A checkpoint writes the bucket table, the epochs' state inside it, into
  // a journal half (WriteCheckpoint): that state may take half of it, the
  // rest of the table (buckets, nodes, dirty stripes) and slack the other.
  set->index_->SetEpochStateBudget(set->jhalf_ / 2);
  set->StartThreads();
  const auto& bo = set->buckets_->options();
  UB_INFO("cache set {} on {}: {} buckets of {}, {} start: {} extents, read {} bytes ({}: {} node "
          "reads, bucket table {}) in {:.1f} ms",
          FormatUuid(sb.set_uuid), cache_dev->Describe(), bo.nbuckets - bo.first_bucket,
          FormatSize(o.bucket_size), set->warm_ ? "warm" : "cold", ist.extents,
          set->startup_.bytes_read, FormatSize(set->startup_.bytes_read), set->startup_.node_reads,
          FormatSize(set->startup_.table_bytes), set->startup_.micros / 1000.0);
  return set;
}

ExtentIndex::Options CacheSet::IndexOptions() {
  ExtentIndex::Options io;
  io.cache_bytes = o_.btree_cache_size;
  io.set_id = set_id_;
  io.bucket_bytes = o_.bucket_size;
  // An unformatted cache's index lives for one run and is never replayed:
  // it keeps no journal, else its pending ops would grow with every write
  // (nothing commits them — Commit() is a no-op for such a set).
  io.journaled = persistent_;
  // Called under an index shard lock: atomics only.
  io.on_dirty = [this](uint64_t bucket, int64_t delta) {
    // Dirty bytes leave a bucket (overwritten, cleaned, moved) only once the
    // index change that removed them is durable: reclaimed before that, a
    // crash would replay the old dirty pointer into a bucket whose new gen
    // is already journaled — stale, and the data lost.
    if (delta < 0 && persistent_) {
      MutexLock l(&undirty_mu_);
      undirty_.emplace_back(static_cast<uint32_t>(bucket), delta);
      return;
    }
    buckets_->AddDirty(static_cast<uint32_t>(bucket), delta);
  };
  // A serving reactor's eviction writes no node: housekeeping writes the
  // dirty ones it left over budget (a leaf lock under a shard lock).
  io.wake_writer = [this] {
    {
      MutexLock l(&hk_mu_);
      hk_write_nodes_ = true;
    }
    hk_cv_.Signal();
  };
  // Replay of an unconfirmed (soft) journal entry: is the data there?
  io.check_data = [this](const Extent& e, uint64_t hash) {
    AlignedBuffer buf(e.len);
    Status st = SyncRead(*cache_dev_, e.cache_offset, e.len, buf.data());
    return st.ok() && Hash64(buf.data(), e.len) == hash;
  };
  // The checkpoint's table (and ApplyGens) left every bucket filled after it
  // as an empty data bucket of the lowest priority, first in line for
  // reclaim: the replayed extents in it would be dropped at once.
  io.on_replayed_insert = [this](const Extent& e) { buckets_->Touch(buckets_->BucketOf(e.cache_offset)); };
  return io;
}

Status CacheSet::MakeStore(unsigned journal_half) {
  index_.reset();  // the index uses the store, the store the allocator
  store_.reset();
  disk_store_ = nullptr;
  UB_ASSIGN_OR_RETURN(buckets_, MakeAllocator(cache_dev_, o_));
  CacheSuperblock sb;
  {
    MutexLock l(&sb_mu_);
    sb = sb_;
  }
  // The journal area holds two journals, one live: a checkpoint starts the
  // other one (with its bucket table) and then names it in the superblock.
  jstart_ = sb.bucket_offset(sb.first_bucket);
  jhalf_ = sb.journal_buckets * sb.bucket_size / 2 / sb.block_size * sb.block_size;
  active_half_ = journal_half;
  BucketNodeStore::Options so;
  so.node_size = static_cast<uint32_t>(std::min<uint64_t>(kNodeSize, sb.bucket_size));
  so.block_size = sb.block_size;
  so.journal_offset = jstart_ + jhalf_ * journal_half;
  so.journal_bytes = jhalf_;
  so.set_id = set_id_;
  UB_ASSIGN_OR_RETURN(auto store, BucketNodeStore::Create(cache_dev_, buckets_.get(), so));
  disk_store_ = store.get();
  store_ = std::move(store);
  // A checkpoint switches journals itself (WriteCheckpoint): the index's
  // trim after it has nothing left to do.
  disk_store_->SetTrimHook([] { return Status::OK(); });
  buckets_->SetGenPersister(
      [this](const std::vector<std::pair<uint32_t, uint8_t>>& g) { return PersistGens(g); });
  return Status::OK();
}

Status CacheSet::PersistGens(const std::vector<std::pair<uint32_t, uint8_t>>& gens) {
  // kBucketGens payload: u32 count, then count x {u32 bucket, u8 gen}.
  std::vector<uint8_t> p(4 + 5 * gens.size());
  StoreLE32(p.data(), static_cast<uint32_t>(gens.size()));
  for (size_t i = 0; i < gens.size(); i++) {
    StoreLE32(p.data() + 4 + 5 * i, gens[i].first);
    p[4 + 5 * i + 4] = gens[i].second;
  }
  MutexLock g(&gen_mu_);
  Status st = disk_store_->journal().Append(Journal::Kind::kBucketGens, p.data(), p.size());
  if (st.code() == Status::Code::kNoSpace) {
    MutexLock l(&jmu_);
    jcv_.SignalAll();  // the journal thread checkpoints when it is this full
  }
  return st;
}

namespace {
Result<std::vector<std::pair<uint32_t, uint8_t>>> DecodeGens(const std::vector<uint8_t>& p) {
  if (p.size() < 4 || p.size() != 4 + 5 * uint64_t{LoadLE32(p.data())})
    return Status::Corruption("cache journal: bad bucket gens record");
  std::vector<std::pair<uint32_t, uint8_t>> out(LoadLE32(p.data()));
  for (size_t i = 0; i < out.size(); i++) out[i] = {LoadLE32(p.data() + 4 + 5 * i), p[4 + 5 * i + 4]};
  return out;
}
}  // namespace

Status CacheSet::Recover() {
  CacheSuperblock sb;
  {
    MutexLock l(&sb_mu_);
    sb = sb_;
  }
  UB_ASSIGN_OR_RETURN(IndexRoot root, IndexRoot::Decode(sb.index_root.data(), sb.index_root.size()));
  uint64_t half_bytes = sb.journal_buckets * sb.bucket_size / 2 / sb.block_size * sb.block_size;
  uint64_t first = sb.bucket_offset(sb.first_bucket);
  if (sb.bucket_table_offset != first && sb.bucket_table_offset != first + half_bytes)
    return Status::Corruption("superblock: the journal it names (" + std::to_string(sb.bucket_table_offset) +
                              ") is neither half of the journal area (a cache formatted by an older ubcache)");
  UB_RETURN_IF_ERROR(MakeStore(sb.bucket_table_offset == first ? 0 : 1));
  Journal& j = disk_store_->journal();
  UB_RETURN_IF_ERROR(j.Open());
  std::vector<Journal::Record> recs;
  UB_RETURN_IF_ERROR(j.Read(&recs));
  if (recs.empty() || recs[0].kind != Journal::Kind::kTable)
    return Status::Corruption("cache journal: does not begin with a bucket table");
  startup_.table_bytes = recs[0].payload.size();
  UB_ASSIGN_OR_RETURN(BucketTable t, BucketTable::Decode(recs[0].payload.data(), recs[0].payload.size(), set_id_));
  if (t.index_generation != root.generation || t.node_size != store_->node_size())
    return Status::Corruption("bucket table: not the table of the saved index (generation " +
                              std::to_string(t.index_generation) + ", root's " +
                              std::to_string(root.generation) + ")");
  UB_RETURN_IF_ERROR(buckets_->RestoreState(t.buckets));
  // Generations made durable after the checkpoint, in order.
  uint64_t gen_records = 0;
  for (const Journal::Record& r : recs) {
    if (r.kind != Journal::Kind::kBucketGens) continue;
    UB_ASSIGN_OR_RETURN(auto gens, DecodeGens(r.payload));
    buckets_->ApplyGens(gens);
    gen_records++;
  }
  UB_RETURN_IF_ERROR(disk_store_->RestoreNodes(t.nodes));
  {
    MutexLock l(&dev_mu_);
    devices_.clear();
    for (const auto& d : t.devices) devices_.emplace_back(d.uuid, d.dev);
    next_dev_ = t.next_dev;
  }
  // The index replays its own records (the entries after root.journal_seq)
  // and restores the dirty accounting of the checkpoint before them.
  UB_ASSIGN_OR_RETURN(index_, ExtentIndex::Open(store_.get(), root, IndexOptions(), &t.dirty));
  ReleaseUndirty(TakeUndirty());  // replayed: durable already
  // From here on the device is no longer clean (the flag is informational:
  // every start recovers the same way).
  UB_RETURN_IF_ERROR(WriteSuperblock(&root, false, sb.bucket_table_offset, sb.bucket_table_len));
  UB_INFO("cache {}: recovered {} checkpoint {}: {} journal records replayed ({} of bucket gens)",
          cache_dev_->spec(), sb.clean() ? "after a clean shutdown," : "after a crash,",
          root.generation, recs.size() - 1, gen_records);
  return Status::OK();
}

Status CacheSet::StartCold() {
  UB_RETURN_IF_ERROR(MakeStore(0));
  {
    MutexLock l(&dev_mu_);
    devices_.clear();
    next_dev_ = 0;
  }
  {
    MutexLock l(&sb_mu_);
    sb_.feature_incompat |= CacheSuperblock::kIncompatWarmState;
    sb_.index_root.clear();
  }
  // No root: a crash before the checkpoint below is cold again.
  UB_RETURN_IF_ERROR(WriteSuperblock(nullptr, false, 0, 0));
  // Old journal records (and old nodes) stay on the device but can never be
  // read: a new start record with a new nonce begins the journal, and the
  // fresh index reads no node it has not written.
  UB_RETURN_IF_ERROR(disk_store_->ResetJournal());
  UB_ASSIGN_OR_RETURN(index_, ExtentIndex::Create(store_.get(), IndexOptions()));
  // The first checkpoint: from now on every start recovers.
  return WriteCheckpoint(false);
}

Status CacheSet::WriteSuperblock(const IndexRoot* root, bool clean, uint64_t table_off,
                                 uint64_t table_len) {
  return ChangeSuperblock([&](CacheSuperblock& sb) {
    if (root) sb.index_root = root->Encode();
    sb.flags = clean ? (sb.flags | CacheSuperblock::kFlagClean) : (sb.flags & ~CacheSuperblock::kFlagClean);
    sb.bucket_table_offset = table_off;
    sb.bucket_table_len = table_len;
  });
}

Status CacheSet::ChangeSuperblock(const std::function<void(CacheSuperblock&)>& change) {
  MutexLock l(&sb_mu_);
  CacheSuperblock sb = sb_;
  sb.seq++;
  sb.feature_incompat |= CacheSuperblock::kIncompatWarmState;
  change(sb);
  Status st = ValidateCacheSuperblock(sb, cache_dev_->size(), cache_dev_->logical_block_size());
  if (!st.ok()) return st;
  AlignedBuffer buf(kSuperblockSize);
  EncodeCacheSuperblock(sb, SuperblockBlock(buf.data(), kSuperblockSize));
  // Everything the superblock points at, and every cached data write that
  // completed before, is on media before it (bcache: PREFLUSH | FUA).
  UB_RETURN_IF_ERROR(disk_store_->Io({IoOp::kFlush, 0, 0, 0, nullptr}));
  UB_RETURN_IF_ERROR(
      disk_store_->Io({IoOp::kWrite, kIoFua, kSuperblockOffset, kSuperblockSize, buf.data()}));
  UB_RETURN_IF_ERROR(disk_store_->Io({IoOp::kFlush, 0, 0, 0, nullptr}));
  sb_ = sb;
  return Status::OK();
}

Status CacheSet::RecordFence(const Uuid& backing) {
  if (!persistent_ || IsZeroUuid(backing)) return Status::OK();
  if (FencedSince(backing)) return Status::OK();
  {
    MutexLock l(&sb_mu_);
    if (sb_.fences.size() >= CacheSuperblock::kMaxFences)
      return Status::NoSpace("the cache superblock holds " + std::to_string(CacheSuperblock::kMaxFences) +
                             " fences already");
  }
  uint64_t now = static_cast<uint64_t>(time(nullptr));
  return ChangeSuperblock([&](CacheSuperblock& sb) {
    sb.fences.push_back({backing, now});
    sb.feature_incompat |= CacheSuperblock::kIncompatFences;
  });
}

Status CacheSet::ClearFence(const Uuid& backing) {
  if (!FencedSince(backing)) return Status::OK();
  return ChangeSuperblock([&](CacheSuperblock& sb) {
    std::erase_if(sb.fences, [&](const CacheSuperblock::Fence& f) { return f.backing == backing; });
    if (sb.fences.empty()) sb.feature_incompat &= ~CacheSuperblock::kIncompatFences;
  });
}

std::optional<uint64_t> CacheSet::FencedSince(const Uuid& backing) {
  MutexLock l(&sb_mu_);
  for (const auto& f : sb_.fences)
    if (f.backing == backing) return f.since;
  return std::nullopt;
}

Status CacheSet::DropDevice(uint32_t dev, uint64_t size) {
  constexpr uint64_t kStep = 64 << 20;
  for (uint64_t off = 0; off < size; off += kStep)
    UB_RETURN_IF_ERROR(index_->Invalidate(dev, off, std::min(kStep, size - off)));
  return Status::OK();
}

std::vector<std::pair<uint32_t, int64_t>> CacheSet::TakeUndirty() {
  MutexLock l(&undirty_mu_);
  std::vector<std::pair<uint32_t, int64_t>> out;
  out.swap(undirty_);
  return out;
}

void CacheSet::ReleaseUndirty(const std::vector<std::pair<uint32_t, int64_t>>& taken) {
  for (auto [b, d] : taken) buckets_->AddDirty(b, d);
}

Status CacheSet::Durably(const std::function<Status()>& commit) {
  // Everything taken here was recorded with its op, under that op's shard
  // lock, before this commit swaps the shards' pending ops: the commit
  // makes all of those ops durable.
  auto taken = TakeUndirty();
  Status st = commit();
  if (st.ok()) {
    ReleaseUndirty(taken);
  } else {
    MutexLock l(&undirty_mu_);
    undirty_.insert(undirty_.end(), taken.begin(), taken.end());
  }
  return st;
}

Status CacheSet::Checkpoint() {
  return Durably([this] { return WriteCheckpoint(false); });
}

Status CacheSet::WriteCheckpoint(bool clean) {
  if (!persistent_) return index_->Checkpoint().status();
  SoftCommitsExcluded ex(this);
  MutexLock one(&ckpt_mu_);
  auto root = index_->Checkpoint(ExtentIndex::PersistStateFn(
      [this, clean](const IndexRoot& r, const ExtentIndex::CheckpointState& state) -> Status {
        // Rule 9: the snapshot's nodes hold provisional clean copies without
        // their mark; their backing data is durable before the root is.
        UB_RETURN_IF_ERROR(FlushBackingsForCheckpoint());
        BucketTable t;
        t.set_id = set_id_;
        t.index_generation = r.generation;
        t.node_size = store_->node_size();
        // Nodes the new root no longer reaches are freed once it is durable:
        // they are not saved as allocated. (Taken before gen_mu_: AllocNode
        // holds the store's lock while the allocator may journal gens.)
        std::vector<uint64_t> nodes = disk_store_->AllocatedNodes();
        std::vector<uint64_t> gone = state.superseded;
        std::sort(gone.begin(), gone.end());
        for (uint64_t a : nodes)
          if (!std::binary_search(gone.begin(), gone.end(), a)) t.nodes.push_back(a);
        {
          MutexLock l(&dev_mu_);
          for (const auto& [uuid, dev] : devices_) t.devices.push_back({uuid, dev});
          t.next_dev = next_dev_;
        }
        t.dirty = state.dirty;
        MutexLock g(&gen_mu_);
        t.buckets = buckets_->ExportState();
        std::vector<uint8_t> bytes = t.Encode();
        if (bytes.size() + 64 * 1024 > jhalf_)
          return Status::NoSpace("bucket table (" + FormatSize(bytes.size()) +
                                 ") does not fit half of the journal area (" + FormatSize(jhalf_) + ")");
        // The other half: the live one stays intact until the superblock names
        // the new one, so a crash recovers one or the other.
        unsigned next = 1 - active_half_;
        uint64_t old_off = jstart_ + jhalf_ * active_half_, new_off = jstart_ + jhalf_ * next;
        Journal& j = disk_store_->journal();
        Status st = j.SwitchTo(new_off, jhalf_, {{Journal::Kind::kTable, bytes}});
        if (st.ok()) st = WriteSuperblock(&r, clean, new_off, bytes.size());
        if (!st.ok()) {
          // Back to the live journal, appending after its last record.
          Status back = j.SwitchTo(old_off, jhalf_, {}, true);
          if (!back.ok()) UB_ERROR("cache journal: cannot reopen the live journal: {}", back.ToString());
          return st;
        }
        active_half_ = next;
        return Status::OK();
      }));
  return root.status();
}

void CacheSet::RegisterBacking(uint32_t dev, BackingDurability* b) {
  MutexLock l(&backing_mu_);
  backings_.emplace_back(dev, b);
}

void CacheSet::UnregisterBacking(uint32_t dev, BackingDurability* b) {
  MutexLock l(&backing_mu_);
  std::erase(backings_, std::make_pair(dev, b));
}

Status CacheSet::SyncIoOn(BlockDevice* dev, const IoRequest& req) {
  if (!disk_store_) return Status::InvalidArgument("cache set: no I/O thread (not formatted)");
  return disk_store_->IoOn(dev, req);
}

Status CacheSet::FlushBackingsForCheckpoint() {
  MutexLock l(&backing_mu_);
  for (const auto& [dev, b] : backings_) UB_RETURN_IF_ERROR(b->FlushForCheckpoint());
  return Status::OK();
}

bool CacheSet::CleanCopyDurable(uint32_t dev) {
  MutexLock l(&backing_mu_);
  for (const auto& [d, b] : backings_)
    if (d == dev) return b->CleanCopyDurable();
  // Not served in this run: no write of this run reached it, and replay
  // dropped every copy an earlier run had not made durable.
  return true;
}

void CacheSet::CommitAsync(IoDone done, bool soft) {
  if (!persistent_) {
    Reactor::Current()->DeferDone(std::move(done), Status::OK());
    return;
  }
  // A soft commit (a writeback write's ack) is led by this reactor when the
  // slot is free: its record is written on this ring and answered here, no
  // hop through ub-journal and ub-nodeio. Deferred, so that the requests
  // this reactor serves in the same turn join the batch.
  bool lead = false, wake = false;
  {
    MutexLock l(&jmu_);
    waiters_.push_back({std::move(done), Reactor::Current(), soft});
    if (!soft) hard_waiting_++;
    if (!soft_inflight_ && MayLeadLocked()) {
      soft_inflight_ = lead = true;
    } else {
      // The leader in flight takes it next; else the journal thread does.
      wake = !soft_inflight_ || !soft;
    }
  }
  if (lead) Reactor::Current()->Defer([this] { LeadSoftCommit(); });
  if (wake) jcv_.SignalAll();
}

CacheSet::CommitStats CacheSet::commit_stats() const {
  CommitStats c;
  c.reactor_commits = reactor_commits_.load(std::memory_order_relaxed);
  c.handed_back = handed_back_.load(std::memory_order_relaxed);
  if (disk_store_) c.io_thread_calls = disk_store_->counters().io_thread_calls.load(std::memory_order_relaxed);
  return c;
}

void CacheSet::LeadSoftCommit() {
  std::vector<CommitWaiter> batch;
  {
    MutexLock l(&jmu_);
    // Ours since CommitAsync or the last EndSoftCommit; a hard waiter may
    // have come since: everything goes to the journal thread then.
    if (!MayLeadLocked() || waiters_.empty()) {
      soft_inflight_ = false;
      jcv_.SignalAll();
      return;
    }
    batch.swap(waiters_);
  }
  // The journal may be busy with a synchronous append (a gens record, a
  // backing record): never wait for it here.
  Journal& j = disk_store_->journal();
  if (!j.BeginAsync()) {
    HandBack(std::move(batch));
    return;
  }
  auto c = std::make_unique<ExtentIndex::SoftCommit>();
  index_->BeginSoftCommit(c.get());  // an error stays in c->sticky
  if (c->entry.empty()) {
    // Nothing to write: every change before these waiters is in an entry
    // already written (the slot kept any other commit out).
    j.CancelAsync();
    EndSoftCommit(std::move(batch), c.get(), Status::OK());
    return;
  }
  // The entry stays with `c` until the record is written (or not: then
  // EndSoftCommit gives the batch to the journal thread).
  const std::vector<uint8_t>& entry = c->entry;
  disk_store_->AppendJournalSoftAsync(
      entry, [this, batch = std::move(batch), c = std::move(c)](Status written) mutable {
        EndSoftCommit(std::move(batch), c.get(), std::move(written));
      });
}

void CacheSet::EndSoftCommit(std::vector<CommitWaiter> batch, ExtentIndex::SoftCommit* c, Status st) {
  Status result = index_->EndSoftCommit(c, st.ok());
  if (!st.ok()) {
    // The record is taken back and its ops are pending again: the journal
    // thread writes them (synchronously) and answers.
    UB_WARN("cache journal: soft commit on the reactor failed: {}; the journal thread retries", st.ToString());
    HandBack(std::move(batch));
    return;
  }
  reactor_commits_.fetch_add(1, std::memory_order_relaxed);
  // The next batch, if any, is led by the reactor of its first waiter: one
  // that waits for an answer keeps running until it has it (this one may
  // have served its last request — a test's thread, a tool's).
  Reactor* next = nullptr;
  bool wake = false;
  const bool half_full = disk_store_->journal_used() > disk_store_->journal_capacity() / 2;  // not under jmu_
  {
    MutexLock l(&jmu_);
    if (half_full) checkpoint_wanted_ = true;
    if (!waiters_.empty() && MayLeadLocked()) {
      next = waiters_.front().reactor;  // the slot stays held, for it
    } else {
      soft_inflight_ = false;
      // Only when someone waits for what just changed: excluders (the
      // journal thread among them) for the slot, the journal thread for
      // waiters no reactor may lead or for the checkpoint. Not after every
      // batch: each wakeup of a journal thread with nothing to do cost a
      // futex wake on this reactor and a context switch on that thread.
      wake = excluded_ > 0 || !waiters_.empty() || checkpoint_wanted_;
    }
  }
  if (wake) jcv_.SignalAll();
  Reactor* here = Reactor::Current();
  if (next == here)
    here->Defer([this] { LeadSoftCommit(); });
  else if (next)
    next->Post([this] { LeadSoftCommit(); });
  for (CommitWaiter& w : batch) {
    if (w.reactor == here)
      here->DeferDone(std::move(w.done), result);
    else
      w.reactor->Post([done = std::move(w.done), result]() mutable { done(result); });
  }
}

void CacheSet::HandBack(std::vector<CommitWaiter> batch) {
  handed_back_.fetch_add(1, std::memory_order_relaxed);
  {
    MutexLock l(&jmu_);
    // In front of newer waiters; all soft (a leader takes no hard one).
    for (CommitWaiter& w : waiters_) batch.push_back(std::move(w));
    waiters_.swap(batch);
    soft_inflight_ = false;
  }
  jcv_.SignalAll();
}

bool CacheSet::MayLeadLocked() const {
  return excluded_ == 0 && hard_waiting_ == 0 && !jstop_ && !checkpoint_wanted_;
}

void CacheSet::ExcludeSoftCommits() {
  AssertMayBlock("CacheSet::ExcludeSoftCommits");
  MutexLock l(&jmu_);
  excluded_++;
  while (soft_inflight_) jcv_.Wait(&jmu_);
}

void CacheSet::AllowSoftCommits() {
  bool wake;
  {
    MutexLock l(&jmu_);
    excluded_--;
    // Waiters queued meanwhile have no leader: the journal thread takes them.
    wake = excluded_ == 0 && !waiters_.empty();
  }
  if (wake) jcv_.SignalAll();
}

Status CacheSet::Commit() {
  if (!persistent_) return Status::OK();
  SoftCommitsExcluded ex(this);
  Status st = Durably([this] { return index_->Commit(); });
  if (st.code() == Status::Code::kNoSpace) st = Checkpoint();
  return st;
}

void CacheSet::CountIoError(const Status& st) {
  uint64_t n = io_errors_.fetch_add(1, std::memory_order_relaxed) + 1;
  uint32_t limit = knobs_.io_error_limit.load(std::memory_order_relaxed);
  if (limit == 0 || n <= limit || failed_.exchange(true)) return;
  UB_ERROR("cache {}: FAILED after {} I/O errors (io_error_limit {}; last: {}): serving the backing "
           "devices alone; ranges with dirty data answer EIO until the cache is replaced",
           cache_dev_->spec(), n, limit, st.ToString());
}

unsigned CacheSet::in_use_percent() const {
  BucketAllocator::Usage u = buckets_->usage();
  uint64_t usable = u.buckets - u.reserved;
  if (usable == 0) return 100;
  return static_cast<unsigned>((buckets_->dirty_buckets() + u.metadata) * 100 / usable);
}

void CacheSet::JournalLoop() {
  using Clock = std::chrono::steady_clock;
  MutexLock l(&jmu_);
  auto hard_due = Clock::now();
  while (!jstop_) {
    auto delay = std::chrono::milliseconds(std::max<uint32_t>(1, knobs_.journal_delay_ms.load()));
    hard_due = std::min(hard_due, Clock::now() + delay);  // the knob may have shrunk
    // Work: waiters no reactor leads (a hard one; soft ones while the slot
    // is free), a checkpoint a led commit asked for, or the hard commit due.
    while (!jstop_ && !checkpoint_wanted_ && (waiters_.empty() || (soft_inflight_ && hard_waiting_ == 0)))
      if (!jcv_.WaitUntil(&jmu_, hard_due)) break;
    if (jstop_) break;
    // The slot: the soft commit a reactor leads, if any, is written first.
    excluded_++;
    while (soft_inflight_) jcv_.Wait(&jmu_);
    // Group commit: everyone waiting now is covered by one append, since
    // their changes were made before they asked.
    std::vector<CommitWaiter> batch;
    batch.swap(waiters_);
    hard_waiting_ = 0;
    const bool wanted = checkpoint_wanted_;
    checkpoint_wanted_ = false;
    jmu_.Unlock();
    // Hard when someone needs durability (FLUSH, FUA, the writeback thread)
    // or journal_delay_ms has passed since the last hard commit; soft when
    // only writeback writes wait, to be acknowledged. A hard commit with no
    // new ops still flushes the soft entries before it (ExtentIndex::Commit).
    bool hard = Clock::now() >= hard_due;
    for (const CommitWaiter& w : batch) hard = hard || !w.soft;
    Status st = hard ? Durably([this] { return index_->Commit(); }) : index_->Commit(true);
    // The knob as it is now: this thread may have slept since the top of
    // the loop read it (reactors lead the soft commits).
    if (hard) hard_due = Clock::now() + std::chrono::milliseconds(std::max<uint32_t>(1, knobs_.journal_delay_ms.load()));
    if (st.code() == Status::Code::kNoSpace || wanted ||
        (st.ok() && disk_store_->journal_used() > disk_store_->journal_capacity() / 2)) {
      // A checkpoint also makes every change before it durable.
      Status cst = Checkpoint();
      if (st.code() == Status::Code::kNoSpace || !cst.ok()) st = cst;
    }
    if (!st.ok()) UB_WARN("cache journal: {}", st.ToString());
    for (CommitWaiter& w : batch) {
      w.reactor->Post([done = std::move(w.done), st]() mutable { done(st); });
    }
    jmu_.Lock();
    excluded_--;
  }
}

void CacheSet::StopJournal() {
  {
    MutexLock l(&jmu_);
    jstop_ = true;
  }
  jcv_.SignalAll();
  if (journal_thread_.joinable()) journal_thread_.join();
  // A soft commit a reactor leads may still be in flight, and its
  // completion uses this set: wait for it (driving this thread's own
  // reactor, which may be the one — a test's). Bounded: a reactor already
  // stopped never completes it, and then never calls back either.
  for (int i = 0; i < 5000; i++) {
    {
      MutexLock l(&jmu_);
      if (!soft_inflight_) return;
    }
    if (Reactor* r = Reactor::Current())
      r->RunOnce(false);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  UB_WARN("cache journal: a soft commit still in flight at shutdown");
}

uint32_t CacheSet::DeviceNumber(const Uuid& uuid, bool was_attached) {
  MutexLock l(&dev_mu_);
  bool named = !IsZeroUuid(uuid);
  auto it = std::find_if(devices_.begin(), devices_.end(),
                         [&](const auto& d) { return d.first == uuid; });
  if (named && was_attached && it != devices_.end()) return it->second;
  uint32_t n = next_dev_++;
  if (named) {
    if (it != devices_.end()) {
      it->second = n;
    } else {
      devices_.emplace_back(uuid, n);
    }
  }
  return n;
}

void CacheSet::StartThreads() {
  if (persistent_) {
    journal_thread_ = std::thread([this] {
      SetThreadName("ub-journal");
      JournalLoop();
    });
  }
  buckets_->StartRefill([this] { return knobs_.replacement.load(std::memory_order_relaxed); });
  hk_ = std::thread([this] {
    SetThreadName("ub-housekeep");
    // GC's moves do synchronous I/O on this thread's own ring.
    auto r = Reactor::Create(64);
    if (r.ok()) (*r)->Bind();
    Housekeeping();
  });
}

void CacheSet::StopHousekeeping() {
  StopJournal();
  {
    MutexLock l(&hk_mu_);
    hk_stop_ = true;
  }
  hk_cv_.SignalAll();
  if (hk_.joinable()) hk_.join();
  if (buckets_) buckets_->StopRefill();  // it reads knobs_, which goes before buckets_
}

CacheSet::~CacheSet() {
  StopHousekeeping();
  // The index goes before the store it uses.
  index_.reset();
  store_.reset();
}

Status CacheSet::Shutdown() {
  StopHousekeeping();
  if (!persistent_) return Status::OK();
  uint64_t t0 = NowNanos();
  // Every op since the last commit goes into the checkpoint's nodes; the
  // next start replays nothing.
  UB_RETURN_IF_ERROR(WriteCheckpoint(true));
  auto st = index_->stats();
  UB_INFO("cache set {}: clean shutdown in {:.1f} ms: {} extents", FormatUuid(set_uuid_),
          (NowNanos() - t0) / 1e6, st.extents);
  return Status::OK();
}

Result<uint64_t> CacheSet::RunGc(bool force_moving) {
  MutexLock one_at_a_time(&gc_mu_);
  BucketAllocator& buckets = *buckets_;
  std::vector<uint8_t> gens = buckets.GenSnapshot();
  uint64_t seq_at_start = buckets.fill_seq();
  // bcache's btree GC in one pass: count every bucket's live bytes and drop
  // the pointers whose bucket has been reused. The index holds no lock
  // while the callback runs, so dropping happens as the walk goes.
  std::vector<uint32_t> live(buckets.options().nbuckets, 0);
  uint64_t dropped = 0;
  Status drop_status;
  Status st = index_->ForEach([&](const Extent& e) {
    if (buckets.Valid(e.cache_offset, e.gen)) {
      live[buckets.BucketOf(e.cache_offset)] += static_cast<uint32_t>(e.len);
      return;
    }
    // Only the stale pointer itself: an extent inserted over the range since
    // the walk saw it may be dirty, the only copy of its data.
    Status s = index_->RemoveIfSame(e);
    if (!s.ok() && drop_status.ok()) drop_status = s;
    dropped++;
  });
  if (!st.ok()) return st;
  if (!drop_status.ok()) return drop_status;
  // Kept versions (write epochs, rule 12) are live until written back: not
  // in the tree, but their buckets hold data the backing device still needs.
  index_->ForEachKept([&](const Extent& e) {
    if (buckets.Valid(e.cache_offset, e.gen)) live[buckets.BucketOf(e.cache_offset)] += static_cast<uint32_t>(e.len);
  });
  buckets.MarkGcDone(gens);
  Status mst = MovingGc(live, force_moving);
  if (!mst.ok()) UB_WARN("cache moving gc: {}", mst.ToString());
  buckets.SetLiveBytes(std::move(live), seq_at_start);
  gc_runs_.fetch_add(1, std::memory_order_relaxed);
  UB_DEBUG("cache gc: dropped {} stale extents", dropped);
  return dropped;
}

Status CacheSet::MovingGc(std::vector<uint32_t>& live, bool force) {
  // bcache's moving GC: when free space runs short, the live data of buckets
  // that are mostly stale (less than half live) is copied to fresh space, so
  // reclaim can free them — otherwise dirty or scattered live extents strand
  // whole buckets. Dirty data stays dirty at its new place.
  BucketAllocator& buckets = *buckets_;
  BucketAllocator::Usage u = buckets.usage();
  uint64_t usable = u.buckets - u.reserved;
  if (!force && u.free * kMovingGcFreeDivisor >= usable) return Status::OK();
  const uint64_t bucket = o_.bucket_size;
  std::vector<uint32_t> pinned =
      buckets.PinFragmented(live, static_cast<uint32_t>(bucket / 2), kMovingGcBuckets);
  if (pinned.empty()) return Status::OK();
  std::vector<bool> is_src(buckets.options().nbuckets, false);
  for (uint32_t b : pinned) is_src[b] = true;
  std::vector<Extent> moving;
  Status st = index_->ForEach([&](const Extent& e) {
    uint32_t b = buckets.BucketOf(e.cache_offset);
    if (b < is_src.size() && is_src[b] && buckets.Valid(e.cache_offset, e.gen)) moving.push_back(e);
  });
  uint64_t moved = 0, bytes = 0;
  ReplacementPolicy policy = knobs_.replacement.load(std::memory_order_relaxed);
  for (const Extent& e : moving) {
    if (!st.ok()) break;
    AlignedBuffer buf(e.len);
    st = SyncRead(*cache_dev_, e.cache_offset, e.len, buf.data());
    if (!st.ok()) {
      CountIoError(st);
      break;
    }
    auto space = buckets.Allocate(Reactor::Current()->id(), e.len, policy);
    if (!space.ok()) break;  // no room to move into: try again next GC
    st = SyncWrite(*cache_dev_, space->cache_offset, e.len, buf.data());
    if (st.ok()) {
      uint64_t n = 0;
      // Checked: a soft commit may carry the move (see ExtentIndex::Commit).
      // Rule 9: a clean copy moved is as durable as its backing data now.
      st = index_->MoveIfSame(e, space->cache_offset, space->gen, &n, buf.data(),
                              !e.dirty && !CleanCopyDurable(e.dev));
      moved += n ? 1 : 0;
      bytes += n;
    } else {
      CountIoError(st);
    }
    buckets.WriteDone(space->bucket);  // after the move's insert
  }
  // The moves are durable before the old buckets can be reclaimed (their
  // new gens journaled and their space reused): else a crash would replay
  // the old pointers into reused buckets, stale — and lose dirty data.
  Status cst = Commit();
  if (st.ok()) st = cst;
  for (uint32_t b : pinned) {
    if (cst.ok()) live[b] = 0;  // empty now, unless written since: reclaim re-checks
    buckets.WriteDone(b);
  }
  moving_gc_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  UB_INFO("cache moving gc: {} extents ({}) moved out of {} fragmented buckets", moved, FormatSize(bytes),
          pinned.size());
  return st;
}

void CacheSet::Housekeeping() {
  uint64_t ticks = 0;
  auto next_tick = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  MutexLock l(&hk_mu_);
  for (;;) {
    if (!hk_write_nodes_ && hk_jobs_.empty() && !hk_stop_) hk_cv_.WaitUntil(&hk_mu_, next_tick);
    std::vector<Callback<void()>> jobs;
    jobs.swap(hk_jobs_);
    bool stop = hk_stop_;
    bool write_nodes = hk_write_nodes_;
    hk_write_nodes_ = false;
    bool tick = !stop && std::chrono::steady_clock::now() >= next_tick;
    hk_mu_.Unlock();  // the work runs without it: StopHousekeeping may signal meanwhile
    for (auto& job : jobs) job();  // even when stopping: each answers a request
    if (stop) {
      hk_mu_.Lock();
      break;
    }
    if (write_nodes) {
      // Index nodes that serving reactors could not write (ExtentIndex,
      // "Without I/O").
      Status st = index_->WriteOverBudget();
      if (!st.ok()) UB_WARN("cache index: writing nodes over budget: {}", st.ToString());
    }
    if (tick) {
      next_tick = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      HousekeepingTick(ticks++);
    }
    hk_mu_.Lock();
  }
}

void CacheSet::RunMayWait(Callback<void()> fn) {
  {
    MutexLock l(&hk_mu_);
    hk_jobs_.push_back(std::move(fn));
  }
  hk_cv_.Signal();
}

void CacheSet::HousekeepingTick(uint64_t tick) {
  BucketAllocator::Usage u = buckets_->usage();
  bool short_of_space = u.free * kMovingGcFreeDivisor < u.buckets - u.reserved &&
                        tick % kMovingGcEverySeconds == 0;  // moving GC's turn
  if (buckets_->MaxGenLead() >= BucketAllocator::kMaxGenLead / 2 || short_of_space) {
    auto dropped = RunGc();
    if (!dropped.ok()) UB_WARN("cache gc: {}", dropped.status().ToString());
  }
  // bcache ages priorities so that LRU means "least recently used".
  if ((tick + 1) % 30 == 0) buckets_->DecayPriorities();
}

}  // namespace ubcache
