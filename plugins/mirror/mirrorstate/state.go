// Package mirrorstate is a mirror partition's state machine (KIP-1279)
// and its persisted form: the states and the transitions the KIP allows
// between them (State.CanMove), what a partition keeps across restarts
// (PartitionState: its state, last mirrored offset and epoch, the
// failover's progress, a consistent cut), and the records of
// __mirror_state that carry it, with Shard, the state machine a
// coordinator shard of __mirror_state replays them into.
//
// It is pure: no I/O and no goroutines. Routing a partition to the
// broker that leads its shard, and writing records there, is the mirror
// plugin's (plugins/mirror, state.go and coordinate.go).
package mirrorstate

import "github.com/tandem-kafka/tandem/internal/uuid"

// Topic is the internal topic holding mirror partition states.
const Topic = "__mirror_state"

// DivergedSuffix names the topic that keeps the records a truncation
// took from a mirror topic: <topic>.diverged. The divergence manifest
// (ManifestEntry) says where in it each copy is; the metadata sync never
// mirrors such a topic.
const DivergedSuffix = ".diverged"

// Leader epoch bump constants of the KIP: the destination epoch is set to
// SLE + BumpIncrement whenever SLE > DLE - BumpThreshold. The fetchers
// (EPOCH_FENCING and proactive bumps) and the metadata sync's periodic
// bump share them.
const (
	BumpIncrement = 10
	BumpThreshold = 3
)

// State is a mirror partition's state (KIP-1279). The numbers are what
// __mirror_state and ReadMirrorStates/WriteMirrorStates carry.
type State int8

// The states of the KIP, numbered as on the wire and in __mirror_state.
const (
	Unknown State = iota
	Preparing
	Mirroring
	EpochFencing
	Pausing
	Paused
	Stopping
	Stopped
	Failed
)

var stateNames = [...]string{"UNKNOWN", "PREPARING", "MIRRORING", "EPOCH_FENCING", "PAUSING", "PAUSED", "STOPPING", "STOPPED", "FAILED"}

// String is the KIP's name of the state (UNKNOWN for a number it does
// not know), as DescribeMirrors and the logs show it.
func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "UNKNOWN"
}

// CanMove reports whether the KIP allows s → to. FAILED is reachable from
// any state; a failed partition restarts (PREPARING) when its topic is
// resumed or added again. Every write of a state checks it, which is what
// keeps two writers of a partition apart.
func (s State) CanMove(to State) bool {
	if to == Failed || to == s {
		return true
	}
	switch s {
	case Unknown:
		return to == Preparing || to == Mirroring || to == Paused || to == Stopping || to == Stopped
	case Preparing:
		return to == Mirroring || to == Pausing || to == Stopping
	case Mirroring:
		return to == EpochFencing || to == Pausing || to == Stopping || to == Preparing
	case EpochFencing:
		return to == Mirroring || to == Pausing || to == Stopping
	case Pausing:
		return to == Paused || to == Stopping
	case Paused:
		return to == Mirroring || to == Stopping
	case Stopping:
		return to == Stopped
	case Stopped:
		return to == Preparing // the topic is added to a mirror again (failback)
	case Failed:
		return to == Preparing || to == Stopping
	}
	return false
}

// TopicPartition names a partition of a mirror whose name is known (the
// plugin's runs and the state store key their partitions by it).
type TopicPartition struct {
	Topic     string
	Partition int32
}

// PartitionKey names a mirror partition: __mirror_state keys its records
// by it, so that compaction keeps one of each per partition.
type PartitionKey struct {
	Mirror    string
	Topic     string
	Partition int32
}

// PartitionState is a mirror partition's persisted state: the
// MirrorPartitionState and LastMirroredOffsets records of __mirror_state.
type PartitionState struct {
	State   State
	Reason  string
	TopicID uuid.UUID
	LMO     int64 // last mirrored offset (-1: none)
	LME     int32 // last mirror epoch (-1: none)
	// StopAt and StopEpoch are the failover's first step, persisted: the
	// log end offset and leader epoch when the fetcher let go of the
	// partition (-1 before). Everything below StopAt is mirrored data;
	// a resumed STOPPING starts from them, whatever it wrote since.
	StopAt    int64
	StopEpoch int32
	// StopDone is the failover's last step, persisted: every step of
	// STOPPING is done for this partition, and the topic becomes
	// writable once all its partitions have it (whichever brokers lead
	// them).
	StopDone bool
	// StopIndex is the metadata index (raft log index) at which the
	// topic's membership was stopped, recorded with STOPPED: a broker
	// whose image is older has not seen the stop yet, and must not take
	// STOPPED with a live membership for the topic added again.
	StopIndex int64
	// CompleteAt is when (Unix ms, 0 unknown) the partition last held all
	// the source had, as its fetcher learned it: a consistent cut counts
	// an idle partition complete up to then, not only up to its last
	// record. Persisted every completeEvery while mirroring, at a pause
	// and at a stop, so that a restart keeps it (a paused partition
	// learns nothing more).
	CompleteAt int64
	// Cut is a consistent failover's (plugins/mirror/cut), persisted.
	Cut Cut
}

// Cut is a partition's part in a consistent failover. Set names the
// failover's topics (sorted, comma-separated): the partition's STOPPING
// waits after its first step until the set's cut is decided. At is the
// offset it is cut at (-1 until decided), Time the cut's source time T
// (Unix ms), Records and Ms what it gives up beyond the cut. The cut is
// decided for every partition of the set before any is truncated: see
// plugins/mirror/cutover.
type Cut struct {
	Set                   string
	At, Time, Records, Ms int64
}

// NewPartitionState is the state of a partition nothing was recorded for.
func NewPartitionState() PartitionState {
	return PartitionState{LMO: -1, LME: -1, StopAt: -1, StopEpoch: -1, Cut: Cut{At: -1}}
}
