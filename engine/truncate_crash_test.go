package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestTruncateThenCrashKeepsLaterAppends: a follower truncates its log
// to its leader's (or starts it over), then appends the leader's
// batches, each acknowledged once durable: the leader counts them for
// acks=all. A crash that keeps only what was synced (a power loss; a
// kill -9 loses the same, Pebble's unsynced writes being buffered in
// the process) must keep them. The truncation's exact recovery point
// is synced, the recovery points of the appends after it are not: left
// as the last durable one, the exact point made recovery cut the log
// back to the truncation, and a replica in the ISR came back without
// records it had acknowledged (TestPartitionAcksOne in testing/netns:
// a deposed leader's all-0 read back at 784 where the others had 5,812).
func TestTruncateThenCrashKeepsLaterAppends(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cut     func(p *Partition) error
		at      int64 // where the leader's batches go
		restart bool  // crash between the truncation's commit and its cut, reopen, then append
	}{
		{name: "truncate", cut: func(p *Partition) error { return p.Truncate(4) }, at: 4},
		{name: "truncate, crash before the cut, reopen", cut: func(p *Partition) error { return p.Truncate(4) }, at: 4, restart: true},
		{name: "start over", cut: func(p *Partition) error { return p.StartOver(100) }, at: 100},
		{name: "start over, crash before the cut, reopen", cut: func(p *Partition) error { return p.StartOver(100) }, at: 100, restart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			e := openTest(t, fs)
			p := mkPart(t, e, DefaultLogConfig())
			for range 4 { // 0-7, epoch 0: the deposed leader's log
				appendOK(t, p, OriginClient, mkBatch(t, batchOpts{pid: 7, seq: -1}, kv("old", "1"), kv("old", "2")))
			}
			var committed *vfs.MemFS // a crash once the truncation is committed, before the files are cut
			e.testHook = func(point string) {
				if point == "truncate:committed" && committed == nil {
					committed = fs.CrashClone(vfs.CrashCloneCfg{})
				}
			}
			if err := tc.cut(p); err != nil {
				t.Fatal(err)
			}
			e.testHook = nil
			if tc.restart {
				// The next start finishes the cut; appends follow it.
				fs = committed
				e = openTest(t, fs)
				p = e.Partition(testID, 0)
			}
			// The new leader's batches, epoch 1, appended as a
			// follower appends them, each acknowledged once durable.
			var want [][]byte
			for i := range 5 {
				b := mkBatch(t, batchOpts{pid: 8, seq: int32(2 * i)}, kv("new", fmt.Sprint(i)), kv("new", "x"))
				binary.BigEndian.PutUint64(b, uint64(tc.at+int64(2*i)))
				binary.BigEndian.PutUint32(b[12:], 1)
				appendOK(t, p, OriginReplica, b)
				want = append(want, b)
			}
			end := tc.at + 10
			if o := p.Offsets(); o.LogEnd != end {
				t.Fatalf("before the crash: %+v, want log end %d", o, end)
			}

			e2 := openTest(t, fs.CrashClone(vfs.CrashCloneCfg{}))
			p2 := e2.Partition(testID, 0)
			if o := p2.Offsets(); o.LogEnd != end {
				t.Errorf("after the crash: %+v, want log end %d: acknowledged appends after the cut lost", o, end)
			}
			got := fetchAll(t, p2, tc.at)
			if len(got) != len(want) {
				t.Fatalf("after the crash: %d of the %d batches appended after the cut", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("after the crash: batch %d differs", i)
				}
			}
			if ep, end2 := p2.EndOffsetForEpoch(0); tc.at == 4 && (ep != 0 || end2 != 4) {
				t.Fatalf("epoch 0 ends at %d (epoch %d), want 4", end2, ep)
			}
			if ep := p2.LastFetchedEpoch(); ep != 1 {
				t.Fatalf("last fetched epoch %d, want 1", ep)
			}
		})
	}
}
