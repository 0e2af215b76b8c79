package checker_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/checker"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

func TestMain(m *testing.M) { os.Exit(tandemtest.Main(m)) }

// TestClusterLeaderPaused: three `tandem serve` processes; an idempotent
// acks=all producer writes to a topic of replication factor 3 with
// min.insync.replicas=2 while the leader of partition 0 is frozen with
// SIGSTOP for twice broker.session.timeout.ms (3 s). It keeps its
// sockets, so only the session timeout fences it; the others elect a new
// leader and go on. Resumed with SIGCONT it finds itself fenced, follows
// the new leader, drops what it alone may have had and rejoins the ISR.
// Every acknowledged value is read back once, where it was acknowledged.
func TestClusterLeaderPaused(t *testing.T) {
	if testing.Short() {
		t.Skip("process cluster test")
	}
	c := tandemtest.StartProcCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "paused"
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	resp, err := adm.CreateTopic(ctx, 3, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	h, failed, stop := produceChecked(t, ctx, c.Addrs(), topic)
	progress := func(what string) {
		t.Helper()
		n := h.Len()
		waitCond(t, time.Minute, what, func() error {
			if h.Len() < n+200 {
				return fmt.Errorf("no acknowledged writes (%d so far, %d failed)", h.Len(), failed.Load())
			}
			return nil
		})
	}
	full := func(ps map[int32]tandemtest.PartitionState) bool {
		for _, p := range ps {
			if len(p.ISR) != 3 {
				return false
			}
		}
		return len(ps) == 3
	}
	progress("start")
	c.Partitions(topic, full)

	leader := c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool { return ps[0].Leader > 0 })[0].Leader
	var others []int32
	for id := int32(1); id <= 3; id++ {
		if id != leader {
			others = append(others, id)
		}
	}
	c.Broker(leader).Pause()
	paused := time.Now()
	ps := c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool {
		return ps[0].Leader != leader && ps[0].Leader > 0 && !slices.Contains(ps[0].ISR, leader)
	}, others...)
	t.Logf("partition 0 led by %d %v after broker %d was paused", ps[0].Leader, time.Since(paused).Round(time.Millisecond), leader)
	progress("leader paused")
	time.Sleep(time.Until(paused.Add(6 * time.Second)))
	c.Broker(leader).Resume()
	c.Partitions(topic, full)
	progress("leader resumed")

	stop()
	read, err := checker.ReadAll(ctx, topic, kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	rep := h.Check(read)
	t.Logf("%v; %d writes not acknowledged", rep, failed.Load())
	if !rep.OK() {
		t.Fatal(rep)
	}
}

// produceChecked produces unique values to topic with acks=all and
// idempotence (kgo's defaults) from a goroutine until stop is called,
// recording every acknowledged one.
func produceChecked(t *testing.T, ctx context.Context, seeds []string, topic string) (h *checker.History, failed *atomic.Int64, stop func()) {
	h, failed = &checker.History{}, &atomic.Int64{}
	prodCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic),
			kgo.RecordRetries(5), kgo.RecordDeliveryTimeout(20*time.Second), kgo.RetryTimeout(20*time.Second))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for i := 0; prodCtx.Err() == nil; i++ {
			v := fmt.Sprintf("v%07d", i)
			cl.Produce(prodCtx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err != nil {
					failed.Add(1) // not acknowledged: may or may not be there
					return
				}
				h.Acked(v, checker.Place{Partition: r.Partition, Offset: r.Offset})
			})
			if i%50 == 49 {
				cl.Flush(prodCtx)
			}
		}
		cl.Flush(context.Background())
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return h, failed, stop
}
