// SPDX-License-Identifier: Apache-2.0
// EngineContext: what the request engines of one cached device share (each
// engine is one kind of request, in its own file: read_engine,
// writethrough_engine, dirty_write_engine, discard_engine, flush_engine;
// CachedDevice routes requests to them). The pieces each do one job:
// RangeGuard (every wait for a range), DirtyHandshake (the backing
// superblock), CacheIo (the allocator, cache device and index calls),
// BackingDurability (what the backing device holds durably: rules 8, 9),
// DeviceActivity (pacing clocks for the writeback thread).
//
// Thread safety: the pointers are set once, before the first request; each
// piece says its own.
#pragma once

#include <cstdint>
#include <string>

namespace ubcache {

class BackingDurability;
class BlockDevice;
class CacheIo;
class CacheSet;
class CacheStats;
class DeviceActivity;
class EpochClock;
class OrderedGate;
class RangeGuard;
class RequestStats;
class ServiceTime;
class WriteEpoch;

struct EngineContext {
  std::string spec;  // the cached device's, for messages
  CacheSet* set;
  uint32_t dev;  // the index's device number
  BlockDevice* backing;
  CacheStats* stats;
  RequestStats* requests;
  ServiceTime* backing_time;
  DeviceActivity* activity;
  RangeGuard* ranges;
  CacheIo* cache_io;
  BackingDurability* durability;  // rules 8 and 9: the backing device's volatile cache
  // The device's write epochs (btree/write_epoch.h): a FLUSH closes one
  // (FlushEngine), a FUA write after its insert (DirtyWriteEngine).
  WriteEpoch* epoch;
  // When each epoch began (cache/epoch_clock.h): a dirty write stamps its
  // epoch after its insert.
  EpochClock* clock;
  // Rule 14's wait: a write or discard that goes to the backing device
  // directly passes it first (cache/ordered_gate.h).
  OrderedGate* ordered;
};

}  // namespace ubcache
