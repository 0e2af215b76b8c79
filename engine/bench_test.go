package engine

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/tandem-kafka/tandem/engine/internal/recordbatch"
)

var benchPar = 16 // goroutines per CPU: enough concurrent appends for group commit

// BenchmarkAppend appends batches of 16 records of 1 KiB to 6 partitions
// from 16 goroutines per CPU, on disk, with fsync (group commit) on.
func BenchmarkAppend(b *testing.B) {
	for _, codec := range []int8{recordbatch.CodecNone, recordbatch.CodecZstd} {
		b.Run(fmt.Sprint("codec", codec), func(b *testing.B) {
			e := openTest(b, vfs.Default, func(c *Config) { c.Dir = b.TempDir() })
			var parts []*Partition
			for i := range 6 {
				p, err := e.Create("bench", testID, int32(i), DefaultLogConfig())
				if err != nil {
					b.Fatal(err)
				}
				parts = append(parts, p)
			}
			recs := make([]rec, 16)
			for i := range recs {
				v := make([]byte, 1024)
				rand.Read(v[:256]) // partly compressible, like real payloads
				recs[i] = rec{key: []byte(fmt.Sprint(i)), val: v}
			}
			records := mkBatch(b, batchOpts{codec: codec}, recs...)
			b.SetBytes(int64(16 * 1024))
			var next atomic.Int64
			b.SetParallelism(benchPar)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p := parts[next.Add(1)%6]
					if _, err := p.Append(context.Background(), &AppendRequest{Origin: OriginClient, Records: records, Acks: -1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestConcurrentAppendFetch races appenders and readers on the same
// partitions: offsets stay dense and readers never see past the high
// watermark or a torn batch.
func TestConcurrentAppendFetch(t *testing.T) {
	e := openTest(t, nil)
	var parts []*Partition
	for i := range 3 {
		p, _ := e.Create("c", testID, int32(i), DefaultLogConfig())
		parts = append(parts, p)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, p := range parts {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					appendOK(t, p, OriginClient, mkBatch(t, batchOpts{}, kv("a", "1"), kv("b", "2")))
				}
			}()
		}
	}
	var readers sync.WaitGroup
	for _, p := range parts {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := p.Fetch(0, 1<<20, ReadUncommitted)
				if err != nil {
					t.Error(err)
					return
				}
				next := int64(0)
				for _, raw := range res.Batches {
					if _, err := recordbatch.Split(raw); err != nil || recordbatch.Batch(raw).BaseOffset() != next || recordbatch.Batch(raw).LastOffset() >= res.HighWatermark {
						t.Errorf("bad read at %d: %v", next, err)
						return
					}
					next = recordbatch.Batch(raw).LastOffset() + 1
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	for _, p := range parts {
		if o := p.Offsets(); o.LogEnd != 300 || o.HighWatermark != 300 {
			t.Fatalf("offsets %+v", o)
		}
		if got := len(fetchAll(t, p, 0)); got != 150 {
			t.Fatalf("%d batches", got)
		}
	}
}
