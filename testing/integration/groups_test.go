package integration

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// groupArgs keep group tests fast: a short initial rebalance delay,
// sessions as short as the clients allow, frequent KIP-848 and share
// group heartbeats.
var groupArgs = []string{
	"--set", "group.initial.rebalance.delay.ms=100",
	"--set", "group.min.session.timeout.ms=1000",
	"--set", "offsets.topic.num.partitions=10",
	"--set", "group.consumer.heartbeat.interval.ms=500",
	"--set", "group.consumer.min.heartbeat.interval.ms=100",
	"--set", "group.share.heartbeat.interval.ms=500",
	"--set", "group.share.min.heartbeat.interval.ms=100",
	"--set", "share.coordinator.state.topic.num.partitions=4",
}

// collector counts every value consumed, by every member.
type collector struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *collector) add(v []byte) {
	c.mu.Lock()
	c.seen[string(v)]++
	c.mu.Unlock()
}

// has reports whether values first..last-1 were all seen.
func (c *collector) has(first, last int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := first; i < last; i++ {
		if c.seen[groupValue(i)] == 0 {
			return false
		}
	}
	return true
}

func groupValue(i int) string { return fmt.Sprintf("v-%06d", i) }

func produceValues(t *testing.T, addr, topic string, first, last int) {
	t.Helper()
	cl := tandemtest.Client(t, addr, kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := first; i < last; i++ {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(groupValue(i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Until(t, 45*time.Second, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

// groupMember is one consumer of a group; stop closes it gracefully
// (leaving the group and committing what it consumed).
type groupMember interface{ stop() }

type startMember func(t *testing.T, addr, group, topic string, c *collector) groupMember

// runGroupScenario: three members consume a 6-partition topic; one is
// closed and the others take over its partitions with nothing lost; all
// close, and three new members resume exactly at the committed offsets.
func runGroupScenario(t *testing.T, start startMember) {
	p := tandemtest.StartProcess(t, t.TempDir(), groupArgs...)
	const topic, group, n = "gt", "gg", 3000
	tandemtest.CreateTopic(t, p.Addr, topic, numPartitions)
	produceValues(t, p.Addr, topic, 0, n)

	c := &collector{seen: map[string]int{}}
	var ms []groupMember
	for range 3 {
		ms = append(ms, start(t, p.Addr, group, topic, c))
	}
	eventually(t, "the first records to be consumed", func() bool { return c.has(0, n) })
	adm := kadm.NewClient(tandemtest.Client(t, p.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eventually(t, "three members in a stable group", func() bool {
		d, err := adm.DescribeGroups(ctx, group)
		return err == nil && d[group].State == "Stable" && len(d[group].Members) == 3
	})

	ms[0].stop()
	produceValues(t, p.Addr, topic, n, 2*n)
	eventually(t, "the survivors to consume the second round", func() bool { return c.has(n, 2*n) })
	d, err := adm.DescribeGroups(ctx, group)
	if err != nil || len(d[group].Members) != 2 {
		t.Fatalf("after one member left: %v, %d members", err, len(d[group].Members))
	}
	assigned := 0
	for _, m := range d[group].Members {
		if ca, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range ca.Topics {
				assigned += len(tp.Partitions)
			}
		}
	}
	if assigned != numPartitions {
		t.Fatalf("survivors hold %d partitions, want %d", assigned, numPartitions)
	}
	ms[1].stop()
	ms[2].stop()

	// Everything consumed was committed: the group's offsets are the ends.
	ends := endOffsets(t, p.Addr, topic)
	eventually(t, "committed offsets to reach the end offsets", func() bool {
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return false
		}
		for part, end := range ends {
			if o, ok := offs.Lookup(topic, part); !ok || o.At != end {
				return false
			}
		}
		return true
	})

	// Restarted consumers resume at the committed offsets.
	c2 := &collector{seen: map[string]int{}}
	produceValues(t, p.Addr, topic, 2*n, 2*n+60)
	for range 3 {
		ms = append(ms, start(t, p.Addr, group, topic, c2))
	}
	eventually(t, "the restarted consumers to read the new records", func() bool { return c2.has(2*n, 2*n+60) })
	time.Sleep(500 * time.Millisecond)
	c2.mu.Lock()
	if len(c2.seen) != 60 {
		t.Errorf("restarted consumers read %d distinct records, want only the 60 new ones", len(c2.seen))
	}
	c2.mu.Unlock()
	for _, m := range ms[3:] {
		m.stop()
	}
}

// --- franz-go ---

type kgoMember struct {
	cl   *kgo.Client
	done chan struct{}
	quit context.CancelFunc
}

func startKgo(t *testing.T, addr, group, topic string, c *collector) groupMember {
	return runKgo(t, addr, group, topic, c, kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond))
}

// runKgo starts a franz-go group member that commits what it consumed
// after every poll.
func runKgo(t *testing.T, addr, group, topic string, c *collector, opts ...kgo.Opt) *kgoMember {
	cl := tandemtest.Client(t, addr, append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	m := &kgoMember{cl: cl, done: make(chan struct{}), quit: cancel}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) { c.add(r.Value) })
			if err := cl.CommitUncommittedOffsets(context.Background()); err != nil && ctx.Err() == nil {
				t.Logf("franz-go commit: %v", err)
			}
		}
	}()
	return m
}

func (m *kgoMember) stop() {
	m.quit()
	<-m.done
	m.cl.Close() // leaves the group
}

func TestGroupFranzGo(t *testing.T) { runGroupScenario(t, startKgo) }

// --- sarama ---

type saramaMember struct {
	cg   sarama.ConsumerGroup
	done chan struct{}
	quit context.CancelFunc
}

type saramaHandler struct{ c *collector }

func (saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		h.c.add(msg.Value)
		s.MarkMessage(msg, "")
	}
	return nil
}

func startSarama(t *testing.T, addr, group, topic string, c *collector) groupMember {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	cg, err := sarama.NewConsumerGroup([]string{addr}, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &saramaMember{cg: cg, done: make(chan struct{}), quit: cancel}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, saramaHandler{c}); err != nil && ctx.Err() == nil {
				t.Logf("sarama consume: %v", err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() { cg.Close() })
	return m
}

func (m *saramaMember) stop() {
	m.quit()
	<-m.done
	m.cg.Close() // commits and leaves the group
}

func TestGroupSarama(t *testing.T) { runGroupScenario(t, startSarama) }

// --- segmentio/kafka-go ---

type kafkaGoMember struct {
	r    *kafka.Reader
	done chan struct{}
	quit context.CancelFunc
}

func startKafkaGo(t *testing.T, addr, group, topic string, c *collector) groupMember {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{addr}, GroupID: group, Topic: topic,
		MaxWait: 200 * time.Millisecond, StartOffset: kafka.FirstOffset,
		CommitInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second,
		HeartbeatInterval: 500 * time.Millisecond, RebalanceTimeout: 10 * time.Second,
		JoinGroupBackoff: 200 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	m := &kafkaGoMember{r: r, done: make(chan struct{}), quit: cancel}
	go func() {
		defer close(m.done)
		for {
			msg, err := r.FetchMessage(ctx)
			if err != nil {
				return
			}
			c.add(msg.Value)
			r.CommitMessages(ctx, msg)
		}
	}()
	t.Cleanup(func() { r.Close() })
	return m
}

func (m *kafkaGoMember) stop() {
	m.quit()
	<-m.done
	m.r.Close() // flushes commits and leaves the group
}

func TestGroupKafkaGo(t *testing.T) { runGroupScenario(t, startKafkaGo) }

// --- kcat (librdkafka) ---

type kcatMember struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startKcat(t *testing.T, addr, group, topic string, c *collector) groupMember {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat not installed (Debian package kcat)")
	}
	cmd := exec.Command(kcat, "-b", addr, "-G", group, topic, "-q", "-u", "-f", "%s\n",
		"-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000",
		"-X", "heartbeat.interval.ms=500", "-X", "auto.commit.interval.ms=100")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &kcatMember{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.add(sc.Bytes())
		}
		cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-m.done })
	return m
}

func (m *kcatMember) stop() {
	m.cmd.Process.Signal(syscall.SIGTERM) // kcat closes its consumer: commit, leave
	<-m.done
}

func TestGroupKcat(t *testing.T) { runGroupScenario(t, startKcat) }

// TestGroupBrokerRestart: a consumer keeps its membership and position
// across a broker restart; committed offsets and the group's generation
// come back from __consumer_offsets.
func TestGroupBrokerRestart(t *testing.T) {
	p := tandemtest.StartProcess(t, t.TempDir(), groupArgs...)
	const topic, group = "rt", "rg"
	tandemtest.CreateTopic(t, p.Addr, topic, numPartitions)
	produceValues(t, p.Addr, topic, 0, 600)
	c := &collector{seen: map[string]int{}}
	m := startKgo(t, p.Addr, group, topic, c)
	eventually(t, "the records to be consumed", func() bool { return c.has(0, 600) })
	adm := kadm.NewClient(tandemtest.Client(t, p.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before, err := adm.DescribeGroups(ctx, group)
	if err != nil || before[group].State != "Stable" {
		t.Fatalf("describe before restart: %v %+v", err, before[group])
	}
	eventually(t, "offsets committed", func() bool {
		offs, err := adm.FetchOffsets(ctx, group)
		total := int64(0)
		offs.Each(func(o kadm.OffsetResponse) { total += o.At })
		return err == nil && total == 600
	})

	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	p.Restart()
	after, err := adm.DescribeGroups(ctx, group)
	if err != nil || after[group].State != "Stable" || len(after[group].Members) != 1 ||
		after[group].Members[0].MemberID != before[group].Members[0].MemberID {
		t.Fatalf("group after restart: %v %+v, want the member of before %+v", err, after[group], before[group])
	}
	offs, err := adm.FetchOffsets(ctx, group)
	total := int64(0)
	offs.Each(func(o kadm.OffsetResponse) { total += o.At })
	if err != nil || total != 600 {
		t.Fatalf("committed offsets after restart: %v, sum %d want 600", err, total)
	}
	// The running consumer resumes where it was: the new records once,
	// none of the old ones again.
	produceValues(t, p.Addr, topic, 600, 660)
	eventually(t, "the consumer to read the new records", func() bool { return c.has(600, 660) })
	m.stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for v, n := range c.seen {
		if n != 1 {
			t.Errorf("%s consumed %d times", v, n)
		}
	}
}
