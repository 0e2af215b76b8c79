package fetchwire

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/server/replication"
	"github.com/tandem-kafka/tandem/testing/recordbatch"
)

// recordsSource is a partition holding two batches, read as Records.
type recordsSource struct {
	p     *engine.Partition
	bytes []byte // what the records hold
}

func newRecordsSource(t *testing.T, fs vfs.FS, dir string) *recordsSource {
	t.Helper()
	e, err := engine.Open(engine.Config{Dir: dir, FS: fs, SyncWrites: true, RetentionCheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	p, err := e.Create("t", engine.TopicID{1}, 0, engine.DefaultLogConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{recordbatch.Of("a", "b"), recordbatch.Of("c")} {
		if _, err := p.Append(context.Background(), &engine.AppendRequest{Origin: engine.OriginClient, Records: b, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := p.Fetch(0, 1<<20, engine.ReadUncommitted)
	if err != nil || len(res.Batches) != 2 {
		t.Fatalf("fetch: %v", err)
	}
	return &recordsSource{p: p, bytes: bytes.Join(res.Batches, nil)}
}

func (s *recordsSource) records(t *testing.T) *engine.Records {
	t.Helper()
	_, recs, err := s.p.FetchRecords(0, 1<<20, engine.ReadUncommitted)
	if err != nil || recs.Len() != len(s.bytes) {
		t.Fatalf("fetch records: %v", err)
	}
	return recs
}

// testFetchResponse builds the same response twice: kmsg's, with the
// batches inline, and ours, with them in records.
func testFetchResponse(t *testing.T, v int16, src *recordsSource) (want *kmsg.FetchResponse, got *Response) {
	want = kmsg.NewPtrFetchResponse()
	want.Version, want.ThrottleMillis, want.ErrorCode, want.SessionID = v, 7, 0, 1234
	got = &Response{FetchResponse: kmsg.NewPtrFetchResponse()}
	*got.FetchResponse = *want
	for ti, name := range []string{"one", "two"} {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = name, [16]byte{byte(ti + 1)}
		var recs []*engine.Records
		for pi := range 3 {
			p := kmsg.NewFetchResponseTopicPartition()
			p.Partition, p.HighWatermark, p.LastStableOffset, p.LogStartOffset = int32(pi), 10, 9, 1
			var r *engine.Records
			switch pi {
			case 0: // two batches
				r = src.records(t)
				p.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{{ProducerID: 5, FirstOffset: 3}}
			case 1: // an error with tags
				p.ErrorCode = 74
				p.CurrentLeader.LeaderID, p.CurrentLeader.LeaderEpoch = 1, 3
				p.DivergingEpoch.Epoch, p.DivergingEpoch.EndOffset = 2, 8
				replication.SetMirrorLeaderEpoch(&p.UnknownTags, 42) // after tags 0 and 1
			case 2: // a tag of Tandem's own only
				replication.SetMirrorLeaderEpoch(&p.UnknownTags, 7)
			}
			recs = append(recs, r)
			rt.Partitions = append(rt.Partitions, p)
		}
		gt := rt
		gt.Partitions = append([]kmsg.FetchResponseTopicPartition(nil), rt.Partitions...)
		for pi := range rt.Partitions {
			rt.Partitions[pi].RecordBatches = []byte{}
			if recs[pi] != nil {
				rt.Partitions[pi].RecordBatches = src.bytes
			}
		}
		want.Topics = append(want.Topics, rt)
		got.Topics = append(got.Topics, gt)
		got.Records = append(got.Records, recs)
	}
	return want, got
}

// TestFetchResponseEncoding checks the encoder against kmsg's for every
// served Fetch version, with batches read from segment files.
func TestFetchResponseEncoding(t *testing.T) {
	src := newRecordsSource(t, vfs.NewMem(), "db")
	for v := int16(4); v <= 18; v++ {
		want, got := testFetchResponse(t, v, src)
		if w, g := want.AppendTo(nil), got.AppendTo(nil); !bytes.Equal(w, g) {
			t.Fatalf("v%d: encodings differ\nkmsg: %x\nours: %x", v, w, g)
		}
		if got.Records != nil {
			t.Fatalf("v%d: AppendTo kept the records", v)
		}
	}
}

// TestFetchFrameOverTCP writes fetch responses whose batches are in files
// on disk to a loopback TCP connection (sendfile) and through a wrapper
// that hides the socket (a copy, as on TLS): both frames are the bytes
// kmsg encodes, after a correct size.
func TestFetchFrameOverTCP(t *testing.T) {
	src := newRecordsSource(t, vfs.Default, t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	for _, w := range []io.Writer{server, struct{ io.Writer }{server}} {
		want, got := testFetchResponse(t, 16, src)
		body := want.AppendTo(nil)
		done := make(chan error, 1)
		go func() {
			_, err := got.WriteFrame(w, []byte{0, 0, 0, 0})
			done <- err
		}()
		frame := make([]byte, 4+len(body))
		if _, err := io.ReadFull(client, frame); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := int(frame[0])<<24 | int(frame[1])<<16 | int(frame[2])<<8 | int(frame[3]); n != len(body) || !bytes.Equal(frame[4:], body) {
			t.Fatalf("%T: frame of %d bytes differs from kmsg's %d", w, n, len(body))
		}
	}
}

// TestMirrorLeaderEpochWire sends MirrorLeaderEpoch in a Fetch request and
// response as kmsg reads them: the tag survives both ways, next to
// Kafka's own tags.
func TestMirrorLeaderEpochWire(t *testing.T) {
	rp := kmsg.NewFetchRequestTopicPartition()
	replication.SetMirrorLeaderEpoch(&rp.UnknownTags, 17)
	req := kmsg.NewPtrFetchRequest()
	req.Version = 16
	rt := kmsg.NewFetchRequestTopic()
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	var back kmsg.FetchRequest
	back.Version = 16
	if err := back.ReadFrom(req.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	if e := replication.MirrorLeaderEpoch(&back.Topics[0].Partitions[0].UnknownTags); e != 17 {
		t.Fatalf("request MirrorLeaderEpoch = %d, want 17", e)
	}
	if e := replication.MirrorLeaderEpoch(&kmsg.Tags{}); e != -1 {
		t.Fatalf("absent MirrorLeaderEpoch = %d, want -1", e)
	}

	src := newRecordsSource(t, vfs.NewMem(), "db")
	_, got := testFetchResponse(t, 16, src)
	var resp kmsg.FetchResponse
	resp.Version = 16
	if err := resp.ReadFrom(got.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	ps := resp.Topics[0].Partitions
	if e := replication.MirrorLeaderEpoch(&ps[1].UnknownTags); e != 42 || ps[1].DivergingEpoch.EndOffset != 8 || ps[1].CurrentLeader.LeaderEpoch != 3 {
		t.Fatalf("partition 1: MirrorLeaderEpoch %d, diverging %+v, leader %+v", e, ps[1].DivergingEpoch, ps[1].CurrentLeader)
	}
	if e := replication.MirrorLeaderEpoch(&ps[2].UnknownTags); e != 7 {
		t.Fatalf("partition 2: MirrorLeaderEpoch %d, want 7", e)
	}
	if e := replication.MirrorLeaderEpoch(&ps[0].UnknownTags); e != -1 {
		t.Fatalf("partition 0: MirrorLeaderEpoch %d, want none", e)
	}
}
