package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/wait"
)

// queued is the broker's tandem_server_queued_request_bytes gauge.
func queued(b *Broker) int64 { return b.reqBytes.InUse() }

// queuedIs is a wait.Until condition: n bytes of requests reserved.
func queuedIs(b *Broker, n int64) func() error {
	return func() error {
		if q := queued(b); q != n {
			return fmt.Errorf("%d request bytes reserved, want %d", q, n)
		}
		return nil
	}
}

func dial(t *testing.T, b *Broker) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", b.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// expectClosed reads until the broker closes c, failing if it answers or
// keeps the connection open.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := c.Read(make([]byte, 64))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: want the connection closed, read %d bytes, err %v", what, n, err)
	}
}

// TestQueuedRequestBytes: with queued.max.request.bytes full, a reader
// waits instead of reading: a stalled 900 KB frame holds its reservation,
// a second large request is not read until the first connection goes,
// and small requests still pass.
func TestQueuedRequestBytes(t *testing.T) {
	b := startBroker(t, map[string]string{"queued.max.request.bytes": "1048576"})
	stalled := dial(t, b)
	if _, err := stalled.Write(append(binary.BigEndian.AppendUint32(nil, 900_000), make([]byte, 100_000)...)); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 20*time.Second, queuedIs(b, 900_000))

	// A valid Metadata request of about 800 KB.
	big := kmsg.NewPtrMetadataRequest()
	big.Version = 12
	for len(big.Topics) < 4000 {
		big.Topics = append(big.Topics, kmsg.MetadataRequestTopic{Topic: kmsg.StringPtr(strings.Repeat("x", 200))})
	}
	waiting := dial(t, b)
	if err := writeRequest(waiting, big, 7, "big"); err != nil {
		t.Fatal(err)
	}
	// Small requests fit beside the stalled frame.
	for range 3 {
		if resp := rawRequest(t, b.Addr(), &kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
			t.Fatalf("ApiVersions beside a full budget: %d", resp.ErrorCode)
		}
	}
	if got := queued(b); got != 900_000 {
		t.Fatalf("%d bytes reserved while the budget is full; the big request must wait unread", got)
	}
	waiting.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, err := waiting.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the waiting request was answered (%d bytes, %v) while the budget was full", n, err)
	}
	stalled.Close()
	resp, err := readResponse(waiting, big, 7)
	if err != nil {
		t.Fatalf("the waiting request once the stalled connection went: %v", err)
	}
	if topics := resp.(*kmsg.MetadataResponse).Topics; len(topics) != 1 && len(topics) != 4000 {
		t.Fatalf("metadata answered %d topics", len(topics))
	}
	wait.Until(t, 20*time.Second, queuedIs(b, 0))
}

// TestFrameReadTimeout: a client trickling a frame byte by byte is closed
// once tandem.request.read.timeout.ms passed since its size, and its
// reservation is released.
func TestFrameReadTimeout(t *testing.T) {
	b := startBroker(t, map[string]string{"tandem.request.read.timeout.ms": "300"})
	c := dial(t, b)
	if _, err := c.Write(binary.BigEndian.AppendUint32(nil, 1000)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for range 400 { // 20 s of one byte every 50 ms
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := c.Write([]byte{0}); err != nil {
				return
			}
		}
	}()
	expectClosed(t, c, "a trickling client")
	wait.Until(t, 20*time.Second, queuedIs(b, 0))
	if resp := rawRequest(t, b.Addr(), &kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions after: %d", resp.ErrorCode)
	}
}

// TestInflateCounted: what validating compressed batches decodes counts
// in queued.max.request.bytes while it runs, and waits for other
// decompressions only: eight producers whose snappy batches each inflate
// to about 3 MiB, under a 4 MiB budget, are all acknowledged and read
// back, never more than the budget inflates at once, and every
// reservation is released.
func TestInflateCounted(t *testing.T) {
	b := startBroker(t, map[string]string{"queued.max.request.bytes": "4194304"})
	createTopic(t, b, "z", 8, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	value := bytes.Repeat([]byte("x"), 1<<20)
	var wg sync.WaitGroup
	for p := range int32(8) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("z"),
				kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.SnappyCompression()),
				kgo.ProducerBatchMaxBytes(8<<20), kgo.ProducerLinger(time.Second), kgo.MaxBufferedRecords(3))
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			var recs []*kgo.Record
			for i := range 3 {
				recs = append(recs, &kgo.Record{Partition: p, Key: []byte{byte(i)}, Value: value})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Errorf("partition %d: %v", p, err)
			}
		}()
	}
	wg.Wait()
	inflating, peak := b.reqBytes.Inflating()
	if peak < 3<<20 || peak > 4<<20 || inflating != 0 {
		t.Errorf("decompression reserved at most %d bytes (budget 4 MiB), %d still held", peak, inflating)
	}
	wait.Until(t, 20*time.Second, queuedIs(b, 0))
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("z"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for n := 0; n < 24; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("after %d records: %v", n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !bytes.Equal(r.Value, value) {
				t.Fatalf("partition %d offset %d: value of %d bytes", r.Partition, r.Offset, len(r.Value))
			}
			n++
		})
	}
}
