package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/tandem-kafka/tandem/engine/internal/keys"

	"github.com/cockroachdb/pebble/v2"
)

// Replication between brokers. A partition with one replica advances its
// high watermark to what is durable, as a standalone broker does. A
// replicated partition (SetReplicated) lets the replication layer say
// how far it may go: a leader sets it to what every in-sync replica has
// (SetHighWatermark), a follower to what its leader said; either way the
// high watermark never passes this broker's own durable log end, and
// never goes down but by truncation.
//
// Followers read the leader's log up to its end (ReadLogEnd), append
// what they read with OriginReplica at the leader's offsets and epochs,
// and truncate where their log diverged (Truncate).
//
// The high watermark of a replicated partition is checkpointed under
//
//	0x02 'D' topicID(16) partition(4) 'H' → hwm(8)
//
// (Kafka's replication-offset-checkpoint), so that a restarted broker
// does not serve records it had not seen committed before it stopped.

// replState is a partition's replication state, guarded by p.mu.
type replState struct {
	replicated bool
	durable    int64 // the durable log end, as appends reported it
	target     int64 // how far the replication layer lets the hwm go
	checkpoint int64 // the last checkpointed hwm
	endCh      chan struct{}
}

// advanceLocked records that the log is durable up to durableEnd and
// moves the high watermark as far as the mode allows.
func (p *Partition) advanceLocked(durableEnd int64) {
	end := min(durableEnd, p.leo)
	if p.repl.replicated {
		p.repl.durable = max(p.repl.durable, end)
		end = min(p.repl.durable, p.repl.target)
	}
	if end > p.hwm {
		p.hwm = end
		p.notifyLocked()
	}
}

// notifyEndLocked wakes ReplicaFetch waiters: the log end moved.
func (p *Partition) notifyEndLocked() {
	if p.repl.endCh != nil {
		close(p.repl.endCh)
		p.repl.endCh = nil
	}
	p.endWaiters.WakeAll()
}

// WaitEnd returns a channel closed the next time the log end offset
// advances: a leader's fetch from a follower waits on it.
func (p *Partition) WaitEnd() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut {
		return closedCh
	}
	if p.repl.endCh == nil {
		p.repl.endCh = make(chan struct{})
	}
	return p.repl.endCh
}

func (p *Partition) hwmKey() []byte { return keys.Sub(p.id, p.part, keys.SubHWM) }

// SetReplicated switches the partition to a high watermark set by the
// replication layer (on) or back to its durable end (off). The first
// switch on after the broker started takes the high watermark down to the
// last checkpoint: records above it may not have been committed.
func (p *Partition) SetReplicated(on bool) error {
	unlock, err := p.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if on == p.repl.replicated {
		return nil
	}
	if !on {
		p.repl.replicated = false
		p.advanceLocked(max(p.repl.durable, p.hwm))
		return nil
	}
	// Until now the high watermark was the durable end.
	p.repl.durable, p.repl.target = p.hwm, p.hwm
	v, closer, err := p.e.db.Get(p.hwmKey())
	switch {
	case err == nil:
		if len(v) == 8 {
			p.hwm = min(p.hwm, max(int64(binary.BigEndian.Uint64(v)), p.logStart))
		}
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("%s-%d: read high watermark checkpoint: %w", p.topic, p.part, err)
	}
	p.repl.replicated = true
	p.repl.target = p.hwm
	return p.checkpointLocked(pebble.Sync)
}

// SetHighWatermark lets the high watermark of a replicated partition go
// up to hwm (no further than the durable log end; math.MaxInt64: the
// durable end) and returns it. It never goes down.
func (p *Partition) SetHighWatermark(hwm int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.repl.replicated {
		return p.hwm
	}
	p.repl.target = hwm
	p.advanceLocked(p.repl.durable)
	return p.hwm
}

// CheckpointHighWatermark persists the high watermark of a replicated
// partition if it moved since the last checkpoint (without a sync: a lost
// checkpoint only means an older, lower one).
func (p *Partition) CheckpointHighWatermark() error {
	unlock, err := p.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if !p.repl.replicated || p.hwm == p.repl.checkpoint {
		return nil
	}
	return p.checkpointLocked(pebble.NoSync)
}

func (p *Partition) checkpointLocked(opts *pebble.WriteOptions) error {
	if err := p.e.db.Set(p.hwmKey(), binary.BigEndian.AppendUint64(nil, uint64(p.hwm)), opts); err != nil {
		return fmt.Errorf("%s-%d: checkpoint high watermark: %w", p.topic, p.part, err)
	}
	p.repl.checkpoint = p.hwm
	return nil
}

// ReadLogEnd is the isolation of a follower's read (Fetch with a
// ReplicaId): up to the log end offset rather than the high watermark.
const ReadLogEnd Isolation = -1

// LastFetchedEpoch is the leader epoch of the last batch in the log, -1
// for an empty log: what a follower sends as Fetch's LastFetchedEpoch.
func (p *Partition) LastFetchedEpoch() int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leo <= p.logStart {
		return -1
	}
	return p.latestEpochLocked()
}

// LogStart is the log start offset.
func (p *Partition) LogStart() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logStart
}
