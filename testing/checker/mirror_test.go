package checker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// Helpers of the two-cluster mirror tests on `tandem serve` processes:
// everything is read over the wire, as an operator's tools would.

// logBatch is one record batch of a partition as a leader serves it.
type logBatch struct {
	base, last int64
	epoch      int32
	raw        []byte
}

func (b logBatch) String() string { return fmt.Sprintf("[%d,%d] epoch %d", b.base, b.last, b.epoch) }

// leaderAddr asks the cluster for the leader of topic-p and its address.
func leaderAddr(ctx context.Context, seeds []string, topic string, p int32) (int32, string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(3*time.Second), kgo.RequestTimeoutOverhead(3*time.Second))
	if err != nil {
		return -1, "", err
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		return -1, "", err
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return -1, "", fmt.Errorf("metadata of %s: %v", topic, td.Err)
	}
	pd, ok := td.Partitions[p]
	if !ok || pd.Err != nil || pd.Leader < 0 {
		return -1, "", fmt.Errorf("%s-%d has no leader (%v)", topic, p, pd.Err)
	}
	for _, b := range md.Brokers {
		if b.NodeID == pd.Leader {
			return pd.Leader, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), nil
		}
	}
	return -1, "", fmt.Errorf("leader %d of %s-%d is not among the brokers", pd.Leader, topic, p)
}

// readLog fetches every batch of topic-p below the high watermark from
// its leader, as a consumer does (Fetch v12), and returns them with the
// high watermark. A partition error of the leader is returned as such.
func readLog(ctx context.Context, seeds []string, topic string, p int32) ([]logBatch, int64, error) {
	_, addr, err := leaderAddr(ctx, seeds, topic, p)
	if err != nil {
		return nil, -1, err
	}
	c, err := tandemtest.DialErr(addr)
	if err != nil {
		return nil, -1, err
	}
	defer c.Close()
	var out []logBatch
	hwm := int64(-1)
	for off := int64(0); hwm < 0 || off < hwm; {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.ReplicaID, req.MaxBytes, req.SessionEpoch = 12, -1, 8<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LastFetchedEpoch = p, off, 4<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := c.Request(req)
		if err != nil {
			return nil, -1, fmt.Errorf("fetch %s-%d at %d from %s: %w", topic, p, off, addr, err)
		}
		fr := resp.(*kmsg.FetchResponse)
		if fr.ErrorCode != 0 {
			return nil, -1, fmt.Errorf("fetch %s-%d from %s: %w", topic, p, addr, kerr.ErrorForCode(fr.ErrorCode))
		}
		if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
			return nil, -1, fmt.Errorf("fetch %s-%d from %s: malformed response", topic, p, addr)
		}
		part := fr.Topics[0].Partitions[0]
		if part.ErrorCode != 0 {
			return nil, -1, fmt.Errorf("fetch %s-%d at %d from %s: %w", topic, p, off, addr, kerr.ErrorForCode(part.ErrorCode))
		}
		hwm = part.HighWatermark
		n := 0
		for b := part.RecordBatches; len(b) >= 61; {
			size := int(binary.BigEndian.Uint32(b[8:])) + 12
			if size > len(b) {
				break
			}
			lb := logBatch{base: int64(binary.BigEndian.Uint64(b)), epoch: int32(binary.BigEndian.Uint32(b[12:])), raw: bytes.Clone(b[:size])}
			lb.last = lb.base + int64(binary.BigEndian.Uint32(b[23:]))
			b = b[size:]
			if lb.last < off {
				continue
			}
			out = append(out, lb)
			off = lb.last + 1
			n++
		}
		if n == 0 && off < hwm {
			return nil, -1, fmt.Errorf("fetch %s-%d at %d from %s: no batch below the high watermark %d", topic, p, off, addr, hwm)
		}
	}
	return out, hwm, nil
}

// diffBatches says how two logs differ, batch by batch (offsets,
// bytes, epochs); nil when identical.
func diffBatches(want, got []logBatch) error {
	for i := range max(len(want), len(got)) {
		switch {
		case i >= len(want):
			return fmt.Errorf("batch %d %v is extra (%d batches, want %d)", i, got[i], len(got), len(want))
		case i >= len(got):
			return fmt.Errorf("batch %d %v is missing (%d batches, want %d)", i, want[i], len(got), len(want))
		case !bytes.Equal(want[i].raw, got[i].raw):
			return fmt.Errorf("batch %d differs: %v, want %v", i, got[i], want[i])
		}
	}
	return nil
}

// mirrorAdmin is the mirror admin client of a cluster, closed at the end
// of the test.
func mirrorAdmin(t *testing.T, seeds []string) *admin.Client {
	t.Helper()
	return admin.New(tandemtest.Client(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.RetryTimeout(30*time.Second), admin.Opt()))
}

// describePartitions is a mirror's partitions as the cluster describes
// them ("topic/partition" → detail).
func describePartitions(ctx context.Context, a *admin.Client, name string) (map[string]mirrorproto.PartitionDetail, error) {
	ms, err := a.DescribeMirrors(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(ms) != 1 {
		return nil, fmt.Errorf("%d mirrors described", len(ms))
	}
	out := map[string]mirrorproto.PartitionDetail{}
	for _, tp := range ms[0].Topics {
		for _, p := range tp.Partitions {
			out[fmt.Sprintf("%s/%d", tp.TopicName, p.PartitionIndex)] = p
		}
	}
	return out, nil
}

// waitCond polls cond until it returns nil, failing the test with what
// and cond's last error after d.
func waitCond(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	wait.Until(t, d, func() error {
		if err := cond(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// sameAsSource reports how the destination's partitions differ from the
// source's (nil once every partition is byte-identical up to the same
// high watermark); fetch errors count as differences.
func sameAsSource(ctx context.Context, src, dst []string, topic string, partitions int32) error {
	var errs []error
	for p := range partitions {
		want, swm, err := readLog(ctx, src, topic, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("source: %w", err))
			continue
		}
		got, dwm, err := readLog(ctx, dst, topic, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("destination: %w", err))
			continue
		}
		if err := diffBatches(want, got); err != nil || swm != dwm {
			errs = append(errs, fmt.Errorf("%s-%d: destination high watermark %d, source %d: %v", topic, p, dwm, swm, err))
		}
	}
	return errors.Join(errs...)
}

// createTopic creates a topic with replication factor 3 and waits until
// every partition has a leader.
func createTopic(t *testing.T, ctx context.Context, seeds []string, topic string, partitions int32) {
	t.Helper()
	adm := kadm.NewClient(tandemtest.Client(t, seeds[0], kgo.SeedBrokers(seeds...)))
	resp, err := adm.CreateTopic(ctx, partitions, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	waitCond(t, time.Minute, topic+" led", func() error {
		for p := range partitions {
			if _, _, err := leaderAddr(ctx, seeds, topic, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestMirrorDestinationLeaderKill9 is issue 27's report: two three-broker
// clusters of `tandem serve` processes, a replication-factor-3 topic
// mirrored under a steady acks=all producer, the destination leader of
// partition 0 killed with SIGKILL and restarted. Afterwards every
// partition of the destination is fetched from its current leader without
// an error and is byte-identical to the source, batch by batch.
func TestMirrorDestinationLeaderKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("process cluster test")
	}
	src := tandemtest.StartProcCluster(t, 3, nil)
	dst := tandemtest.StartProcCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic, name, parts = "orders", "m1", int32(3)
	createTopic(t, ctx, src.Addrs(), topic, parts)
	h, failed, stop := produceChecked(t, ctx, src.Addrs(), topic)

	da := mirrorAdmin(t, dst.Addrs())
	if err := da.CreateMirror(ctx, name, map[string]string{"bootstrap.servers": strings.Join(src.Addrs(), ",")}); err != nil {
		t.Fatalf("create mirror: %v", err)
	}
	if err := da.AddTopicsToMirror(ctx, map[string]string{topic: name}); err != nil {
		t.Fatalf("add topic: %v", err)
	}
	// Mirroring runs: partition 0 is copied past what the source held
	// a moment ago.
	progress := func(what string) {
		t.Helper()
		_, end, err := readLog(ctx, src.Addrs(), topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		waitCond(t, time.Minute, "mirroring "+what, func() error {
			_, got, err := readLog(ctx, dst.Addrs(), topic, 0)
			if err == nil && got <= end {
				err = fmt.Errorf("destination %s-0 at %d, source was at %d", topic, got, end)
			}
			return err
		})
	}
	progress("at the start")

	victim := dst.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool { return ps[0].Leader > 0 })[0].Leader
	dst.Broker(victim).Kill9()
	t.Logf("killed destination broker %d, the leader of %s-0", victim, topic)
	dst.Broker(victim).Restart()
	t.Logf("restarted destination broker %d", victim)
	dst.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool {
		for _, p := range ps {
			if len(p.ISR) != 3 {
				return false
			}
		}
		return true
	})
	progress("after the restart")
	stop()
	t.Logf("%d records acknowledged, %d not", h.Len(), failed.Load())
	waitCond(t, time.Minute, "the destination identical to the source", func() error {
		return sameAsSource(ctx, src.Addrs(), dst.Addrs(), topic, parts)
	})
}

// others are the node IDs of a three-node cluster but id.
func others(id int32) []int32 {
	var out []int32
	for n := int32(1); n <= 3; n++ {
		if n != id {
			out = append(out, n)
		}
	}
	return out
}
