package engine

import (
	"bytes"
	"encoding/json"
	"github.com/tandem-kafka/tandem/engine/internal/keys"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestMigrateFormat1 opens a data directory written by the engine before
// segment files (format version 1, testdata/format1): every partition
// reads back as that engine read it, the batches have left Pebble, and
// the migrated store reopens and takes appends.
func TestMigrateFormat1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS("testdata/format1/data")); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/format1/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var want []struct {
		Topic    string
		Part     int32
		Offsets  Offsets
		Batches  [][]byte
		Producer []ProducerState
		Aborted  []AbortedRange
		Epochs   map[int32][2]int64
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	open := func() *Engine {
		return openTest(t, vfs.Default, func(c *Config) { c.Dir = dir })
	}
	check := func(e *Engine) {
		t.Helper()
		byName := map[string]*Partition{}
		for _, sp := range e.Stored() {
			byName[sp.Topic] = e.Partition(sp.TopicID, sp.Partition)
		}
		for _, w := range want {
			p := byName[w.Topic]
			if p == nil || p.Index() != w.Part {
				t.Fatalf("partition %s-%d missing", w.Topic, w.Part)
			}
			if o := p.Offsets(); o != w.Offsets {
				t.Fatalf("%s: offsets %+v, want %+v", w.Topic, o, w.Offsets)
			}
			got := fetchAll(t, p, w.Offsets.LogStart)
			if len(got) != len(w.Batches) {
				t.Fatalf("%s: %d batches, want %d", w.Topic, len(got), len(w.Batches))
			}
			for i := range got {
				if !bytes.Equal(got[i], w.Batches[i]) {
					t.Fatalf("%s: batch %d differs", w.Topic, i)
				}
			}
			if ps := p.Producers(); !reflect.DeepEqual(ps, w.Producer) && (len(ps) > 0 || len(w.Producer) > 0) {
				t.Fatalf("%s: producers %+v, want %+v", w.Topic, ps, w.Producer)
			}
			if a := p.AbortedTxns(); !reflect.DeepEqual(a, w.Aborted) && (len(a) > 0 || len(w.Aborted) > 0) {
				t.Fatalf("%s: aborted %+v, want %+v", w.Topic, a, w.Aborted)
			}
			for ep, we := range w.Epochs {
				if e, end := p.EndOffsetForEpoch(ep); int64(e) != we[0] || end != we[1] {
					t.Fatalf("%s: EndOffsetForEpoch(%d) = %d, %d, want %v", w.Topic, ep, e, end, we)
				}
			}
		}
	}
	e := open()
	check(e)
	for _, sub := range []byte{keys.SubV1Log, keys.SubV1Meta} {
		lo := []byte{keys.NS, keys.KindData}
		it, _ := e.DB().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: keys.PrefixEnd(lo)})
		for it.First(); it.Valid(); it.Next() {
			if k := it.Key(); k[22] == sub {
				t.Fatalf("format-1 key %x left after the migration", k)
			}
		}
		it.Close()
	}
	e.Close()
	e = open()
	check(e)
	for _, sp := range e.Stored() {
		p := e.Partition(sp.TopicID, sp.Partition)
		leo := p.Offsets().LogEnd
		if res := appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("after", "migration"))); res.BaseOffset != leo {
			t.Fatalf("%s: append at %d, log end %d", sp.Topic, res.BaseOffset, leo)
		}
	}
}
