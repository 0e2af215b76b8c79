package server

import (
	"runtime/debug"
	"sync"
)

// partitionMemory is what a hosted partition adds to the process's soft
// memory limit: its engine state, its replication and mirror
// bookkeeping and its metadata, with room for the collector (about 5 KiB
// a partition live at 50,000, measured with `tandem bench --workloads
// mirror-scale`).
const partitionMemory = 8 << 10

// processMemory is the process's soft memory limit (debug.SetMemoryLimit)
// when the broker owns it (SetProcessMemoryLimit): 3/4 of
// tandem.memory.budget, which sizes the caches, and partitionMemory for
// each partition the broker hosts. The budget alone was the limit, and a
// limit below the live heap makes the Go collector run without pause:
// 50,000 mirrored partitions (a live heap over the 192 MiB of the
// default budget) kept an idle broker at a core, three quarters of it in
// the collector.
type processMemory struct {
	mu         sync.Mutex
	owned      bool
	budget     int64
	partitions int
}

// own makes the broker set the process's limit from now on.
func (m *processMemory) own(budget int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.owned, m.budget = true, budget
	m.setLocked()
}

// follow sets the limit for partitions hosted, if the broker owns it.
func (m *processMemory) follow(partitions int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.partitions == partitions {
		return
	}
	m.partitions = partitions
	m.setLocked()
}

func (m *processMemory) setLocked() {
	if m.owned {
		debug.SetMemoryLimit(m.limit())
	}
}

func (m *processMemory) limit() int64 {
	return m.budget/4*3 + partitionMemory*int64(m.partitions)
}
