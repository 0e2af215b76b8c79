package server

import (
	"context"
	"crypto/rand"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkProduceConsume produces b.N 1 KiB records with franz-go (acks=all,
// idempotent, 6 partitions) and consumes them back; MB/s is the number.
func BenchmarkProduceConsume(b *testing.B) {
	props := map[string]string{}
	if v := os.Getenv("TANDEM_BENCH_SYNC"); v != "" {
		props["tandem.log.sync"] = v // compare fsync per produce (default) with none
	}
	br := startBroker(b, props)
	createTopic(b, br, "bench", 6, nil)
	value := make([]byte, 1024)
	rand.Read(value) // incompressible, like most real payloads
	pr := newClient(b, br, kgo.DefaultProduceTopic("bench"), kgo.ProducerLinger(time.Millisecond))
	cl := newClient(b, br, kgo.ConsumeTopics("bench"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.SetBytes(int64(len(value)))
	b.ResetTimer()
	done := make(chan int)
	go func() {
		n := 0
		for n < b.N && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			n += fs.NumRecords()
		}
		done <- n
	}()
	for range b.N {
		pr.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := pr.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if n := <-done; n < b.N {
		b.Fatalf("consumed %d of %d", n, b.N)
	}
}
