package engine

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
//
// Record batches themselves are in segment files (see segment.go), not in
// Pebble. Format version 1 kept them under 'L' base(8) with an index entry
// under 'M' base(8); Open migrates such a store (migrate.go).
//
// All integers are big endian. Offsets, epochs and producer IDs stored here
// are never negative, so byte order is numeric order. Everything of a
// partition except its state key lives under one 'D' prefix, so deleting a
// partition is one range deletion. Namespaces 0x00 and 0x03-0xff are free.
const (
	nsEngine    = 0x02
	kindVersion = 'V'
	kindState   = 'P'
	kindData    = 'D'
	subIndex    = 'I'
	subSegment  = 'G'
	subRecovery = 'R'
	subCompact  = 'C'
	subEpoch    = 'E'
	subProduce  = 'S'
	subAborted  = 'A'

	// Format version 1 only; read by the migration.
	subV1Log  = 'L'
	subV1Meta = 'M'
)

// formatVersion is the data-dir format this engine writes: 1 kept record
// batches in Pebble, 2 keeps them in segment files.
const formatVersion = 2

var versionKey = []byte{nsEngine, kindVersion}

func stateKey(id TopicID, p int32) []byte {
	k := make([]byte, 0, 22)
	k = append(k, nsEngine, kindState)
	k = append(k, id[:]...)
	return binary.BigEndian.AppendUint32(k, uint32(p))
}

// dataPrefix is the prefix of all of a partition's data keys.
func dataPrefix(id TopicID, p int32) []byte {
	k := make([]byte, 0, 31)
	k = append(k, nsEngine, kindData)
	k = append(k, id[:]...)
	return binary.BigEndian.AppendUint32(k, uint32(p))
}

func subPrefix(id TopicID, p int32, sub byte) []byte {
	return append(dataPrefix(id, p), sub)
}

func sub64Key(id TopicID, p int32, sub byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(subPrefix(id, p, sub), uint64(v))
}

func indexKey(id TopicID, p int32, offset int64) []byte { return sub64Key(id, p, subIndex, offset) }
func segmentKey(id TopicID, p int32, base int64) []byte { return sub64Key(id, p, subSegment, base) }
func compactKey(id TopicID, p int32, base int64) []byte { return sub64Key(id, p, subCompact, base) }
func recoveryKey(id TopicID, p int32) []byte            { return subPrefix(id, p, subRecovery) }

func epochKey(id TopicID, p int32, epoch int32) []byte {
	return binary.BigEndian.AppendUint32(subPrefix(id, p, subEpoch), uint32(epoch))
}

func producerKey(id TopicID, p int32, pid int64) []byte { return sub64Key(id, p, subProduce, pid) }

// abortedKey is the bound of the aborted-transaction entries ending below
// last, for range deletions; abortedEntryKey is one entry's key (a barrier
// may end several transactions at one offset).
func abortedKey(id TopicID, p int32, last int64) []byte { return sub64Key(id, p, subAborted, last) }

func abortedEntryKey(id TopicID, p int32, a abortedTxn) []byte {
	return binary.BigEndian.AppendUint64(abortedKey(id, p, a.Last), uint64(a.PID))
}

// prefixEnd returns the smallest key greater than every key with prefix.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// keySuffix64 decodes the trailing 8 bytes of a key.
func keySuffix64(k []byte) int64 { return int64(binary.BigEndian.Uint64(k[len(k)-8:])) }

func keySuffix32(k []byte) int32 { return int32(binary.BigEndian.Uint32(k[len(k)-4:])) }

func be64(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }
