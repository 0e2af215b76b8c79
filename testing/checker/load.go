package checker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Load is the mixed workload of the cluster fault tests, each part
// recording what it was told for a check afterwards: idempotent acks=all
// producers (Records), a transactional producer (Txns), and a consumer
// group of one member committing what it reads, whose committed offsets
// are read back while it runs (Offsets).
type Load struct {
	cfg      LoadConfig
	Records  History
	Txns     *TxnLog
	Offsets  GroupOffsets
	unacked  atomic.Int64 // records a producer was refused or timed out on
	consumed atomic.Int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// LoadConfig says where Load writes.
type LoadConfig struct {
	Seeds     []string
	Topic     string // the idempotent producers' topic, which the group reads
	TxnTopic  string // the transactional producer's
	Group     string
	Producers int           // 2 when 0
	Every     time.Duration // between two records of a producer; 4 ms when 0
}

// StartLoad starts the workload; Stop ends it.
func StartLoad(cfg LoadConfig) *Load {
	if cfg.Producers == 0 {
		cfg.Producers = 2
	}
	if cfg.Every == 0 {
		cfg.Every = 4 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cfg: cfg, cancel: cancel, Txns: &TxnLog{Topic: cfg.TxnTopic, ID: cfg.TxnTopic + "-txn"}}
	seeds := kgo.SeedBrokers(cfg.Seeds...)
	for i := range cfg.Producers {
		l.worker(ctx, fmt.Sprintf("producer %d", i), func() error { return l.produce(ctx, i) })
	}
	if cfg.TxnTopic != "" {
		l.worker(ctx, "transactions", func() error { return l.Txns.Run(ctx, seeds) })
	}
	if cfg.Group != "" {
		l.worker(ctx, "consumer group", func() error { return l.consume(ctx) })
		l.worker(ctx, "group offsets", func() error { return l.watchOffsets(ctx) })
	}
	return l
}

func (l *Load) worker(ctx context.Context, name string, f func() error) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		if err := f(); err != nil && ctx.Err() == nil {
			l.mu.Lock()
			l.errs = append(l.errs, fmt.Errorf("%s: %w", name, err))
			l.mu.Unlock()
		}
	}()
}

// Stop ends the workload, waits for the producers to flush, and returns
// what made a part of it give up.
func (l *Load) Stop() error {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.errs...)
}

// Unacked is the number of records the producers were not
// acknowledged: refused, or timed out (which may or may not be there).
func (l *Load) Unacked() int64 { return l.unacked.Load() }

// Consumed is the number of records the group's member read.
func (l *Load) Consumed() int64 { return l.consumed.Load() }

// Progress waits until n more records are acknowledged, up to within.
func (l *Load) Progress(n int, within time.Duration) error {
	from := l.Records.Len()
	for deadline := time.Now().Add(within); l.Records.Len() < from+n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d records acknowledged in %v, want %d (%d so far, %d not acknowledged)",
				l.Records.Len()-from, within, n, l.Records.Len(), l.Unacked())
		}
	}
	return nil
}

// produce writes "p<i>-<n>" records, idempotent with acks=all.
func (l *Load) produce(ctx context.Context, i int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(l.cfg.Seeds...), kgo.DefaultProduceTopic(l.cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(30*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	tick := time.NewTicker(l.cfg.Every)
	defer tick.Stop()
	for n := 0; ctx.Err() == nil; n++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		v := fmt.Sprintf("p%d-%08d", i, n)
		cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
			if err != nil {
				l.unacked.Add(1)
				return
			}
			l.Records.Acked(v, Place{Partition: r.Partition, Offset: r.Offset})
		})
	}
	return cl.Flush(context.Background())
}

// consume reads the topic in the group and commits every half second;
// each commit the coordinator acknowledges goes to Offsets.
func (l *Load) consume(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(l.cfg.Seeds...), kgo.ConsumerGroup(l.cfg.Group), kgo.ConsumeTopics(l.cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.AutoCommitInterval(500*time.Millisecond),
		kgo.AutoCommitCallback(func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				return
			}
			l.committed(req, resp)
		}))
	if err != nil {
		return err
	}
	defer cl.Close()
	for ctx.Err() == nil {
		l.consumed.Add(int64(cl.PollFetches(ctx).NumRecords()))
	}
	return nil
}

// committed records the partitions of a commit answered without error.
func (l *Load) committed(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse) {
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 || rt.Topic != l.cfg.Topic {
				continue
			}
			for _, qt := range req.Topics {
				if qt.Topic != rt.Topic {
					continue
				}
				if i := slices.IndexFunc(qt.Partitions, func(q kmsg.OffsetCommitRequestTopicPartition) bool { return q.Partition == rp.Partition }); i >= 0 {
					l.Offsets.Committed(rp.Partition, qt.Partitions[i].Offset)
				}
			}
		}
	}
}

// watchOffsets reads the group's committed offsets four times a second
// and holds each answer against what was acknowledged before it.
func (l *Load) watchOffsets(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(l.cfg.Seeds...), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for ctx.Err() == nil {
		floor := l.Offsets.Floor()
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := adm.FetchOffsets(fctx, l.cfg.Group)
		cancel()
		if err == nil && resp.Error() == nil {
			got := map[int32]int64{}
			resp.Each(func(o kadm.OffsetResponse) {
				if o.Topic == l.cfg.Topic && o.Err == nil {
					got[o.Partition] = o.At
				}
			})
			l.Offsets.Fetched(floor, got)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}
