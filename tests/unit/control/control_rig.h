// SPDX-License-Identifier: Apache-2.0
// A cache set over RAM devices with one formatted backing device, and the
// control Target for it: what the control tests drive.
#pragma once

#include <catch2/catch.hpp>
#include <memory>

#include "backend/mem_device.h"
#include "backend/offset_device.h"
#include "cache/superblock.h"
#include "control/attributes.h"

namespace ubcache::control {

struct ControlRig {
  std::unique_ptr<Reactor> reactor;
  std::unique_ptr<BlockDevice> cache, raw_backing, backing;
  std::unique_ptr<CacheSet> set;
  std::unique_ptr<CachedDevice> dev;
  std::unique_ptr<BackingSuper> super;
  Target target;
  std::string set_uuid;  // of the formatted cache

  ControlRig() {
    reactor = std::move(Reactor::Create().value());
    reactor->Bind();
    cache = std::move(MemDevice::Create("mem:cache", 8 << 20).value());
    raw_backing = std::move(MemDevice::Create("mem:backing", 16 << 20).value());
    BackingFormatOptions bo;
    auto sb = NewBackingSuperblock(bo, raw_backing->size(), 512);
    REQUIRE(sb.ok());
    REQUIRE(WriteBackingSuperblock(*raw_backing, *sb).ok());
    backing = std::make_unique<OffsetDevice>(raw_backing.get(), sb->data_offset_bytes());
    CacheFormatOptions co;
    co.bucket_size = 64 << 10;
    auto csb = NewCacheSuperblock(co, cache->size(), 512);
    REQUIRE(csb.ok());
    REQUIRE(WriteCacheSuperblock(*cache, *csb).ok());
    set_uuid = FormatUuid(csb->set_uuid);
    CacheSet::Options o;
    o.bucket_size = 64 << 10;
    o.reserved_bytes = csb->bucket_offset(csb->data_bucket());
    set = std::move(CacheSet::Create(cache.get(), o).value());
    dev = std::make_unique<CachedDevice>("mem:backing", set.get(), 0, backing.get());
    super = std::make_unique<BackingSuper>(raw_backing.get(), *sb);
    target = Target{"disk", dev.get(), set.get(), super.get(), {super.get()}, {}};
  }
  BackingSuperblock Superblock() { return ReadBackingSuperblock(*raw_backing).value(); }
};

}  // namespace ubcache::control
