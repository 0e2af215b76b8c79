package mirrorstate

import (
	"encoding/hex"
	"testing"

	"github.com/twmb/franz-go/pkg/kbin"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

var (
	testKey   = PartitionKey{Mirror: "m1", Topic: "orders", Partition: 3}
	testState = PartitionState{State: Stopping, Reason: "failover", TopicID: uuid.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		LMO: 41, LME: 7, StopAt: 42, StopEpoch: 8, StopDone: true, StopIndex: 99, CompleteAt: 1700000000123,
		Cut: Cut{Set: "orders,payments", At: 40, Time: 1700000000000, Records: 2, Ms: 15}}
	testEntry = &ManifestEntry{DivergedRange: mirrorproto.DivergedRange{Topic: "orders", Partition: 3, FirstOffset: 10, LastOffset: 12,
		FirstEpoch: 4, LastEpoch: 5, Records: 3, FirstTimestamp: 1000, LastTimestamp: 2000, TruncatedAt: 3000,
		Cause: "unclean election", CopyStart: 100, CopyEnd: 103}, Done: true}
)

func replay(t *testing.T, s *Shard, recs ...coord.Record) {
	t.Helper()
	for _, r := range recs {
		if err := s.Replay(r.Key, r.Value); err != nil {
			t.Fatalf("replay %x: %v", r.Key, err)
		}
	}
}

// TestRecordRoundTrip writes a partition's state and a manifest entry as
// records, replays them into a fresh shard and gets the same state and
// entry back; tombstones then remove the state.
func TestRecordRoundTrip(t *testing.T) {
	recs := StateRecords(testKey, NewPartitionState(), testState)
	if len(recs) != 2 {
		t.Fatalf("%d records from a new state with offsets, want the state and the offsets", len(recs))
	}
	mk := ManifestKey{PartitionKey: testKey, CopyStart: testEntry.CopyStart}
	recs = append(recs, EntryRecord(mk, testEntry))

	s := NewShard()
	replay(t, s, recs...)
	if got := s.Parts[testKey]; got == nil || *got != testState {
		t.Fatalf("replayed state\n%+v, want\n%+v", got, testState)
	}
	if got := s.Diverged[mk]; got == nil || *got != *testEntry {
		t.Fatalf("replayed manifest entry\n%+v, want\n%+v", got, testEntry)
	}

	// Only what changed is written: the offsets alone, then the state alone.
	moved := testState
	moved.LMO, moved.LME = 50, 9
	if recs := StateRecords(testKey, testState, moved); len(recs) != 1 || recs[0].Key[1] != byte(recLastMirrored) {
		t.Fatalf("offsets moved: records %x", recs)
	}
	done := testState
	done.State, done.Reason = Stopped, ""
	if recs := StateRecords(testKey, testState, done); len(recs) != 1 || recs[0].Key[1] != byte(recPartState) {
		t.Fatalf("state moved: records %x", recs)
	}
	if recs := StateRecords(testKey, testState, testState); len(recs) != 0 {
		t.Fatalf("nothing moved: records %x", recs)
	}
	// Offsets replayed alone keep the state, and the state replayed alone
	// keeps the offsets.
	replay(t, s, StateRecords(testKey, testState, moved)...)
	want := moved
	want.State, want.Reason = Stopped, ""
	replay(t, s, StateRecords(testKey, moved, want)...)
	if got := *s.Parts[testKey]; got != want {
		t.Fatalf("after two updates\n%+v, want\n%+v", got, want)
	}
	replay(t, s, Tombstones(testKey)...)
	if _, ok := s.Parts[testKey]; ok {
		t.Fatal("tombstones left the state")
	}
	// A manifest entry's tombstone removes it.
	replay(t, s, coord.Record{Key: divergedKey(mk)})
	if _, ok := s.Diverged[mk]; ok {
		t.Fatal("tombstone left the manifest entry")
	}
}

// TestRecordBytes pins the encoding of __mirror_state records byte for
// byte: a broker reads back what older ones wrote.
func TestRecordBytes(t *testing.T) {
	recs := StateRecords(testKey, NewPartitionState(), testState)
	entry := EntryRecord(ManifestKey{PartitionKey: testKey, CopyStart: 100}, testEntry)
	for _, c := range []struct {
		name string
		got  []byte
		want string
	}{
		{"state key", recs[0].Key, "000200026d3100066f726465727300000003"},
		{"state value", recs[0].Value, "0004060102030405060708090a0b0c0d0e0f1000086661696c6f766572000000000000002a00000008010000000000000063000f6f72646572732c7061796d656e747300000000000000280000018bcfe568000000000000000002000000000000000f0000018bcfe5687b"},
		{"offsets key", recs[1].Key, "000100026d3100066f726465727300000003"},
		{"offsets value", recs[1].Value, "0000000000000000002900000007"},
		{"manifest key", entry.Key, "000300026d3100066f7264657273000000030000000000000064"},
		{"manifest value", entry.Value, "0000000000000000000a000000000000000c0000000400000005000000000000000300000000000003e800000000000007d00000000000000bb80010756e636c65616e20656c656374696f6e000000000000006701"},
	} {
		if got := hex.EncodeToString(c.got); got != c.want {
			t.Errorf("%s\n%s, want\n%s", c.name, got, c.want)
		}
	}
	tomb := Tombstones(testKey)
	if len(tomb) != 2 || hex.EncodeToString(tomb[0].Key) != "000200026d3100066f726465727300000003" ||
		hex.EncodeToString(tomb[1].Key) != "000100026d3100066f726465727300000003" || tomb[0].Value != nil || tomb[1].Value != nil {
		t.Errorf("tombstones %x", tomb)
	}
}

// oldStateValue encodes s as state value version v wrote it: version 0
// has the state, topic ID and reason; 1 adds StopAt and StopEpoch, 2
// StopDone, 3 StopIndex, 4 the consistent cut and CompleteAt.
func oldStateValue(v int16, s PartitionState) []byte {
	b := kbin.AppendInt16(nil, v)
	b = kbin.AppendInt8(b, int8(s.State))
	b = kbin.AppendUuid(b, s.TopicID)
	b = kbin.AppendString(b, s.Reason)
	if v >= 1 {
		b = kbin.AppendInt64(b, s.StopAt)
		b = kbin.AppendInt32(b, s.StopEpoch)
	}
	if v >= 2 {
		b = kbin.AppendBool(b, s.StopDone)
	}
	if v >= 3 {
		b = kbin.AppendInt64(b, s.StopIndex)
	}
	if v >= 4 {
		b = kbin.AppendString(b, s.Cut.Set)
		for _, x := range []int64{s.Cut.At, s.Cut.Time, s.Cut.Records, s.Cut.Ms, s.CompleteAt} {
			b = kbin.AppendInt64(b, x)
		}
	}
	return b
}

// TestOldStateValues replays state values of versions 0 to 3, which lack
// the fields later versions added: those take the defaults of a
// partition nothing was recorded for (no stop offset or epoch, not done,
// no stop index, no cut, CompleteAt unknown), and the offsets record is
// unaffected.
func TestOldStateValues(t *testing.T) {
	if got := stateValue(testState); string(got) != string(oldStateValue(4, testState)) {
		t.Fatalf("version 4 of the test encoder differs from stateValue:\n%x\n%x", oldStateValue(4, testState), got)
	}
	for v := int16(0); v <= 4; v++ {
		want := NewPartitionState()
		want.State, want.TopicID, want.Reason = testState.State, testState.TopicID, testState.Reason
		want.LMO, want.LME = testState.LMO, testState.LME
		if v >= 1 {
			want.StopAt, want.StopEpoch = testState.StopAt, testState.StopEpoch
		}
		if v >= 2 {
			want.StopDone = true
		}
		if v >= 3 {
			want.StopIndex = testState.StopIndex
		}
		if v >= 4 {
			want.Cut, want.CompleteAt = testState.Cut, testState.CompleteAt
		}
		s := NewShard()
		replay(t, s,
			coord.Record{Key: recordKey(recLastMirrored, testKey), Value: offsetsValue(testState)},
			coord.Record{Key: recordKey(recPartState, testKey), Value: oldStateValue(v, testState)})
		if got := *s.Parts[testKey]; got != want {
			t.Errorf("version %d replayed as\n%+v, want\n%+v", v, got, want)
		}
	}
	// A version 3 value over a version 4 one resets the cut it lacks.
	s := NewShard()
	replay(t, s, coord.Record{Key: recordKey(recPartState, testKey), Value: stateValue(testState)},
		coord.Record{Key: recordKey(recPartState, testKey), Value: oldStateValue(3, testState)})
	if got := s.Parts[testKey].Cut; got != (Cut{At: -1}) {
		t.Errorf("cut after a version 3 value: %+v", got)
	}
}

// TestReplayRefuses: a record that does not decode stops the shard's
// load rather than loading a wrong state.
func TestReplayRefuses(t *testing.T) {
	s := NewShard()
	for name, r := range map[string]coord.Record{
		"short key":      {Key: []byte{0, 2, 0}, Value: stateValue(testState)},
		"unknown type":   {Key: recordKey(9, testKey), Value: offsetsValue(testState)},
		"short value":    {Key: recordKey(recPartState, testKey), Value: stateValue(testState)[:20]},
		"short manifest": {Key: divergedKey(ManifestKey{testKey, 1}), Value: divergedValue(testEntry)[:9]},
	} {
		if err := s.Replay(r.Key, r.Value); err == nil {
			t.Errorf("%s: replayed", name)
		}
	}
}

// TestShardVersion: the version moves with what a partition's leader
// acts on (its state, reason, the failover's fields), not with what only
// the leader writes (CompleteAt, the last mirrored offset and epoch).
func TestShardVersion(t *testing.T) {
	s := NewShard()
	k := PartitionKey{Mirror: "m", Topic: "t", Partition: 0}
	st := NewPartitionState()
	st.State = Mirroring
	s.Set(k, st)
	v := s.Version
	if v == 0 {
		t.Fatal("a new partition's state did not move the version")
	}
	st.CompleteAt, st.LMO, st.LME = 1000, 5, 2
	s.Set(k, st)
	if s.Version != v {
		t.Fatalf("CompleteAt and the last mirrored offset moved the version: %d to %d", v, s.Version)
	}
	if s.Parts[k].CompleteAt != 1000 {
		t.Fatalf("CompleteAt %d not kept", s.Parts[k].CompleteAt)
	}
	st.State = Pausing
	s.Set(k, st)
	if s.Version == v {
		t.Fatal("a state change did not move the version")
	}
}
