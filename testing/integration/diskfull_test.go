package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/recordbatch"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestDiskFull runs the broker on a 64 MiB tmpfs and fills it: produce is
// answered KAFKA_STORAGE_ERROR (retriable), nothing acknowledged is lost,
// reads, Metadata, consumer-group commits, DeleteRecords and DeleteTopics
// keep working, /healthz and a metric say so; a restart on a disk filled
// to the last byte opens the port and serves reads; freeing space through
// the Kafka API lets writes in again; and the data dir holds no pile of
// files from a retry loop.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64m"); err != nil {
		t.Skipf("cannot mount a 64 MiB tmpfs on %s (%v): this test needs root", dir, err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) }) // after the broker stops (cleanups run last first)
	data := filepath.Join(dir, "data")
	p := tandemtest.StartProcess(t, data, "--set", "log.segment.bytes=1048576")
	tandemtest.CreateTopic(t, p.Addr, "fill", 1)
	tandemtest.CreateTopic(t, p.Addr, "spare", 1)
	tandemtest.CreateTopic(t, p.Addr, "doomed", 1)
	ctx := context.Background()

	value := func(i int) []byte {
		return append(fmt.Appendf(nil, "%08d-", i), bytes.Repeat([]byte{byte('a' + i%26)}, 100<<10)...)
	}
	produce := func(topic string, i int) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		c := tandemtest.Dial(t, p.Addr)
		defer c.Close()
		batch, err := recordbatch.Build(recordbatch.CodecNone, recordbatch.KV{Value: value(i)})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Produce(topic, batch)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + p.HTTPAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	health := func() (int, string) { return get("/healthz") }
	metric := func(name string) string {
		t.Helper()
		_, b := get("/metrics")
		for _, l := range strings.Split(b, "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				return v
			}
		}
		return ""
	}

	// Fill the disk.
	acked := map[int64]int{} // offset -> value number
	i := 0
	for ; ; i++ {
		if i > 2000 {
			t.Fatal("2000 records of 100 KiB fit on a 64 MiB disk")
		}
		res := produce("fill", i)
		if res.ErrorCode != 0 {
			if res.ErrorCode != kerr.KafkaStorageError.Code {
				t.Fatalf("produce on a full disk: %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(res.ErrorCode))
			}
			break
		}
		acked[res.BaseOffset] = i
	}
	if len(acked) < 300 {
		t.Fatalf("only %d records of 100 KiB before the disk was declared full", len(acked))
	}
	t.Logf("%d records acknowledged before the disk filled up", len(acked))
	if code, body := health(); code != http.StatusServiceUnavailable || !strings.Contains(body, "disk full") {
		t.Fatalf("/healthz on a full disk: %d %q", code, body)
	}
	if v := metric("tandem_engine_disk_full"); v != "1" {
		t.Fatalf("tandem_engine_disk_full = %q", v)
	}

	adm := kadm.NewClient(tandemtest.Client(t, p.Addr))
	checkReads := func(label string) {
		t.Helper()
		cl := tandemtest.Client(t, p.Addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"fill": {0: kgo.NewOffset().AtStart()}}))
		defer cl.Close()
		seen := 0
		rctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		defer cancel()
		for seen < len(acked) {
			fs := cl.PollFetches(rctx)
			if err := rctx.Err(); err != nil {
				t.Fatalf("%s: read %d of %d acknowledged records", label, seen, len(acked))
			}
			fs.EachRecord(func(r *kgo.Record) {
				if n, ok := acked[r.Offset]; ok {
					if !bytes.Equal(r.Value, value(n)) {
						t.Fatalf("%s: record at %d differs", label, r.Offset)
					}
					seen++
				}
			})
		}
	}
	checkReads("full disk")
	if _, err := adm.ListTopics(ctx); err != nil {
		t.Fatalf("metadata on a full disk: %v", err)
	}
	commit := func(at int64) {
		t.Helper()
		var offs kadm.Offsets
		offs.Add(kadm.Offset{Topic: "fill", Partition: 0, At: at, LeaderEpoch: -1})
		if r, err := adm.CommitOffsets(ctx, "g", offs); err != nil || r.Error() != nil {
			t.Fatalf("offset commit on a full disk: %v %v", err, r.Error())
		}
		got, err := adm.FetchOffsets(ctx, "g")
		if o, ok := got.Lookup("fill", 0); err != nil || !ok || o.At != at {
			t.Fatalf("committed offset: %+v %v", o, err)
		}
	}
	commit(5)

	// Something else takes the last free byte; the broker's own writes
	// still go (its reserve file makes room), and a restart on the full
	// disk serves reads.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 256<<10)
	for {
		if _, err := filler.Write(chunk); err != nil {
			break
		}
	}
	filler.Close()
	for _, n := range []int{64 << 10, 4 << 10, 1} { // the last partial blocks
		f, _ := os.OpenFile(filepath.Join(dir, "filler"), os.O_APPEND|os.O_WRONLY, 0)
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
		f.Close()
	}
	commit(6)
	p.Kill9()
	p.Restart()
	checkReads("restart on a full disk")
	if res := produce("fill", i); res.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("produce after a restart on a full disk: %v", kerr.ErrorForCode(res.ErrorCode))
	}
	if code, _ := health(); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz after a restart on a full disk: %d", code)
	}
	commit(7)
	if r, err := adm.DeleteTopics(ctx, "doomed"); err != nil || r.Error() != nil {
		t.Fatalf("DeleteTopics on a full disk: %v %v", err, r.Error())
	}

	// Free space through the Kafka API: writes come back.
	var before kadm.Offsets
	for off := range acked {
		if before == nil || off+1 > before["fill"][0].At {
			before = kadm.Offsets{}
			before.Add(kadm.Offset{Topic: "fill", Partition: 0, At: off + 1, LeaderEpoch: -1})
		}
	}
	if r, err := adm.DeleteRecords(ctx, before); err != nil || r.Error() != nil {
		t.Fatalf("DeleteRecords on a full disk: %v %v", err, r.Error())
	}
	eventually(t, "produce accepted after DeleteRecords freed space", func() bool {
		return produce("spare", i).ErrorCode == 0
	})
	if code, body := health(); code != http.StatusOK {
		t.Fatalf("/healthz once space is back: %d %q", code, body)
	}
	if r, err := adm.DeleteTopics(ctx, "fill"); err != nil || r.Error() != nil {
		t.Fatalf("DeleteTopics: %v %v", err, r.Error())
	}
	// No retry loop left files behind.
	files := 0
	filepath.WalkDir(data, func(string, os.DirEntry, error) error { files++; return nil })
	if files > 200 {
		t.Fatalf("%d files in the data dir", files)
	}
}
