#include "cache/cache_set.h"

#include <algorithm>
#include <chrono>

#include "btree/mem_node_store.h"
#include "cache/bucket_table.h"
#include "util/aligned_buffer.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/size.h"
#include "util/thread.h"

namespace ubcache {

namespace {
constexpr uint32_t kNodeSize = 64 * 1024;
constexpr uint64_t kMaxJournalBeforeCheckpoint = 64u << 20;
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
  bo.metadata_reserve = 2;
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
  ExtentIndex::Options io;
  io.cache_bytes = o.btree_cache_size;
  UB_ASSIGN_OR_RETURN(set->index_, ExtentIndex::Create(set->store_.get(), io));
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
  bool try_warm = sb.has_warm_state() && sb.clean() && !sb.index_root.empty() &&
                  sb.bucket_table_len != 0;
  if (try_warm) {
    Status st = set->OpenWarm();
    if (st.ok()) {
      set->warm_ = true;
    } else {
      UB_WARN("cache {}: cannot open the saved index ({}); starting cold", cache_dev->spec(),
              st.ToString());
      set->index_.reset();
    }
  } else {
    UB_INFO("cache {}: {}; starting cold (empty index)", cache_dev->spec(),
            !sb.has_warm_state() ? "formatted by an older ubcache (no warm-restart state)"
            : !sb.clean()        ? "not shut down cleanly"
                                 : "no saved index");
  }
  if (!set->warm_) UB_RETURN_IF_ERROR(set->StartCold());
  set->startup_.micros = (NowNanos() - t0) / 1000;
  set->startup_.bytes_read = set->disk_store_->counters().bytes_read.load();
  auto ist = set->index_->stats();
  set->startup_.node_reads = ist.node_reads;
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

Status CacheSet::MakeStore() {
  index_.reset();  // the index uses the store, the store the allocator
  store_.reset();
  disk_store_ = nullptr;
  UB_ASSIGN_OR_RETURN(buckets_, MakeAllocator(cache_dev_, o_));
  CacheSuperblock sb;
  {
    MutexLock l(&sb_mu_);
    sb = sb_;
  }
  BucketNodeStore::Options so;
  so.node_size = static_cast<uint32_t>(std::min<uint64_t>(kNodeSize, sb.bucket_size));
  so.block_size = sb.block_size;
  so.journal_offset = sb.bucket_offset(sb.first_bucket);
  so.journal_bytes = sb.journal_buckets * sb.bucket_size;
  so.set_id = set_id_;
  UB_ASSIGN_OR_RETURN(auto store, BucketNodeStore::Create(cache_dev_, buckets_.get(), so));
  disk_store_ = store.get();
  store_ = std::move(store);
  return Status::OK();
}

Status CacheSet::OpenWarm() {
  CacheSuperblock sb;
  {
    MutexLock l(&sb_mu_);
    sb = sb_;
  }
  UB_ASSIGN_OR_RETURN(IndexRoot root, IndexRoot::Decode(sb.index_root.data(), sb.index_root.size()));
  UB_RETURN_IF_ERROR(MakeStore());
  // The bucket table.
  uint64_t blk = sb.block_size;
  uint64_t span = (sb.bucket_table_len + blk - 1) / blk * blk;
  AlignedBuffer buf(span);
  UB_RETURN_IF_ERROR(disk_store_->Io({IoOp::kRead, 0, sb.bucket_table_offset, span, buf.data()}));
  startup_.table_bytes = span;
  UB_ASSIGN_OR_RETURN(BucketTable t, BucketTable::Decode(buf.data(), sb.bucket_table_len, set_id_));
  if (t.index_generation != root.generation || t.node_size != store_->node_size())
    return Status::Corruption("bucket table: not the table of the saved index (generation " +
                              std::to_string(t.index_generation) + ", root's " +
                              std::to_string(root.generation) + ")");
  UB_RETURN_IF_ERROR(buckets_->RestoreState(t.buckets));
  UB_RETURN_IF_ERROR(disk_store_->RestoreNodes(t.nodes));
  {
    MutexLock l(&dev_mu_);
    devices_.clear();
    for (const auto& d : t.devices) devices_.emplace_back(d.uuid, d.dev);
    next_dev_ = t.next_dev;
  }
  // From here on the device is no longer clean: a crash at any later point
  // must start cold, because buckets will be reused and nodes rewritten
  // without the table following.
  UB_RETURN_IF_ERROR(WriteSuperblock(&root, false, 0, 0));
  UB_RETURN_IF_ERROR(disk_store_->OpenJournal());
  ExtentIndex::Options io;
  io.cache_bytes = o_.btree_cache_size;
  io.set_id = set_id_;
  UB_ASSIGN_OR_RETURN(index_, ExtentIndex::Open(store_.get(), root, io));
  return Status::OK();
}

Status CacheSet::StartCold() {
  UB_RETURN_IF_ERROR(MakeStore());
  {
    MutexLock l(&dev_mu_);
    devices_.clear();
    next_dev_ = 0;
  }
  // Not clean, no root, no table: a crash from here on is cold again.
  {
    MutexLock l(&sb_mu_);
    sb_.feature_incompat |= CacheSuperblock::kIncompatWarmState;
    sb_.index_root.clear();
  }
  UB_RETURN_IF_ERROR(WriteSuperblock(nullptr, false, 0, 0));
  // Old journal records (and old nodes) stay on the device but can never be
  // read: a new start record with a new nonce begins the journal, and the
  // fresh index reads no node it has not written.
  UB_RETURN_IF_ERROR(disk_store_->ResetJournal());
  ExtentIndex::Options io;
  io.cache_bytes = o_.btree_cache_size;
  io.set_id = set_id_;
  UB_ASSIGN_OR_RETURN(index_, ExtentIndex::Create(store_.get(), io));
  return Status::OK();
}

Status CacheSet::WriteSuperblock(const IndexRoot* root, bool clean, uint64_t table_off,
                                 uint64_t table_len) {
  MutexLock l(&sb_mu_);
  CacheSuperblock sb = sb_;
  sb.seq++;
  sb.feature_incompat |= CacheSuperblock::kIncompatWarmState;
  if (root) sb.index_root = root->Encode();
  sb.flags = clean ? (sb.flags | CacheSuperblock::kFlagClean) : (sb.flags & ~CacheSuperblock::kFlagClean);
  sb.bucket_table_offset = table_off;
  sb.bucket_table_len = table_len;
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

Status CacheSet::Checkpoint() {
  if (!persistent_) return index_->Checkpoint().status();
  return index_
      ->Checkpoint([this](const IndexRoot& root) { return WriteSuperblock(&root, false, 0, 0); })
      .status();
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
  buckets_->StartRefill([this] { return knobs_.replacement.load(std::memory_order_relaxed); });
  hk_ = std::thread([this] {
    SetThreadName("ub-housekeep");
    Housekeeping();
  });
}

void CacheSet::StopHousekeeping() {
  {
    std::lock_guard<std::mutex> l(hk_mu_);
    hk_stop_ = true;
  }
  hk_cv_.notify_all();
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
  // persist step writes the root (still not clean) and the journal is
  // trimmed: the next start replays nothing.
  auto root = index_->Checkpoint(
      [this](const IndexRoot& r) { return WriteSuperblock(&r, false, 0, 0); });
  UB_RETURN_IF_ERROR(root.status());
  BucketTable t;
  t.set_id = set_id_;
  t.index_generation = root->generation;
  t.node_size = store_->node_size();
  t.buckets = buckets_->ExportState();
  t.nodes = disk_store_->AllocatedNodes();
  {
    MutexLock l(&dev_mu_);
    for (const auto& [uuid, dev] : devices_) t.devices.push_back({uuid, dev});
    t.next_dev = next_dev_;
  }
  std::vector<uint8_t> bytes = t.Encode();
  CacheSuperblock sb;
  {
    MutexLock l(&sb_mu_);
    sb = sb_;
  }
  // At the end of the journal area, which the checkpoint just trimmed.
  uint64_t blk = sb.block_size;
  uint64_t span = (bytes.size() + blk - 1) / blk * blk;
  uint64_t jstart = sb.bucket_offset(sb.first_bucket);
  uint64_t jend = sb.bucket_offset(sb.data_bucket());
  if (span > jend - jstart - disk_store_->journal_used())
    return Status::NoSpace("bucket table (" + FormatSize(span) + ") does not fit the journal area (" +
                           FormatSize(jend - jstart) + "); the next start is cold");
  uint64_t off = jend - span;
  AlignedBuffer buf(span);
  std::fill(buf.data(), buf.data() + span, 0);
  std::copy(bytes.begin(), bytes.end(), buf.data());
  UB_RETURN_IF_ERROR(disk_store_->Io({IoOp::kWrite, 0, off, span, buf.data()}));
  UB_RETURN_IF_ERROR(WriteSuperblock(nullptr, true, off, bytes.size()));
  auto st = index_->stats();
  UB_INFO("cache set {}: clean shutdown in {:.1f} ms: {} extents in {} nodes, bucket table {}",
          FormatUuid(set_uuid_), (NowNanos() - t0) / 1e6, st.extents, t.nodes.size(),
          FormatSize(span));
  return Status::OK();
}

Result<uint64_t> CacheSet::RunGc() {
  std::lock_guard<std::mutex> one_at_a_time(gc_mu_);
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
    // Invalidating the range may also drop a fresh extent inserted there
    // since the walk saw the stale one: that is a future miss, never stale
    // data (the backing device has everything; writeback must revisit this).
    Status s = index_->Invalidate(e.dev, e.start, e.len);
    if (!s.ok() && drop_status.ok()) drop_status = s;
    dropped++;
  });
  if (!st.ok()) return st;
  if (!drop_status.ok()) return drop_status;
  buckets.MarkGcDone(gens);
  buckets.SetLiveBytes(std::move(live), seq_at_start);
  gc_runs_.fetch_add(1, std::memory_order_relaxed);
  UB_DEBUG("cache gc: dropped {} stale extents", dropped);
  return dropped;
}

void CacheSet::Housekeeping() {
  uint64_t ticks = 0;
  std::unique_lock<std::mutex> l(hk_mu_);
  while (!hk_stop_) {
    hk_cv_.wait_for(l, std::chrono::seconds(1));
    if (hk_stop_) break;
    l.unlock();
    // Journal: one append per second batches every index change; a
    // checkpoint folds it into nodes when it grows (on the device, when it
    // passes half of the journal area, or fills it).
    Status st = index_->Commit();
    uint64_t limit = kMaxJournalBeforeCheckpoint;
    if (disk_store_) limit = std::min<uint64_t>(limit, disk_store_->journal_capacity() / 2);
    uint64_t used = disk_store_ ? disk_store_->journal_used() : index_->stats().journal_bytes;
    if (st.code() == Status::Code::kNoSpace || (st.ok() && used > limit)) st = Checkpoint();
    if (!st.ok()) UB_WARN("cache index housekeeping: {}", st.ToString());
    if (buckets_->MaxGenLead() >= BucketAllocator::kMaxGenLead / 2) {
      auto dropped = RunGc();
      if (!dropped.ok()) UB_WARN("cache gc: {}", dropped.status().ToString());
    }
    // bcache ages priorities so that LRU means "least recently used".
    if (++ticks % 30 == 0) buckets_->DecayPriorities();
    l.lock();
  }
}

}  // namespace ubcache
