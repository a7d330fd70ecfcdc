// SPDX-License-Identifier: Apache-2.0
// The power domain: what a device's volatile write cache lives as long as.
// Two runs of the daemon in one domain saw no power cut between them, so
// whatever the first gave a device (completed, not yet flushed) is still
// in the device's cache or on its media when the second starts: a kill -9
// loses nothing a device took. Ordering rule 9 (doc/design.md) uses it to
// keep an earlier run's provisional clean copies at replay.
//
// Normally the domain is the kernel's boot: /proc/sys/kernel/random/boot_id
// changes with every boot, and every device cache that a power cut empties
// is emptied by a reboot too. The test fault layer keeps a device's
// "volatile cache" in process memory (fault,drop_unflushed / tear_unflushed,
// backend/fault_device.h), so while one exists the domain is this process
// alone, and FaultDevice::PowerLoss starts a new one. Unreadable boot_id:
// the process alone (nothing is trusted across a restart).
//
// Thread safety: any thread.
#pragma once

#include <array>
#include <cstdint>

namespace ubcache {

using PowerDomain = std::array<uint8_t, 16>;

// The domain now.
PowerDomain CurrentPowerDomain();
// A device whose volatile cache dies with this process exists: from now on
// the domain is this process's own (kept until NewPowerDomain).
void PowerHeldByProcess();
// That cache was thrown away (a simulated power cut): a fresh domain.
void NewPowerDomain();

}  // namespace ubcache
