package raftmeta

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

func newStore(t *testing.T) (*Store, *pebble.DB) {
	db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return NewStore(db), db
}

func testLog(i uint64) *raft.Log {
	return &raft.Log{
		Index: i, Term: i / 3, Type: raft.LogCommand,
		Data:       []byte{byte(i), 'd'},
		Extensions: []byte{'x', byte(i)},
		AppendedAt: time.Unix(1700000000, int64(i)).Local(),
	}
}

func checkIndexes(t *testing.T, s *Store, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if f != first || l != last {
		t.Fatalf("first/last = %d/%d, want %d/%d", f, l, first, last)
	}
}

func TestLogStore(t *testing.T) {
	s, db := newStore(t)
	checkIndexes(t, s, 0, 0)
	var got raft.Log
	if err := s.GetLog(1, &got); err != raft.ErrLogNotFound {
		t.Fatalf("GetLog on empty store: %v", err)
	}

	// Keys outside the prefix, on both sides, must not leak in.
	for _, k := range [][]byte{{0x01, 'l', 0xff}, {0x01, 'm', 'k'}, {0x01, 'm', 'm'}, {0x02}} {
		if err := db.Set(k, []byte("other"), nil); err != nil {
			t.Fatal(err)
		}
	}
	checkIndexes(t, s, 0, 0)

	if err := s.StoreLog(testLog(1)); err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(2); i <= 300; i++ {
		logs = append(logs, testLog(i))
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, s, 1, 300)
	for _, i := range []uint64{1, 2, 255, 256, 300} {
		if err := s.GetLog(i, &got); err != nil {
			t.Fatal(err)
		}
		want := testLog(i)
		if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
			!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) || !got.AppendedAt.Equal(want.AppendedAt) {
			t.Fatalf("log %d: got %+v want %+v", i, got, want)
		}
	}
	// Entries without data, extensions or time round-trip as such.
	bare := &raft.Log{Index: 301, Term: 7, Type: raft.LogNoop}
	if err := s.StoreLog(bare); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(301, &got); err != nil || !reflect.DeepEqual(&got, bare) {
		t.Fatalf("bare log: %+v %v", got, err)
	}

	// Compaction from the front, truncation from the back.
	if err := s.DeleteRange(1, 100); err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, s, 101, 301)
	if err := s.GetLog(100, &got); err != raft.ErrLogNotFound {
		t.Fatalf("deleted log: %v", err)
	}
	if err := s.DeleteRange(250, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, s, 101, 249)
	// Overwrite after truncation (a follower's log conflict).
	if err := s.StoreLogs([]*raft.Log{testLog(250)}); err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, s, 101, 250)
	if err := s.DeleteRange(0, 1000); err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, s, 0, 0)
	if v, closer, err := db.Get([]byte{0x01, 'm', 'm'}); err != nil || string(v) != "other" {
		t.Fatalf("foreign key damaged: %q %v", v, err)
	} else {
		closer.Close()
	}
}

func TestStableStore(t *testing.T) {
	s, _ := newStore(t)
	// hashicorp/raft recognises a fresh store by the message "not found".
	if v, err := s.Get([]byte("CurrentTerm")); err == nil || err.Error() != "not found" || len(v) != 0 {
		t.Fatalf("Get missing: %q %v", v, err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); !errors.Is(err, ErrKeyNotFound) || v != 0 {
		t.Fatalf("GetUint64 missing: %d %v", v, err)
	}
	if err := s.Set([]byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("k"), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get([]byte("k")); err != nil || string(v) != "v2" {
		t.Fatalf("Get: %q %v", v, err)
	}
	for _, n := range []uint64{0, 1, math.MaxUint64} {
		if err := s.SetUint64([]byte("CurrentTerm"), n); err != nil {
			t.Fatal(err)
		}
		if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != n {
			t.Fatalf("GetUint64: %d %v, want %d", v, err, n)
		}
	}
	// Stable keys are not log entries.
	checkIndexes(t, s, 0, 0)
}
