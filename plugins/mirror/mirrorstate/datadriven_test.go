package mirrorstate

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/tandem-kafka/tandem/engine/coord"
	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// TestDataDriven runs the files in testdata: a mirror partition's states
// moved as the state store moves them (checking State.CanMove first),
// the __mirror_state records each move writes, and those records
// replayed as a coordinator shard loads them. The commands are:
//
//	transitions
//	    prints CanMove for every pair of states: the KIP's table.
//	move p=MIRROR/TOPIC/PARTITION to=STATE [field=value...]
//	    moves the partition from its current state (NewPartitionState if
//	    none) to STATE with the fields given changed (topic=@name lmo lme
//	    reason stop-at stop-epoch stop-done stop-index complete-at
//	    cut-set cut-at cut-time cut-records cut-ms), as the state store
//	    does: refused with its error when CanMove refuses, otherwise
//	    StateRecords are written and Set. Prints which records were
//	    written, the partition's state and the shard's version.
//	write-old version=V p=... to=STATE [field=value...]
//	    writes the partition's state record as a broker of value version
//	    V wrote it, for reload only (which then compares no more).
//	remove p=...
//	    writes the partition's Tombstones and forgets it.
//	diverged p=... copy-start=N [field=value...] / undiverge p=... copy-start=N
//	    writes a divergence manifest entry (EntryRecord) / its tombstone.
//	state
//	    prints the shard: every partition's state, manifest entry, and
//	    the version.
//	records
//	    prints every record written so far, key and value in hex.
//	reload
//	    replays every record written so far into a new shard, as a
//	    broker that loads the shard does, and prints it.
//	replay
//	    <key hex> <value hex | nil>, one record per line
//	    replays the records into a new shard and prints it, or the
//	    error that stops the load.
//
// Every command that writes also replays what it wrote into a second
// shard, which must come out as the writer's (the version aside: a load
// counts every record).
//
// go test ./plugins/mirror/mirrorstate -run TestDataDriven -rewrite
// rewrites the expected output.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newStateHarness()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

// TestTransitionsCovered fails when a transition CanMove allows is made
// by no move of the testdata: a transition added to the KIP's table
// fails here until testdata makes it.
func TestTransitionsCovered(t *testing.T) {
	made := map[[2]State]bool{}
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newStateHarness()
		h.moved = func(from, to State) { made[[2]State{from, to}] = true }
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			h.run(t, d)
			return d.Expected
		})
	})
	for from := Unknown; from <= Failed; from++ {
		for to := Unknown; to <= Failed; to++ {
			if from != to && from.CanMove(to) && !made[[2]State{from, to}] {
				t.Errorf("no testdata moves a partition from %s to %s", from, to)
			}
		}
	}
}

func newStateHarness() *stateHarness {
	return &stateHarness{writer: newTestShard(), replica: newTestShard(), names: map[uuid.UUID]string{}}
}

type stateHarness struct {
	writer  *Shard // the shard the records are written for (Set)
	replica *Shard // the records replayed as they are written
	log     []coord.Record
	names   map[uuid.UUID]string // @name aliases of topic IDs
	// old is set once write-old wrote a record the writer does not
	// hold: reload no longer compares.
	old bool
	// moved, if set, is told of every move made.
	moved func(from, to State)
}

// newTestShard is NewShard with a fixed incarnation: the output does not
// print it, but the shards are compared whole.
func newTestShard() *Shard {
	s := NewShard()
	s.Incarnation = 0
	return s
}

func (h *stateHarness) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "transitions":
		return transitionTable()
	case "move":
		return h.move(t, d)
	case "write-old":
		return h.writeOld(t, d)
	case "remove":
		k := partitionArg(t, d)
		delete(h.writer.Parts, k)
		return h.write(Tombstones(k)...) + h.render(h.writer)
	case "diverged":
		k := partitionArg(t, d)
		mk, e := h.entry(t, d, k)
		h.writer.Diverged[mk] = e
		return h.write(EntryRecord(mk, e)) + h.render(h.writer)
	case "undiverge":
		k := partitionArg(t, d)
		var start int64
		d.ScanArgs(t, "copy-start", &start)
		mk := ManifestKey{k, start}
		delete(h.writer.Diverged, mk)
		return h.write(coord.Record{Key: divergedKey(mk)}) + h.render(h.writer)
	case "state":
		return h.render(h.writer)
	case "records":
		var b strings.Builder
		for _, r := range h.log {
			fmt.Fprintf(&b, "%s\n", renderRecord(r))
		}
		return b.String()
	case "reload":
		s := newTestShard()
		for _, r := range h.log {
			if err := s.Replay(r.Key, r.Value); err != nil {
				return "error: " + err.Error()
			}
		}
		if h.old {
			return h.render(s)
		}
		return h.render(s) + h.compare("reloaded", s)
	case "replay":
		return h.replay(t, d)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

// transitionTable prints CanMove for every pair of states, a row per
// state moved from: "+" allowed, "." refused. The columns are the states
// moved to, in the same order, abbreviated.
func transitionTable() string {
	var b strings.Builder
	head := fmt.Sprintf("%-14s", "from \\ to")
	for _, s := range []string{"UNKN", "PREP", "MIRR", "FENC", "PSNG", "PSED", "STPG", "STPD", "FAIL"} {
		head += fmt.Sprintf(" %-4s", s)
	}
	b.WriteString(strings.TrimRight(head, " ") + "\n")
	for from := Unknown; from <= Failed; from++ {
		row := fmt.Sprintf("%-14s", from)
		for to := Unknown; to <= Failed; to++ {
			c := "."
			if from.CanMove(to) {
				c = "+"
			}
			row += fmt.Sprintf(" %-4s", c)
		}
		b.WriteString(strings.TrimRight(row, " ") + "\n")
	}
	return b.String()
}

// move is the state store's write of one partition (statestore's
// Update.next and writeShardLocal): CanMove, then the records, then Set.
func (h *stateHarness) move(t *testing.T, d *datadriven.TestData) string {
	k := partitionArg(t, d)
	cur := NewPartitionState()
	if p := h.writer.Parts[k]; p != nil {
		cur = *p
	}
	next := h.fields(t, d, cur)
	if !cur.State.CanMove(next.State) {
		return fmt.Sprintf("error: %s: %s cannot move to %s\nstate unchanged\n", renderKey(k), cur.State, next.State)
	}
	recs := StateRecords(k, cur, next)
	names := make([]string, 0, len(recs))
	for _, r := range recs {
		names = append(names, recordName(r))
	}
	if len(names) == 0 {
		names = append(names, "nothing")
	}
	was := h.writer.Version
	h.writer.Set(k, next)
	if h.moved != nil {
		h.moved(cur.State, next.State)
	}
	out := h.write(recs...)
	return fmt.Sprintf("wrote %s\n%s\nversion %d -> %d\n", strings.Join(names, ", "), h.renderPart(k, &next), was, h.writer.Version) + out
}

// writeOld writes a state record of an older value version, as a broker
// before the fields it lacks wrote it: only a load reads it.
func (h *stateHarness) writeOld(t *testing.T, d *datadriven.TestData) string {
	k := partitionArg(t, d)
	var v int64
	d.ScanArgs(t, "version", &v)
	st := h.fields(t, d, NewPartitionState())
	r := coord.Record{Key: recordKey(recPartState, k), Value: oldStateValue(int16(v), st)}
	h.log = append(h.log, r)
	h.old = true
	return renderRecord(r) + "\n"
}

// write appends recs to the log and replays them into the replica, which
// must then hold what the writer holds.
func (h *stateHarness) write(recs ...coord.Record) string {
	h.log = append(h.log, recs...)
	for _, r := range recs {
		if err := h.replica.Replay(r.Key, r.Value); err != nil {
			return fmt.Sprintf("REPLAY FAILED: %v\n", err)
		}
	}
	return h.compare("replica", h.replica)
}

// compare reports how s differs from the writer's shard, but for the
// version (a load counts every record, Set only some changes).
func (h *stateHarness) compare(name string, s *Shard) string {
	var b strings.Builder
	for _, k := range sortedKeys(h.writer.Parts, s.Parts) {
		w, o := h.writer.Parts[k], s.Parts[k]
		if w == nil || o == nil || *w != *o {
			fmt.Fprintf(&b, "%s DIFFERS: %s\n  writer: %s\n", strings.ToUpper(name), renderKey(k), h.renderPart(k, w))
			fmt.Fprintf(&b, "  %s: %s\n", name, h.renderPart(k, o))
		}
	}
	for mk, w := range h.writer.Diverged {
		if o := s.Diverged[mk]; o == nil || *o != *w {
			fmt.Fprintf(&b, "%s DIFFERS: manifest entry %s@%d\n", strings.ToUpper(name), renderKey(mk.PartitionKey), mk.CopyStart)
		}
	}
	for mk := range s.Diverged {
		if h.writer.Diverged[mk] == nil {
			fmt.Fprintf(&b, "%s HAS AN EXTRA manifest entry %s@%d\n", strings.ToUpper(name), renderKey(mk.PartitionKey), mk.CopyStart)
		}
	}
	return b.String()
}

func (h *stateHarness) replay(t *testing.T, d *datadriven.TestData) string {
	s := newTestShard()
	for l := range strings.Lines(d.Input) {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 2 {
			d.Fatalf(t, "want <key hex> <value hex | nil>: %q", l)
		}
		key, err := hex.DecodeString(f[0])
		if err != nil {
			d.Fatalf(t, "key: %v", err)
		}
		var value []byte
		if f[1] != "nil" {
			if value, err = hex.DecodeString(f[1]); err != nil {
				d.Fatalf(t, "value: %v", err)
			}
		}
		if err := s.Replay(key, value); err != nil {
			return "error: " + err.Error() + "\n"
		}
	}
	return h.render(s)
}

// partitionArg reads p=MIRROR/TOPIC/PARTITION.
func partitionArg(t *testing.T, d *datadriven.TestData) PartitionKey {
	var s string
	d.ScanArgs(t, "p", &s)
	f := strings.Split(s, "/")
	if len(f) != 3 {
		d.Fatalf(t, "p=%s: want MIRROR/TOPIC/PARTITION", s)
	}
	n, err := strconv.ParseInt(f[2], 10, 32)
	if err != nil {
		d.Fatalf(t, "p=%s: %v", s, err)
	}
	return PartitionKey{Mirror: f[0], Topic: f[1], Partition: int32(n)}
}

// stateByName is the state a KIP name stands for.
func stateByName(t *testing.T, d *datadriven.TestData, name string) State {
	for s := Unknown; s <= Failed; s++ {
		if s.String() == name {
			return s
		}
	}
	n, err := strconv.ParseInt(name, 10, 8) // a number the KIP does not name
	if err != nil {
		d.Fatalf(t, "no state %q", name)
	}
	return State(n)
}

// fields is st with to= and the fields the command gives.
func (h *stateHarness) fields(t *testing.T, d *datadriven.TestData, st PartitionState) PartitionState {
	var to string
	d.ScanArgs(t, "to", &to)
	st.State = stateByName(t, d, to)
	var topic string
	if d.MaybeScanArgs(t, "topic", &topic) {
		st.TopicID = h.uuid(topic)
	}
	d.MaybeScanArgs(t, "reason", &st.Reason)
	d.MaybeScanArgs(t, "stop-done", &st.StopDone)
	d.MaybeScanArgs(t, "cut-set", &st.Cut.Set)
	for _, f := range []struct {
		key string
		i64 *int64
		i32 *int32
	}{
		{"lmo", &st.LMO, nil}, {"lme", nil, &st.LME}, {"stop-at", &st.StopAt, nil}, {"stop-epoch", nil, &st.StopEpoch},
		{"stop-index", &st.StopIndex, nil}, {"complete-at", &st.CompleteAt, nil}, {"cut-at", &st.Cut.At, nil},
		{"cut-time", &st.Cut.Time, nil}, {"cut-records", &st.Cut.Records, nil}, {"cut-ms", &st.Cut.Ms, nil},
	} {
		var v int64
		if !d.MaybeScanArgs(t, f.key, &v) {
			continue
		}
		if f.i64 != nil {
			*f.i64 = v
		} else {
			*f.i32 = int32(v)
		}
	}
	return st
}

// entry reads a manifest entry's fields.
func (h *stateHarness) entry(t *testing.T, d *datadriven.TestData, k PartitionKey) (ManifestKey, *ManifestEntry) {
	e := &ManifestEntry{DivergedRange: mirrorproto.DivergedRange{Topic: k.Topic, Partition: k.Partition}}
	d.ScanArgs(t, "copy-start", &e.CopyStart)
	d.MaybeScanArgs(t, "cause", &e.Cause)
	d.MaybeScanArgs(t, "done", &e.Done)
	var fe, le int64
	if d.MaybeScanArgs(t, "first-epoch", &fe) {
		e.FirstEpoch = int32(fe)
	}
	if d.MaybeScanArgs(t, "last-epoch", &le) {
		e.LastEpoch = int32(le)
	}
	for key, p := range map[string]*int64{"first": &e.FirstOffset, "last": &e.LastOffset, "records": &e.Records,
		"first-ts": &e.FirstTimestamp, "last-ts": &e.LastTimestamp, "truncated-at": &e.TruncatedAt, "copy-end": &e.CopyEnd} {
		d.MaybeScanArgs(t, key, p)
	}
	return ManifestKey{k, e.CopyStart}, e
}

// uuid is the topic ID an @name stands for: the name's bytes,
// right-aligned, as raftmeta/metadata's testdata names them.
func (h *stateHarness) uuid(name string) uuid.UUID {
	var u uuid.UUID
	name = strings.TrimPrefix(name, "@")
	copy(u[len(u)-min(len(name), len(u)):], name)
	h.names[u] = name
	return u
}

func (h *stateHarness) render(s *Shard) string {
	var b strings.Builder
	for _, k := range sortedKeys(s.Parts) {
		fmt.Fprintf(&b, "%s\n", h.renderPart(k, s.Parts[k]))
	}
	mks := slices.SortedFunc(maps.Keys(s.Diverged), func(a, b ManifestKey) int {
		return cmp.Or(comparePartitionKeys(a.PartitionKey, b.PartitionKey), cmp.Compare(a.CopyStart, b.CopyStart))
	})
	for _, mk := range mks {
		e := s.Diverged[mk]
		fmt.Fprintf(&b, "diverged %s copy=[%d,%d) offsets=[%d,%d] epochs=[%d,%d] records=%d ts=[%d,%d] truncated-at=%d cause=%q%s\n",
			renderKey(mk.PartitionKey), e.CopyStart, e.CopyEnd, e.FirstOffset, e.LastOffset, e.FirstEpoch, e.LastEpoch,
			e.Records, e.FirstTimestamp, e.LastTimestamp, e.TruncatedAt, e.Cause, flag(" done", e.Done))
		if e.Topic != mk.Topic || e.Partition != mk.Partition || e.CopyStart != mk.CopyStart {
			fmt.Fprintf(&b, "  ENTRY UNDER ANOTHER KEY: %s-%d@%d\n", e.Topic, e.Partition, e.CopyStart)
		}
	}
	fmt.Fprintf(&b, "version %d\n", s.Version)
	return b.String()
}

// renderPart prints a partition's state: its state and offsets, then the
// fields that are not NewPartitionState's.
func (h *stateHarness) renderPart(k PartitionKey, p *PartitionState) string {
	if p == nil {
		return renderKey(k) + " none"
	}
	s := fmt.Sprintf("%s %s lmo=%d lme=%d", renderKey(k), p.State, p.LMO, p.LME)
	if !p.TopicID.IsZero() {
		name, ok := h.names[p.TopicID]
		if !ok {
			name = p.TopicID.String()
		}
		s += " topic=@" + name
	}
	if p.Reason != "" {
		s += fmt.Sprintf(" reason=%q", p.Reason)
	}
	if p.StopAt != -1 || p.StopEpoch != -1 {
		s += fmt.Sprintf(" stop-at=%d stop-epoch=%d", p.StopAt, p.StopEpoch)
	}
	s += flag(" stop-done", p.StopDone)
	if p.StopIndex != 0 {
		s += fmt.Sprintf(" stop-index=%d", p.StopIndex)
	}
	if p.CompleteAt != 0 {
		s += fmt.Sprintf(" complete-at=%d", p.CompleteAt)
	}
	if p.Cut != (Cut{At: -1}) {
		c := p.Cut
		s += fmt.Sprintf(" cut=(set=%s at=%d time=%d records=%d ms=%d)", c.Set, c.At, c.Time, c.Records, c.Ms)
	}
	return s
}

func renderKey(k PartitionKey) string { return fmt.Sprintf("%s/%s/%d", k.Mirror, k.Topic, k.Partition) }

// recordName is what a record is: its key's type, and tombstone for a
// nil value.
func recordName(r coord.Record) string {
	var name string
	switch {
	case len(r.Key) < 2:
		name = "short"
	case r.Key[1] == byte(recPartState) && r.Key[0] == 0:
		name = "state"
	case r.Key[1] == byte(recLastMirrored) && r.Key[0] == 0:
		name = "offsets"
	case r.Key[1] == byte(recDiverged) && r.Key[0] == 0:
		name = "manifest"
	default:
		name = fmt.Sprintf("type-%x", r.Key[:2])
	}
	if r.Value == nil {
		name += " tombstone"
	}
	return name
}

func renderRecord(r coord.Record) string {
	v := "nil"
	if r.Value != nil {
		v = hex.EncodeToString(r.Value)
	}
	return fmt.Sprintf("%s %s %s", recordName(r), hex.EncodeToString(r.Key), v)
}

func flag(s string, set bool) string {
	if set {
		return s
	}
	return ""
}

func comparePartitionKeys(a, b PartitionKey) int {
	return cmp.Or(cmp.Compare(a.Mirror, b.Mirror), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// sortedKeys is the union of the maps' keys, sorted.
func sortedKeys(ms ...map[PartitionKey]*PartitionState) []PartitionKey {
	var ks []PartitionKey
	for _, m := range ms {
		for k := range m {
			if !slices.Contains(ks, k) {
				ks = append(ks, k)
			}
		}
	}
	slices.SortFunc(ks, comparePartitionKeys)
	return ks
}
