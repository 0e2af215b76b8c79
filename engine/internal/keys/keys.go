// Package keys is the engine's key layout in the Pebble instance it
// shares with raftmeta: which byte says what, and how each key is built
// and read back. Everything that names a Pebble key of the engine's goes
// through here, so that the layout below is the whole of it.
package keys

import "encoding/binary"

// Key layout of the shared Pebble instance. Every key starts with a one
// byte namespace so that the engine and the metadata quorum never collide:
//
//	0x01 'm' ...                                raftmeta: raft log and stable store (owned by raftmeta)
//	0x02 'V'                                    data-dir format version (uint32)
//	0x02 'P' topicID(16) partition(4)           partition state (topic name, log start, leader epoch, config)
//	0x02 'D' topicID(16) partition(4) 'I' offset(8)  sparse offset index: batch at offset is at position(8) of its segment; max timestamp before it(8)
//	0x02 'D' topicID(16) partition(4) 'G' base(8)    segment summary: max timestamp, its offset and epoch, creation time
//	0x02 'D' topicID(16) partition(4) 'R'            recovery point: the index, producer, epoch and aborted entries cover the log below it
//	0x02 'D' topicID(16) partition(4) 'C' base(8)    compaction of segment base is being installed
//	0x02 'D' topicID(16) partition(4) 'E' epoch(4)  leader-epoch cache entry: epoch -> start offset
//	0x02 'D' topicID(16) partition(4) 'S' pid(8)    idempotent producer state
//	0x02 'D' topicID(16) partition(4) 'A' last(8) pid(8)  aborted transaction of pid ending at offset last: pid(8) first(8)
//	0x02 'D' topicID(16) partition(4) 'H'            a follower's high watermark (replica.go)
//
// Record batches themselves are in segment files (see the engine's segment.go), not in
// Pebble. Format version 1 kept them under 'L' base(8) with an index entry
// under 'M' base(8); Open migrates such a store (the engine's migrate.go).
//
// All integers are big endian. Offsets, epochs and producer IDs stored here
// are never negative, so byte order is numeric order. Everything of a
// partition except its state key lives under one 'D' prefix, so deleting a
// partition is one range deletion. Namespaces 0x00 and 0x03-0xff are free.
const (
	NS          = 0x02 // the engine's namespace
	KindVersion = 'V'
	KindState   = 'P'
	KindData    = 'D'
	SubIndex    = 'I'
	SubSegment  = 'G'
	SubRecovery = 'R'
	SubCompact  = 'C'
	SubEpoch    = 'E'
	SubProduce  = 'S'
	SubAborted  = 'A'
	SubHWM      = 'H'

	// Format version 1 only; read by the migration.
	SubV1Log  = 'L'
	SubV1Meta = 'M'
)

// Version is the key of the data-dir format version.
var Version = []byte{NS, KindVersion}

// State is the key of a partition's state.
func State(id [16]byte, p int32) []byte {
	k := make([]byte, 0, 22)
	k = append(k, NS, KindState)
	k = append(k, id[:]...)
	return binary.BigEndian.AppendUint32(k, uint32(p))
}

// Data is the prefix of all of a partition's data keys.
func Data(id [16]byte, p int32) []byte {
	k := make([]byte, 0, 31)
	k = append(k, NS, KindData)
	k = append(k, id[:]...)
	return binary.BigEndian.AppendUint32(k, uint32(p))
}

// Sub is the prefix of a partition's data keys of one kind.
func Sub(id [16]byte, p int32, sub byte) []byte {
	return append(Data(id, p), sub)
}

// Sub64 is a partition's data key of one kind at v.
func Sub64(id [16]byte, p int32, sub byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(Sub(id, p, sub), uint64(v))
}

func Index(id [16]byte, p int32, offset int64) []byte { return Sub64(id, p, SubIndex, offset) }
func Segment(id [16]byte, p int32, base int64) []byte { return Sub64(id, p, SubSegment, base) }
func Compact(id [16]byte, p int32, base int64) []byte { return Sub64(id, p, SubCompact, base) }
func Recovery(id [16]byte, p int32) []byte            { return Sub(id, p, SubRecovery) }

func Epoch(id [16]byte, p int32, epoch int32) []byte {
	return binary.BigEndian.AppendUint32(Sub(id, p, SubEpoch), uint32(epoch))
}

func Producer(id [16]byte, p int32, pid int64) []byte { return Sub64(id, p, SubProduce, pid) }

// Aborted is the bound of the aborted-transaction entries ending below
// last, for range deletions; AbortedEntry is one entry's key (a barrier
// may end several transactions at one offset).
func Aborted(id [16]byte, p int32, last int64) []byte { return Sub64(id, p, SubAborted, last) }

func AbortedEntry(id [16]byte, p int32, last, pid int64) []byte {
	return binary.BigEndian.AppendUint64(Aborted(id, p, last), uint64(pid))
}

// PrefixEnd returns the smallest key greater than every key with prefix.
func PrefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// Suffix64 decodes the trailing 8 bytes of a key.
func Suffix64(k []byte) int64 { return int64(binary.BigEndian.Uint64(k[len(k)-8:])) }

// Suffix32 decodes the trailing 4 bytes of a key.
func Suffix32(k []byte) int32 { return int32(binary.BigEndian.Uint32(k[len(k)-4:])) }
