package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/testing/wait"
)

// TestDiskFullRefusesClientWrites lowers the free space the filesystem
// reports below the reserve: client appends get KAFKA_STORAGE_ERROR
// without touching the log, the broker's own appends and reads go on, and
// client appends resume once the space is back.
func TestDiskFullRefusesClientWrites(t *testing.T) {
	fs := vfs.NewMem()
	const total = 1 << 30 // a reserve of 51 MiB
	fs.TestingSetDiskUsage(vfs.DiskUsage{TotalBytes: total, AvailBytes: total / 2})
	e := openTest(t, fs)
	p := mkPart(t, e, DefaultLogConfig())
	appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("a", "1")))
	if e.DiskFull() {
		t.Fatal("full with half the disk free")
	}

	fs.TestingSetDiskUsage(vfs.DiskUsage{TotalBytes: total, AvailBytes: 10 << 20})
	e.space.Freed() // the next append checks
	for _, origin := range []Origin{OriginClient, OriginCrossCluster, OriginReplica} {
		_, err := p.Append(context.Background(), &AppendRequest{Origin: origin, Records: mkBatch(t, batchOpts{}, kv("b", "2")), Acks: -1})
		if kcode(err) != kerr.KafkaStorageError.Code {
			t.Fatalf("%v append on a full disk: %v", origin, err)
		}
	}
	if !e.DiskFull() || !e.Metrics().DiskFull {
		t.Fatal("the disk is not reported full")
	}
	if res := appendOK(t, p, OriginInternal, mkBatch(t, batchOpts{}, kv("coordinator", "x"))); res.BaseOffset != 1 {
		t.Fatalf("internal append on a full disk: %+v", res)
	}
	if got := recordsOf(t, fetchAll(t, p, 0)); len(got) != 2 || got[1] != "coordinator=x" {
		t.Fatalf("log on a full disk: %v", got)
	}
	// Transaction markers end transactions and a mirror's failover
	// markers end its partitions' transactions: both go into the reserve.
	if off, err := p.WriteTxnMarkers(context.Background(), Marker{ProducerID: 7, ProducerEpoch: 0}); err != nil || off != 2 {
		t.Fatalf("transaction marker on a full disk: %d, %v", off, err)
	}
	if off, err := p.WriteProducerBarrier(context.Background()); err != nil || off != 3 {
		t.Fatalf("mirror barrier on a full disk: %d, %v", off, err)
	}

	fs.TestingSetDiskUsage(vfs.DiskUsage{TotalBytes: total, AvailBytes: total / 2})
	wait.Until(t, 30*time.Second, func() error { // the background check, every second
		if e.DiskFull() {
			return errors.New("still full after the space came back")
		}
		return nil
	})
	if res := appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("c", "3"))); res.BaseOffset != 4 {
		t.Fatalf("append once space is back: %+v", res)
	}
}
