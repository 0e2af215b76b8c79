package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestKafkaGo produces 100,000 records with segmentio/kafka-go's Writer
// (RequiredAcks=-1, hash balancer) and reads each partition back with a
// Reader without a group.
func TestKafkaGo(t *testing.T) {
	p := tandemtest.StartProcess(t, t.TempDir())
	const topic = "kafkago"
	tandemtest.CreateTopic(t, p.Addr, topic, numPartitions)

	acked := make([]pos, numRecords)
	var mu sync.Mutex
	w := &kafka.Writer{
		Addr:         kafka.TCP(p.Addr),
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchSize:    2000,
		BatchBytes:   1 << 20,
		BatchTimeout: 5 * time.Millisecond,
		Completion: func(msgs []kafka.Message, err error) {
			if err != nil {
				return // WriteMessages reports it
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				if i, err := recordIndex(m.Key); err == nil && i < numRecords {
					acked[i] = pos{int32(m.Partition), m.Offset}
				}
			}
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const chunk = 10_000
	msgs := make([]kafka.Message, 0, chunk)
	for i := range numRecords {
		key, value, headers := genRecord(i)
		var hs []kafka.Header
		for _, h := range headers {
			hs = append(hs, kafka.Header{Key: string(h[0]), Value: h[1]})
		}
		msgs = append(msgs, kafka.Message{Key: key, Value: value, Headers: hs})
		if len(msgs) == chunk || i == numRecords-1 {
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				t.Fatalf("writing records up to %d: %v", i, err)
			}
			msgs = msgs[:0]
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	ends := endOffsets(t, p.Addr, topic)
	v := newVerifier(numRecords, true, acked)
	for part := range int32(numPartitions) {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{p.Addr}, Topic: topic,
			Partition: int(part), MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 500 * time.Millisecond})
		for n := int64(0); n < ends[part]; n++ {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("reading partition %d after %d of %d records: %v", part, n, ends[part], err)
			}
			var hs [][2][]byte
			for _, h := range m.Headers {
				hs = append(hs, [2][]byte{[]byte(h.Key), h.Value})
			}
			v.add(int32(m.Partition), m.Offset, m.Key, m.Value, hs)
		}
		r.Close()
	}
	v.finish(t, ends)
}
