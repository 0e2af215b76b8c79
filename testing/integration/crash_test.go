package integration

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// TestKill9DuringProduce kills the broker with SIGKILL while an idempotent
// acks=all producer is writing, restarts it on the same address and data
// dir, lets the producer carry on, and checks that every acknowledged
// record is stored at its acknowledged offset, that the logs have no gaps,
// and that the producer's retries added no duplicates.
func TestKill9DuringProduce(t *testing.T) {
	p := tandemtest.StartProcess(t, t.TempDir())
	const topic = "crash"
	tandemtest.CreateTopic(t, p.Addr, topic, numPartitions)

	cl := tandemtest.Client(t, p.Addr, kgo.DefaultProduceTopic(topic), kgo.RecordDeliveryTimeout(90*time.Second),
		kgo.ProducerLinger(time.Millisecond))
	var (
		mu       sync.Mutex
		acked    = make(map[string]pos) // by value
		failed   int
		firstErr error
	)
	ackCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	stopProducing := sync.OnceFunc(func() { close(stop) })
	defer stopProducing() // a test that fails leaves no producer running
	produced := make(chan int, 1)
	go func() {
		i := 0
		defer func() { produced <- i }()
		for ; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			value := fmt.Sprintf("crash-%08d-%s", i, bytes.Repeat([]byte{'a' + byte(i%26)}, i%300))
			cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte(value)}, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				acked[string(r.Value)] = pos{r.Partition, r.Offset}
			})
		}
	}()

	waitAcks := func(n int) {
		t.Helper()
		wait.Until(t, 90*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(acked) < n {
				return fmt.Errorf("only %d of %d records acknowledged (failed: %d, first error: %v)", len(acked), n, failed, firstErr)
			}
			return nil
		})
	}
	waitAcks(5000)
	p.Kill9()
	atKill := ackCount()
	t.Logf("killed the broker after %d acknowledgements", atKill)
	time.Sleep(300 * time.Millisecond) // let the client notice and start retrying
	p.Restart()
	waitAcks(atKill + 10000)
	stopProducing()
	n := <-produced
	flushCtx, flushCancel := context.WithTimeout(ctx, 90*time.Second)
	defer flushCancel()
	if err := cl.Flush(flushCtx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("produced %d records, %d acknowledged, %d failed", n, len(acked), failed)
	if failed > 0 {
		t.Errorf("%d records failed (an idempotent producer should ride out a broker restart); first error: %v", failed, firstErr)
	}

	// Read everything back.
	ends := endOffsets(t, p.Addr, topic)
	var total int64
	for _, end := range ends {
		total += end
	}
	stored := make(map[pos]string)
	seen := make(map[string]pos)
	next := make(map[int32]int64)
	var problems []string
	report := func(format string, args ...any) {
		if len(problems) < 15 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	consumeAll(t, p.Addr, topic, int(total), func(r *kgo.Record) {
		if r.Offset != next[r.Partition] {
			report("partition %d: offset %d follows %d (gap)", r.Partition, r.Offset, next[r.Partition]-1)
		}
		next[r.Partition] = r.Offset + 1
		v := string(r.Value)
		if first, dup := seen[v]; dup {
			report("value %.20q at %d/%d duplicates %d/%d", v, r.Partition, r.Offset, first.partition, first.offset)
		}
		seen[v] = pos{r.Partition, r.Offset}
		stored[pos{r.Partition, r.Offset}] = v
	})
	for part, end := range ends {
		if next[part] != end {
			report("partition %d: read up to %d, end offset %d", part, next[part], end)
		}
	}
	lost := 0
	for v, at := range acked {
		if got, ok := stored[at]; !ok || got != v {
			lost++
			report("acknowledged %.20q at %d/%d, stored there: %.20q (present: %v)", v, at.partition, at.offset, got, ok)
		}
	}
	if len(problems) > 0 {
		t.Fatalf("%d acknowledged records lost or moved; problems:\n  %s", lost, joinLines(problems))
	}
}

func joinLines(s []string) string {
	var b bytes.Buffer
	for i, l := range s {
		if i > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(l)
	}
	return b.String()
}
