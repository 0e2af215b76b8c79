package raftmeta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// Keys of the raft log and stable store in the broker's Pebble instance:
//
//	0x01 'm' 'l' index(8, big-endian) → encoded raft.Log
//	0x01 'm' 's' key                  → stable store value
//
// The engine owns every other prefix.
var (
	logPrefix    = []byte{0x01, 'm', 'l'}
	logEnd       = []byte{0x01, 'm', 'l' + 1}
	stablePrefix = []byte{0x01, 'm', 's'}
)

// ErrKeyNotFound is what the stable store returns for a missing key.
// hashicorp/raft compares the message ("not found"), as raft-boltdb's
// ErrKeyNotFound reads, to recognise a fresh store.
var ErrKeyNotFound = errors.New("not found")

// Store is a raft.LogStore and raft.StableStore on Pebble. Every write is
// synced: raft's safety depends on votes, terms and entries being durable
// before it answers.
type Store struct {
	db *pebble.DB
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// NewStore returns a store over db under the raftmeta key prefix.
func NewStore(db *pebble.DB) *Store { return &Store{db: db} }

func logKey(index uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), logPrefix...), index)
}

func (s *Store) edgeIndex(last bool) (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logPrefix, UpperBound: logEnd})
	if err != nil {
		return 0, fmt.Errorf("raftmeta: log iterator: %w", err)
	}
	defer it.Close()
	ok := false
	if last {
		ok = it.Last()
	} else {
		ok = it.First()
	}
	if !ok {
		return 0, it.Error()
	}
	return binary.BigEndian.Uint64(it.Key()[len(logPrefix):]), nil
}

// FirstIndex returns the first index in the log, 0 if it is empty.
func (s *Store) FirstIndex() (uint64, error) { return s.edgeIndex(false) }

// LastIndex returns the last index in the log, 0 if it is empty.
func (s *Store) LastIndex() (uint64, error) { return s.edgeIndex(true) }

// GetLog reads the entry at index into l, or returns raft.ErrLogNotFound.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	v, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftmeta: get log %d: %w", index, err)
	}
	defer closer.Close()
	if err := decodeLog(v, l); err != nil {
		return fmt.Errorf("raftmeta: log %d: %w", index, err)
	}
	l.Index = index
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores entries in one synced batch.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		if err := b.Set(logKey(l.Index), encodeLog(l), nil); err != nil {
			return fmt.Errorf("raftmeta: store log %d: %w", l.Index, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raftmeta: store logs: %w", err)
	}
	return nil
}

// DeleteRange deletes the entries min..max, inclusive.
func (s *Store) DeleteRange(min, max uint64) error {
	end := logEnd
	if max < math.MaxUint64 {
		end = logKey(max + 1)
	}
	if err := s.db.DeleteRange(logKey(min), end, pebble.Sync); err != nil {
		return fmt.Errorf("raftmeta: delete logs %d..%d: %w", min, max, err)
	}
	return nil
}

func stableKey(k []byte) []byte { return append(append([]byte(nil), stablePrefix...), k...) }

// Set stores a stable value.
func (s *Store) Set(k, v []byte) error {
	if err := s.db.Set(stableKey(k), v, pebble.Sync); err != nil {
		return fmt.Errorf("raftmeta: set %q: %w", k, err)
	}
	return nil
}

// Get returns a stable value, or ErrKeyNotFound.
func (s *Store) Get(k []byte) ([]byte, error) {
	v, closer, err := s.db.Get(stableKey(k))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("raftmeta: get %q: %w", k, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// SetUint64 stores a stable uint64.
func (s *Store) SetUint64(k []byte, v uint64) error {
	return s.Set(k, binary.BigEndian.AppendUint64(nil, v))
}

// GetUint64 returns a stable uint64, or 0 and ErrKeyNotFound.
func (s *Store) GetUint64(k []byte) (uint64, error) {
	v, err := s.Get(k)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftmeta: %q holds %d bytes, not a uint64", k, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// A log entry is term(8) type(1) appendedAt(8, unix ns) len(data)(4) data extensions.
const logHeader = 8 + 1 + 8 + 4

func encodeLog(l *raft.Log) []byte {
	b := make([]byte, 0, logHeader+len(l.Data)+len(l.Extensions))
	b = binary.BigEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Data)))
	b = append(b, l.Data...)
	return append(b, l.Extensions...)
}

func decodeLog(b []byte, l *raft.Log) error {
	if len(b) < logHeader {
		return fmt.Errorf("short entry (%d bytes)", len(b))
	}
	n := int(binary.BigEndian.Uint32(b[17:]))
	if len(b)-logHeader < n {
		return fmt.Errorf("entry data of %d bytes overruns %d", n, len(b))
	}
	*l = raft.Log{Term: binary.BigEndian.Uint64(b), Type: raft.LogType(b[8])}
	if at := int64(binary.BigEndian.Uint64(b[9:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	rest := b[logHeader:]
	if n > 0 {
		l.Data = append([]byte(nil), rest[:n]...)
	}
	if len(rest) > n {
		l.Extensions = append([]byte(nil), rest[n:]...)
	}
	return nil
}
