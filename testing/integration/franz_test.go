package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestFranzGo produces 100,000 records with franz-go's defaults (idempotent,
// acks=all) in each compression codec and reads them back with a fresh
// client: every record, identical, in order, at contiguous offsets.
func TestFranzGo(t *testing.T) {
	p := tandemtest.StartProcess(t, t.TempDir())
	for _, c := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()},
		{"gzip", kgo.GzipCompression()},
		{"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()},
		{"zstd", kgo.ZstdCompression()},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := "franz-" + c.name
			tandemtest.CreateTopic(t, p.Addr, topic, numPartitions)
			acked := produceFranz(t, p.Addr, topic, c.codec)
			v := newVerifier(numRecords, true, acked)
			consumeAll(t, p.Addr, topic, numRecords, func(r *kgo.Record) {
				v.add(r.Partition, r.Offset, r.Key, r.Value, fromKgoHeaders(r.Headers))
			})
			v.finish(t, endOffsets(t, p.Addr, topic))
		})
	}
}

// produceFranz produces numRecords records and returns where each was
// acknowledged.
func produceFranz(t *testing.T, addr, topic string, codec kgo.CompressionCodec) []pos {
	cl := tandemtest.Client(t, addr, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec),
		kgo.RecordDeliveryTimeout(time.Minute))
	acked := make([]pos, numRecords)
	var mu sync.Mutex
	var firstErr error
	var failed int
	ctx := context.Background()
	for i := range numRecords {
		key, value, headers := genRecord(i)
		cl.Produce(ctx, &kgo.Record{Key: key, Value: value, Headers: kgoHeaders(headers)}, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			acked[i] = pos{r.Partition, r.Offset}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if failed > 0 {
		t.Fatalf("%d of %d records failed; first error: %v", failed, numRecords, firstErr)
	}
	return acked
}
