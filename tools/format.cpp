// SPDX-License-Identifier: Apache-2.0
// ubcache format / show-super / forget-cache: write and print superblocks.
//
// format lays out a cache device (ubcache's own superblock, zeroed journal
// and metadata area) and/or a backing device (bcache's backing superblock,
// so bcache-tools can read it). Given both, it attaches them: the backing
// superblock carries the cache's set uuid, state clean. It never overwrites
// an existing superblock without --force, and checks every device before
// writing any, so a refusal leaves nothing half-formatted.
//
// forget-cache detaches a backing device from a cache that is lost, after
// saying what the device holds without it (ForgetCacheMain).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/block_device.h"
#include "backend/reactor.h"
#include "backend/sync_io.h"
#include "btree/extent_index.h"
#include "cache/backing_super.h"
#include "cache/superblock.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "util/aligned_buffer.h"
#include "util/size.h"

namespace ubcache {

namespace {

// Exit statuses (tools/commands.h).
constexpr int kExitFailed = 1;
constexpr int kExitBadInput = 2;

std::unique_ptr<Reactor> BindReactor() {
  auto r = Reactor::Create();
  if (!r.ok()) Die(kExitFailed, r.status().ToString());
  (*r)->Bind();
  return std::move(r).value();
}

std::unique_ptr<BlockDevice> Open(const std::string& spec, bool read_only) {
  OpenOptions opts;
  opts.read_only = read_only;
  auto dev = OpenDevice(spec, opts);
  if (!dev.ok()) Die(kExitBadInput, dev.status().message());
  return std::move(dev).value();
}

// Exit 2 for bad input (no superblock, corrupt, unsupported), 1 for I/O.
[[noreturn]] void DieWith(const Status& st) {
  Die(st.IsIoError() ? kExitFailed : kExitBadInput, st.message());
}

// --- progress ---------------------------------------------------------------

// A one-line progress bar on stderr for work that takes more than a moment:
// drawn only when stderr is a terminal and only after half a second; a
// one-line summary is always printed at the end.
class Progress {
 public:
  Progress(std::string what, uint64_t total)
      : what_(std::move(what)), total_(total), start_(Clock::now()), tty_(isatty(2)) {}

  void Update(uint64_t done) {
    done_ = done;
    if (!tty_) return;
    auto now = Clock::now();
    if (now - start_ < std::chrono::milliseconds(500) ||
        now - last_draw_ < std::chrono::milliseconds(100))
      return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    int filled = total_ ? static_cast<int>(kWidth * done_ / total_) : kWidth;
    std::fprintf(stderr, "\r%s [%s%s] %s / %s, %s/s  ", what_.c_str(),
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                 FormatSize(done_).c_str(), FormatSize(total_).c_str(),
                 FormatSize(Rate()).c_str());
    drawn_ = true;
  }

  void Finish() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "ubcache: %s: %s in %.2f s (%s/s)\n", what_.c_str(),
                 FormatSize(done_).c_str(), Seconds(), FormatSize(Rate()).c_str());
  }

 private:
  using Clock = std::chrono::steady_clock;
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  uint64_t Rate() const {
    double s = Seconds();
    return s > 0 ? static_cast<uint64_t>(static_cast<double>(done_) / s) : 0;
  }
  std::string what_;
  uint64_t total_, done_ = 0;
  Clock::time_point start_, last_draw_{};
  bool tty_, drawn_ = false;
};

// Zeroes [off, off + len): write-zeroes where the device has it (fallocate on
// files, BLKZEROOUT-like on devices), else plain writes of a zero buffer.
Status ZeroRange(BlockDevice& dev, uint64_t off, uint64_t len, Progress& progress) {
  constexpr uint64_t kChunk = 64ull << 20;
  constexpr uint64_t kWriteChunk = 1ull << 20;
  AlignedBuffer zeros;
  bool use_writes = false;
  uint64_t done = 0;
  while (done < len) {
    uint64_t n = std::min(len - done, use_writes ? kWriteChunk : kChunk);
    Status st;
    if (!use_writes) {
      st = SyncIo(dev, {IoOp::kWriteZeroes, 0, off + done, n, nullptr});
      if (st.IsNotSupported()) {
        use_writes = true;
        zeros = AlignedBuffer(kWriteChunk);
        zeros.Zero();
        continue;
      }
    } else {
      st = SyncWrite(dev, off + done, n, zeros.data());
    }
    UB_RETURN_IF_ERROR(st);
    done += n;
    progress.Update(done);
  }
  return Status::OK();
}

// Discards [off, off + len) in chunks; a device without discard is left as is.
Status DiscardRange(BlockDevice& dev, uint64_t off, uint64_t len, Progress& progress) {
  constexpr uint64_t kChunk = 1ull << 30;
  for (uint64_t done = 0; done < len;) {
    uint64_t n = std::min(len - done, kChunk);
    Status st = SyncIo(dev, {IoOp::kDiscard, 0, off + done, n, nullptr});
    if (st.IsNotSupported()) return Status::OK();
    UB_RETURN_IF_ERROR(st);
    done += n;
    progress.Update(done);
  }
  return Status::OK();
}

// --- what is already there --------------------------------------------------

// "" for a blank device, else what --force would destroy.
std::string DescribeExisting(BlockDevice& dev) {
  auto kind = Probe(dev);
  if (!kind.ok()) {
    if (kind.status().IsCorruption()) return "a damaged superblock (" + kind.status().message() + ")";
    DieWith(kind.status());
  }
  switch (*kind) {
    case SuperblockKind::kNone:
      return "";
    case SuperblockKind::kCache: {
      auto sb = ReadCacheSuperblock(dev);
      if (!sb.ok()) return "a damaged ubcache cache superblock (" + sb.status().message() + ")";
      return "a ubcache cache superblock (uuid " + FormatUuid(sb->uuid) + ", set uuid " +
             FormatUuid(sb->set_uuid) + ")";
    }
    case SuperblockKind::kBacking: {
      auto sb = ReadBackingSuperblock(dev);
      if (!sb.ok()) return "a damaged bcache backing superblock (" + sb.status().message() + ")";
      return "a bcache backing superblock (uuid " + FormatUuid(sb->uuid) + ", label '" +
             sb->label + "', state " + BackingStateName(sb->state) + ")";
    }
    case SuperblockKind::kBcacheCache:
      return "a bcache cache device superblock";
  }
  return "a superblock";
}

void RefuseUnlessForced(BlockDevice& dev, bool force) {
  std::string what = DescribeExisting(dev);
  if (what.empty()) return;
  if (force) {
    std::fprintf(stderr, "ubcache: %s: overwriting %s (--force)\n", dev.spec().c_str(),
                 what.c_str());
    return;
  }
  Die(kExitFailed, dev.spec() + " already holds " + what + "; use --force to overwrite");
}

uint64_t SizeArg(const Args& args, const std::string& name) {
  auto v = ParseSize(args.Get(name));
  if (!v.ok()) args.UsageError("--" + name + ": " + v.status().message());
  return *v;
}

// --- format -----------------------------------------------------------------

// Lays out the cache. Order matters for a crash in the middle: the old
// superblock and journal are zeroed and flushed before the new superblock is
// written (WriteCacheSuperblock flushes first), so the device is either
// blank or a complete new cache, never a new superblock over an old journal.
Result<CacheSuperblock> FormatCache(BlockDevice& dev, const CacheFormatOptions& opts, bool discard) {
  auto made = NewCacheSuperblock(opts, dev.size(), dev.logical_block_size());
  if (!made.ok()) return Status::InvalidArgument(dev.spec() + ": " + made.status().message());
  CacheSuperblock sb = std::move(made).value();

  // Bucket 0 up to the first data bucket: superblock area and journal. Old
  // btree nodes in data buckets are unreachable without a root or journal,
  // and carry the old set's identity (doc/format.md).
  uint64_t meta_end = sb.bucket_offset(sb.data_bucket());
  Progress zero("zeroing " + dev.spec() + " journal and metadata", meta_end);
  UB_RETURN_IF_ERROR(ZeroRange(dev, 0, meta_end, zero));
  zero.Finish();
  if (discard) {
    uint64_t data_end = sb.bucket_offset(sb.nbuckets);
    Progress p("discarding " + dev.spec() + " data buckets", data_end - meta_end);
    UB_RETURN_IF_ERROR(DiscardRange(dev, meta_end, data_end - meta_end, p));
    p.Finish();
  }
  UB_RETURN_IF_ERROR(WriteCacheSuperblock(dev, sb));
  return sb;
}

// Zeroes everything before data_offset (including any old superblock), then
// writes the superblock; client data from data_offset on is untouched.
Result<BackingSuperblock> FormatBacking(BlockDevice& dev, const BackingFormatOptions& opts) {
  auto made = NewBackingSuperblock(opts, dev.size(), dev.logical_block_size());
  if (!made.ok()) return Status::InvalidArgument(dev.spec() + ": " + made.status().message());
  BackingSuperblock sb = std::move(made).value();
  Progress zero("zeroing " + dev.spec() + " before data_offset", sb.data_offset_bytes());
  UB_RETURN_IF_ERROR(ZeroRange(dev, 0, sb.data_offset_bytes(), zero));
  UB_RETURN_IF_ERROR(WriteBackingSuperblock(dev, sb));
  return sb;
}

}  // namespace

int FormatMain(int argc, char** argv) {
  Args args("format", "--cache SPEC | --backing SPEC | --cache SPEC --backing SPEC [options]",
            "Writes a ubcache cache superblock (and zeroes the journal and metadata area)\n"
            "and/or a backing superblock in Linux bcache's layout, readable by\n"
            "bcache-super-show. Given both, attaches them: the backing device joins the\n"
            "cache's set. Refuses to overwrite an existing superblock without --force.\n"
            "Exit status: 0 done, 1 failed or refused, 2 usage error or bad input.");
  args.Option("cache", "SPEC", "the cache device (fast: SSD, NVMe)")
      .Option("backing", "SPEC", "the backing device (slow: spindle, network)")
      .Option("bucket-size", "SIZE", "cache bucket size, a power of two", "512k")
      .Option("block-size", "SIZE", "cache block size, a power of two", "4k")
      .Option("journal-buckets", "N", "cache buckets reserved for the journal (0: ~1%, 8 to 256)",
              "0")
      .Option("label", "NAME", "label of every superblock written (the export name)")
      .Option("cache-mode", "MODE", "writethrough, writeback, writearound or none", "writethrough")
      .Option("data-offset", "SIZE", "backing: where client data starts (multiple of 4k)", "8k")
      .Flag("discard", "cache: also discard the data buckets")
      .Flag("force", "overwrite an existing superblock")
      .Epilog(DeviceSpecHelp());
  args.Parse(argc - 1, argv + 1);
  if (!args.positional().empty()) args.UsageError("unexpected argument '" + args.positional()[0] + "'");
  bool want_cache = args.Has("cache"), want_backing = args.Has("backing");
  if (!want_cache && !want_backing) args.UsageError("--cache SPEC and/or --backing SPEC is required");
  if (want_cache && want_backing && args.Get("cache") == args.Get("backing"))
    args.UsageError("--cache and --backing name the same device");

  auto mode = ParseCacheMode(args.Get("cache-mode"));
  if (!mode.ok()) args.UsageError("--cache-mode: expected writethrough, writeback, writearound or none");
  std::string label = args.Get("label");
  if (label.size() >= kLabelSize) args.UsageError("--label: at most 31 bytes");
  for (unsigned char c : label)
    if (c < 0x20 || c == 0x7f) args.UsageError("--label: control characters are not allowed");

  CacheFormatOptions copts;
  copts.bucket_size = SizeArg(args, "bucket-size");
  uint64_t block_size = SizeArg(args, "block-size");
  if (block_size > CacheSuperblock::kMaxBlockSize) args.UsageError("--block-size: at most 64k");
  copts.block_size = static_cast<uint32_t>(block_size);
  auto jb = ParseUint(args.Get("journal-buckets"), 0, 1u << 20, "--journal-buckets");
  if (!jb.ok()) args.UsageError(jb.status().message());
  copts.journal_buckets = *jb;
  copts.label = label;
  copts.cache_mode = *mode;
  BackingFormatOptions bopts;
  bopts.data_offset = SizeArg(args, "data-offset");
  bopts.label = label;
  bopts.cache_mode = *mode;

  auto reactor = BindReactor();
  std::unique_ptr<BlockDevice> cache, backing;
  if (want_cache) cache = Open(args.Get("cache"), false);
  if (want_backing) backing = Open(args.Get("backing"), false);
  // Check every device before writing any.
  bool force = args.Has("force");
  if (cache) RefuseUnlessForced(*cache, force);
  if (backing) RefuseUnlessForced(*backing, force);

  if (cache) {
    auto sb = FormatCache(*cache, copts, args.Has("discard"));
    if (!sb.ok()) DieWith(sb.status());
    std::printf("%s: ubcache cache, uuid %s, set uuid %s, %llu buckets of %s (%s for data), "
                "%llu journal buckets\n",
                cache->spec().c_str(), FormatUuid(sb->uuid).c_str(),
                FormatUuid(sb->set_uuid).c_str(), static_cast<unsigned long long>(sb->nbuckets),
                FormatSize(sb->bucket_size).c_str(),
                FormatSize((sb->nbuckets - sb->data_bucket()) * sb->bucket_size).c_str(),
                static_cast<unsigned long long>(sb->journal_buckets));
    bopts.set_uuid = sb->set_uuid;
  }
  if (backing) {
    auto sb = FormatBacking(*backing, bopts);
    if (!sb.ok()) DieWith(sb.status());
    std::printf("%s: bcache backing device, uuid %s, %s, data at %s (%s of data), cache mode %s%s\n",
                backing->spec().c_str(), FormatUuid(sb->uuid).c_str(),
                sb->state == BackingState::kNone
                    ? "detached"
                    : ("attached to set " + FormatUuid(sb->set_uuid)).c_str(),
                FormatSize(sb->data_offset_bytes()).c_str(),
                FormatSize(backing->size() - sb->data_offset_bytes()).c_str(),
                CacheModeName(sb->cache_mode), sb->label.empty() ? "" : (", label '" + sb->label + "'").c_str());
  }
  return 0;
}

// --- show-super -------------------------------------------------------------

namespace {

// `name value` lines, or one JSON object.
class FieldPrinter {
 public:
  void Num(const std::string& name, uint64_t v) { fields_.push_back({name, std::to_string(v), false}); }
  void Str(const std::string& name, const std::string& v) { fields_.push_back({name, v, true}); }
  void Hex(const std::string& name, uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    fields_.push_back({name, buf, true});
  }

  void Print(bool json) const {
    if (!json) {
      for (const auto& f : fields_) std::printf("%s %s\n", f.name.c_str(), f.value.c_str());
      return;
    }
    std::printf("{");
    for (size_t i = 0; i < fields_.size(); i++) {
      const auto& f = fields_[i];
      std::printf("%s\n  \"%s\": %s", i ? "," : "", f.name.c_str(),
                  f.quoted ? Quote(f.value).c_str() : f.value.c_str());
    }
    std::printf("\n}\n");
  }

 private:
  static std::string Quote(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
    return out + "\"";
  }
  struct Field {
    std::string name, value;
    bool quoted;
  };
  std::vector<Field> fields_;
};

std::string TimeString(uint64_t unix_seconds) {
  if (unix_seconds == 0) return "never";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void PrintCache(const CacheSuperblock& sb, bool json) {
  FieldPrinter f;
  f.Str("kind", "cache");
  f.Num("version", sb.version);
  f.Hex("csum", sb.csum);
  f.Str("uuid", FormatUuid(sb.uuid));
  f.Str("set_uuid", FormatUuid(sb.set_uuid));
  f.Str("label", sb.label);
  f.Num("block_size", sb.block_size);
  f.Num("bucket_size", sb.bucket_size);
  f.Num("nbuckets", sb.nbuckets);
  f.Num("first_bucket", sb.first_bucket);
  f.Num("journal_buckets", sb.journal_buckets);
  f.Num("data_bucket", sb.data_bucket());
  f.Num("data_buckets", sb.nbuckets - sb.data_bucket());
  f.Str("cache_mode", CacheModeName(sb.cache_mode));
  f.Hex("flags", sb.flags);
  f.Str("clean", sb.clean() ? "yes" : "no");
  f.Num("seq", sb.seq);
  f.Hex("feature_compat", sb.feature_compat);
  f.Hex("feature_ro_compat", sb.feature_ro_compat);
  f.Hex("feature_incompat", sb.feature_incompat);
  f.Num("btree_root_bucket", sb.btree_root_bucket);
  f.Num("btree_root_offset", sb.btree_root_offset);
  f.Num("btree_root_level", sb.btree_root_level);
  f.Num("index_root_len", sb.index_root.size());
  if (!sb.index_root.empty()) {
    auto root = IndexRoot::Decode(sb.index_root.data(), sb.index_root.size());
    if (root.ok()) {
      uint64_t extents = 0, nodes = 0;
      for (const ShardRoot& r : root->shards) {
        extents += r.extents;
        nodes += r.nodes;
      }
      f.Num("index_shards", root->shards.size());
      f.Num("index_generation", root->generation);
      f.Num("index_extents", extents);
      f.Num("index_nodes", nodes);
      // Byte offsets on the cache device of the shards' root nodes (empty
      // shards have none): where a debugging session, or a test that
      // damages metadata on purpose, finds the index.
      std::string addrs;
      for (const ShardRoot& r : root->shards) {
        if (r.addr == kNoNode) continue;
        if (!addrs.empty()) addrs += " ";
        addrs += std::to_string(r.addr);
      }
      f.Str("index_root_nodes", addrs);
    } else {
      f.Str("index_root", root.status().message());
    }
  }
  f.Num("bucket_table_offset", sb.bucket_table_offset);
  f.Num("bucket_table_len", sb.bucket_table_len);
  // Backing devices another client took over (CachedDevice::Fence): the
  // next serve refuses their dirty data without --after-fence.
  std::string fences;
  for (const CacheSuperblock::Fence& fence : sb.fences)
    fences += (fences.empty() ? "" : " ") + FormatUuid(fence.backing) + "@" + TimeString(fence.since);
  f.Str("fences", fences.empty() ? "none" : fences);
  f.Num("created", sb.created);
  f.Str("created_utc", TimeString(sb.created));
  f.Print(json);
}

void PrintBacking(const BackingSuperblock& sb, bool json) {
  FieldPrinter f;
  f.Str("kind", "backing");
  f.Num("version", sb.version);
  f.Num("offset", BackingSuperblock::kSbSector);
  f.Hex("csum", sb.csum);
  f.Str("uuid", FormatUuid(sb.uuid));
  f.Str("set_uuid", FormatUuid(sb.set_uuid));
  f.Str("label", sb.label);
  f.Str("cache_mode", CacheModeName(sb.cache_mode));
  f.Str("state", BackingStateName(sb.state));
  f.Hex("other_flags", sb.other_flags);
  f.Num("seq", sb.seq);
  f.Num("data_offset", sb.data_offset_bytes());
  f.Num("data_offset_sectors", sb.data_offset);
  f.Num("block_size", sb.block_size_bytes());
  f.Num("bucket_size_sectors", sb.bucket_size);
  f.Num("last_mount", sb.last_mount);
  f.Num("dirty_since", sb.dirty_since);
  f.Str("dirty_since_utc", sb.dirty_since ? TimeString(sb.dirty_since) : "none");
  f.Str("writeback_order", WritebackOrderName(sb.writeback_order));
  f.Num("consistent_as_of", sb.consistent_as_of);
  f.Str("consistent_as_of_utc", sb.consistent_as_of ? TimeString(sb.consistent_as_of) : "none");
  f.Print(json);
}

}  // namespace

int ShowSuperMain(int argc, char** argv) {
  Args args("show-super", "SPEC [--json]",
            "Prints every field of the superblock on SPEC, one 'name value' line each:\n"
            "a ubcache cache superblock or a bcache backing superblock. Exit status 2,\n"
            "with the failed check named, when there is none or it is corrupt.");
  args.Flag("json", "print one JSON object instead").Epilog(DeviceSpecHelp());
  args.Parse(argc - 1, argv + 1);
  if (args.positional().size() != 1) args.UsageError("expected exactly one device spec");
  bool json = args.Has("json");

  auto reactor = BindReactor();
  auto dev = Open(args.positional()[0], true);
  auto kind = Probe(*dev);
  if (!kind.ok()) DieWith(kind.status());
  switch (*kind) {
    case SuperblockKind::kNone:
      Die(kExitBadInput, dev->spec() + ": no ubcache/bcache superblock");
    case SuperblockKind::kCache: {
      auto sb = ReadCacheSuperblock(*dev);
      if (!sb.ok()) DieWith(sb.status());
      PrintCache(*sb, json);
      return 0;
    }
    case SuperblockKind::kBacking:
    case SuperblockKind::kBcacheCache: {
      // A bcache cache device fails here with a message that says so.
      auto sb = ReadBackingSuperblock(*dev);
      if (!sb.ok()) DieWith(sb.status());
      PrintBacking(*sb, json);
      return 0;
    }
  }
  return kExitFailed;
}

}  // namespace ubcache

namespace ubcache {

// forget-cache: the way back for a backing device whose cache is gone (a
// dead SSD, a cache file lost). `serve --backing` refuses a dirty device, as
// it must while its cache may still come back; this says what the device
// holds without the cache and, with --yes, detaches it so it serves alone.
int ForgetCacheMain(int argc, char** argv) {
  Args args("forget-cache", "SPEC [--yes]",
            "For a backing device whose cache is lost: reads its superblock, says how\n"
            "old its data is and whether it is consistent, and with --yes detaches it\n"
            "from its cache (state none), so 'serve --backing SPEC' serves it alone.\n"
            "Whatever was dirty in the cache is lost. Offline only: stop the daemon\n"
            "that serves it first. Exit status 2 without --yes (nothing changed).");
  args.Flag("yes", "detach it: the cache's dirty data is given up").Epilog(DeviceSpecHelp());
  args.Parse(argc - 1, argv + 1);
  if (args.positional().size() != 1) args.UsageError("expected exactly one device spec");
  bool yes = args.Has("yes");

  auto reactor = BindReactor();
  auto dev = Open(args.positional()[0], !yes);
  auto kind = Probe(*dev);
  if (!kind.ok()) DieWith(kind.status());
  if (*kind == SuperblockKind::kCache)
    Die(kExitBadInput, dev->spec() + ": a ubcache cache device; forget-cache takes the backing device");
  if (*kind == SuperblockKind::kNone)
    Die(kExitBadInput, dev->spec() + ": no bcache backing superblock (an unformatted device has no cache to forget)");
  auto sb = ReadBackingSuperblock(*dev);
  if (!sb.ok()) DieWith(sb.status());

  const std::string& spec = dev->spec();
  std::printf("%s: bcache backing device, uuid %s, label '%s', state %s\n", spec.c_str(),
              FormatUuid(sb->uuid).c_str(), sb->label.c_str(), BackingStateName(sb->state));
  if (sb->state == BackingState::kNone) {
    std::printf("already detached from any cache: 'ubcache serve --backing %s' serves it alone\n",
                spec.c_str());
    return 0;
  }
  std::printf("attached to cache set %s\n", FormatUuid(sb->set_uuid).c_str());
  if (sb->state == BackingState::kDirty && sb->consistent_as_of != 0) {
    // Rule 16: written back in flush order, epoch by epoch, and the time
    // recorded only once every write acknowledged before it was on the
    // device — what a power cut at that moment (or a little later) leaves.
    std::printf("its cache held data not yet written back (dirty since %s), written back in\n"
                "flush order: consistent as of %s. The device holds every write acknowledged\n"
                "before then, and of the later ones only what a power cut at some moment after\n"
                "it could have left: writes acknowledged after then may be lost, nothing older.\n"
                "A filesystem on it needs only its journal replayed (a mount, or e2fsck -p), as\n"
                "after a power cut; a database, its own recovery.\n",
                sb->dirty_since ? TimeString(sb->dirty_since).c_str() : "an unrecorded time",
                TimeString(sb->consistent_as_of).c_str());
  } else if (sb->state == BackingState::kDirty) {
    // Writeback in address order (bcache's order, flush order suspended
    // while the cache was full, rule 17; or a superblock from before
    // consistent_as_of): between two passes the device may hold a newer
    // block without an older one that a filesystem wrote before it.
    std::printf("its cache held data not yet written back: writes since %s are lost or on the\n"
                "device only in part, written back in address order (writeback_order lba, or\n"
                "flush order suspended while the cache was full, now or for a while), so newer\n"
                "blocks may be there without older ones they depend on. The device held every\n"
                "write acknowledged before then. A filesystem on it may be inconsistent: run\n"
                "fsck before mounting it; a database, its own recovery.\n",
                sb->dirty_since ? TimeString(sb->dirty_since).c_str() : "an unrecorded time");
  } else {
    std::printf("its cache held no dirty data for it: nothing is lost\n");
  }
  if (!yes) {
    std::printf("nothing changed: run again with --yes to detach it from its cache\n");
    return kExitBadInput;
  }
  BackingSuper super(dev.get(), *sb);
  if (Status st = super.Detach(); !st.ok()) Die(kExitFailed, spec + ": " + st.ToString());
  std::printf("detached: 'ubcache serve --backing %s' serves it alone, and with a new\n"
              "formatted --cache it is cached again\n",
              spec.c_str());
  return 0;
}

}  // namespace ubcache
