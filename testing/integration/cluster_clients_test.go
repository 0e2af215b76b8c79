package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// Round trips of sarama, segmentio/kafka-go and kcat against a cluster of
// three `tandem serve` processes: each produces to a topic of
// replication factor 3 (min.insync.replicas=2) while the leader of
// partition 0 is killed with SIGKILL, and consumes it back while another
// broker is killed. Every acknowledged record must be read back,
// byte-identical, where it was acknowledged.

const clusterRecords = 20_000

// clientCluster starts three brokers and creates topic on them.
func clientCluster(t *testing.T, topic string) *tandemtest.ProcCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("process cluster test")
	}
	c := tandemtest.StartProcCluster(t, 3, nil)
	adm := kadm.NewClient(tandemtest.Client(t, c.Addrs()[0], kgo.SeedBrokers(c.Addrs()...)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, numPartitions, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	fullISR(c, topic)
	return c
}

// fullISR waits until every broker's Metadata shows the topic with its
// full ISR: a broker that has not applied a new topic yet answers
// UNKNOWN_TOPIC_OR_PARTITION, which some clients (kafka-go's Writer) keep
// in their metadata cache.
func fullISR(c *tandemtest.ProcCluster, topic string) {
	for i := range c.Brokers {
		c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool {
			for _, p := range ps {
				if len(p.ISR) != 3 {
					return false
				}
			}
			return len(ps) == numPartitions
		}, int32(i+1))
	}
}

// leaderOf returns the live leader of partition p.
func leaderOf(c *tandemtest.ProcCluster, topic string, p int32) int32 {
	return c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool { return ps[p].Leader > 0 })[p].Leader
}

// killer kills brokers from another goroutine than the test's; the
// test waits for each kill with wait.
type killer struct {
	c    *tandemtest.ProcCluster
	once sync.Once
	done chan int32
}

func newKiller(c *tandemtest.ProcCluster) *killer {
	return &killer{c: c, done: make(chan int32, 1)}
}

// kill kills broker id once, whichever goroutine asks first.
func (k *killer) kill(id int32) {
	k.once.Do(func() {
		k.c.Broker(id).Kill9()
		k.done <- id
	})
}

func (k *killer) wait(t *testing.T) int32 {
	t.Helper()
	select {
	case id := <-k.done:
		return id
	case <-time.After(time.Minute):
		t.Fatal("no broker was killed")
		return 0
	}
}

// restartAndKillAnother restarts the killed broker, waits until every
// ISR is full again, and returns a killer for the consuming half that
// will kill another broker (the leader of partition 1, or any other).
func restartAndKillAnother(t *testing.T, c *tandemtest.ProcCluster, topic string, killed int32) (*killer, int32) {
	t.Helper()
	c.Broker(killed).Restart()
	fullISR(c, topic)
	next := leaderOf(c, topic, 1)
	if next == killed {
		next = killed%3 + 1
	}
	return newKiller(c), next
}

// ackedCheck checks what was read against what was acknowledged.
type ackedCheck struct {
	acked []pos  // by record index
	ok    []bool // acknowledged
	reads []int  // times read
	found []bool // read where acknowledged
	next  map[int32]int64
	n     int // records read
	errs  []string
}

func newAckedCheck(n int) *ackedCheck {
	return &ackedCheck{acked: make([]pos, n), ok: make([]bool, n), reads: make([]int, n), found: make([]bool, n), next: map[int32]int64{}}
}

func (a *ackedCheck) ack(i int, p pos) { a.acked[i], a.ok[i] = p, true }

func (a *ackedCheck) errorf(format string, args ...any) {
	if len(a.errs) < 15 {
		a.errs = append(a.errs, fmt.Sprintf(format, args...))
	}
}

func (a *ackedCheck) add(partition int32, offset int64, key, value []byte) {
	if want := a.next[partition]; offset != want {
		a.errorf("partition %d: offset %d, want %d (gap or reorder)", partition, offset, want)
	}
	a.next[partition] = offset + 1
	i, err := recordIndex(key)
	if err != nil || i < 0 || i >= len(a.reads) {
		a.errorf("partition %d offset %d: bad key %q", partition, offset, key)
		return
	}
	a.reads[i]++
	a.n++
	if _, want, _ := genRecord(i); !bytes.Equal(value, want) {
		a.errorf("partition %d offset %d: record %d value differs", partition, offset, i)
	}
	if a.ok[i] && a.acked[i] == (pos{partition, offset}) {
		a.found[i] = true
	}
}

// read is how many records were read.
func (a *ackedCheck) read() int { return a.n }

// finish fails the test if an acknowledged record is lost or moved, if
// the reads did not end at the partitions' ends, or (exactlyOnce, for
// idempotent producers) if a record was written twice.
func (a *ackedCheck) finish(t *testing.T, ends map[int32]int64, exactlyOnce bool) {
	t.Helper()
	var acked, lost, moved, dup int
	for i := range a.reads {
		if a.reads[i] > 1 {
			dup++
			if exactlyOnce {
				a.errorf("record %d read %d times", i, a.reads[i])
			}
		}
		if !a.ok[i] {
			continue
		}
		acked++
		switch {
		case a.reads[i] == 0:
			lost++
			a.errorf("record %d acknowledged at %d/%d, never read", i, a.acked[i].partition, a.acked[i].offset)
		case !a.found[i]:
			moved++
			a.errorf("record %d acknowledged at %d/%d, read elsewhere", i, a.acked[i].partition, a.acked[i].offset)
		}
	}
	for p, end := range ends {
		if a.next[p] != end {
			a.errorf("partition %d ends at offset %d, reads ended at %d", p, end, a.next[p])
		}
	}
	t.Logf("%d acknowledged, %d read: %d lost, %d moved, %d written more than once", acked, a.read(), lost, moved, dup)
	if acked < len(a.reads)*9/10 {
		a.errorf("only %d of %d records acknowledged", acked, len(a.reads))
	}
	if len(a.errs) > 0 {
		t.Fatalf("problems in the consumed data:\n  %s", strings.Join(a.errs, "\n  "))
	}
}

// TestClusterSarama: sarama's idempotent AsyncProducer (acks=WaitForAll)
// through the kill of a leader, its partition consumers through the kill
// of another broker.
func TestClusterSarama(t *testing.T) {
	const topic = "sarama-cluster"
	c := clientCluster(t, topic)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = "tandem-it-sarama"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 50
	cfg.Producer.Retry.Backoff = 200 * time.Millisecond
	cfg.Producer.Flush.Bytes = 256 << 10
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	cfg.Net.MaxOpenRequests = 1 // idempotence needs it
	cfg.Metadata.Retry.Max = 20
	cfg.Consumer.Retry.Backoff = 200 * time.Millisecond
	cfg.Consumer.Fetch.Default = 1 << 20

	prod, err := sarama.NewAsyncProducer(c.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range clusterRecords {
			key, value, _ := genRecord(i)
			prod.Input() <- &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(key), Value: sarama.ByteEncoder(value), Metadata: i}
		}
	}()
	check := newAckedCheck(clusterRecords)
	victim := leaderOf(c, topic, 0)
	k := newKiller(c)
	var failed int
	timeout := time.After(2 * time.Minute)
	for done := 0; done < clusterRecords; done++ {
		if done == clusterRecords/3 {
			k.kill(victim)
		}
		select {
		case m := <-prod.Successes():
			check.ack(m.Metadata.(int), pos{m.Partition, m.Offset})
		case err := <-prod.Errors():
			failed++
			t.Logf("not acknowledged: %v", err)
		case <-timeout:
			t.Fatalf("only %d of %d records answered after 2 minutes", done, clusterRecords)
		}
	}
	if err := prod.Close(); err != nil {
		t.Logf("closing the producer: %v", err)
	}
	killed := k.wait(t)
	k2, next := restartAndKillAnother(t, c, topic, killed)

	client, err := sarama.NewClient(c.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ends := endOffsets(t, c.Addrs()[0], topic)
	for part, end := range ends {
		// A partition whose leader just died is not consumable until
		// the client's metadata names the new one.
		var pc sarama.PartitionConsumer
		wait.Until(t, 30*time.Second, func() error {
			if pc, err = cons.ConsumePartition(topic, part, sarama.OffsetOldest); err != nil {
				client.RefreshMetadata(topic)
				return fmt.Errorf("consuming partition %d: %v", part, err)
			}
			return nil
		})
		for got := int64(0); got < end; got++ {
			if check.read() >= clusterRecords/3 {
				k2.kill(next)
			}
			select {
			case m := <-pc.Messages():
				check.add(m.Partition, m.Offset, m.Key, m.Value)
			case err := <-pc.Errors():
				t.Logf("consuming partition %d: %v (sarama retries)", part, err)
				got--
			case <-time.After(30 * time.Second):
				t.Fatalf("partition %d: no message for 30s after %d of %d", part, got, end)
			}
		}
		pc.Close()
	}
	k2.kill(next)
	k2.wait(t)
	check.finish(t, ends, true)
}

// TestClusterKafkaGo: segmentio/kafka-go's Writer (RequiredAcks=-1; it
// has no idempotence, so a retried batch may be written twice) through
// the kill of a leader, its Readers through the kill of another broker.
func TestClusterKafkaGo(t *testing.T) {
	const topic = "kafkago-cluster"
	c := clientCluster(t, topic)
	check := newAckedCheck(clusterRecords)
	victim := leaderOf(c, topic, 0)
	k := newKiller(c)
	var mu sync.Mutex
	var acked int
	w := &kafka.Writer{
		Addr:            kafka.TCP(c.Addrs()...),
		Topic:           topic,
		Balancer:        &kafka.Hash{},
		RequiredAcks:    kafka.RequireAll,
		BatchSize:       500,
		BatchBytes:      1 << 20,
		BatchTimeout:    5 * time.Millisecond,
		MaxAttempts:     30,
		WriteBackoffMin: 100 * time.Millisecond,
		WriteBackoffMax: time.Second,
		Completion: func(msgs []kafka.Message, err error) {
			if err != nil {
				return // not acknowledged
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				if i, err := recordIndex(m.Key); err == nil && i < clusterRecords {
					check.ack(i, pos{int32(m.Partition), m.Offset})
					acked++
				}
			}
			if acked >= clusterRecords/3 {
				go k.kill(victim) // not from the writer's goroutine
			}
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const chunk = 1000
	msgs := make([]kafka.Message, 0, chunk)
	for i := range clusterRecords {
		key, value, _ := genRecord(i)
		msgs = append(msgs, kafka.Message{Key: key, Value: value})
		if len(msgs) == chunk || i == clusterRecords-1 {
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				t.Logf("writing records up to %d: %v", i, err) // those are not acknowledged
			}
			msgs = msgs[:0]
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	killed := k.wait(t)
	k2, next := restartAndKillAnother(t, c, topic, killed)

	ends := endOffsets(t, c.Addrs()[0], topic)
	for part := range int32(numPartitions) {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: c.Addrs(), Topic: topic,
			Partition: int(part), MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 500 * time.Millisecond,
			ReadBackoffMin: 100 * time.Millisecond, ReadBackoffMax: time.Second, MaxAttempts: 30})
		for n := int64(0); n < ends[part]; n++ {
			if check.read() >= clusterRecords/3 {
				k2.kill(next)
			}
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("reading partition %d after %d of %d records: %v", part, n, ends[part], err)
			}
			check.add(int32(m.Partition), m.Offset, m.Key, m.Value)
		}
		r.Close()
	}
	k2.kill(next)
	k2.wait(t)
	check.finish(t, ends, false)
}

// TestClusterKcat: kcat (librdkafka) with enable.idempotence=true
// produces every line through the kill of a leader (it exits 0 only
// once every record is acknowledged), and consumes them back through
// the kill of another broker: every line once, in order.
func TestClusterKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat is required (apt-get install -y kcat): %v", err)
	}
	const topic = "kcat-cluster"
	c := clientCluster(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var in bytes.Buffer
	for i := range clusterRecords {
		key, value, _ := genRecord(i)
		fmt.Fprintf(&in, "%s:%s\n", key, value)
	}
	file := filepath.Join(t.TempDir(), "records.txt")
	if err := os.WriteFile(file, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	victim := leaderOf(c, topic, 0)
	// A small batch size and linger keep kcat producing for a while.
	prod := exec.CommandContext(ctx, kcat, "-P", "-b", strings.Join(c.Addrs(), ","), "-t", topic, "-K", ":",
		"-X", "acks=all", "-X", "enable.idempotence=true", "-X", "linger.ms=5", "-X", "batch.size=16384",
		"-X", "message.timeout.ms=60000", "-l", file)
	var prodOut bytes.Buffer
	prod.Stdout, prod.Stderr = &prodOut, &prodOut
	if err := prod.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- prod.Wait() }()
	var killedAt int64
	wait.Until(t, 3*time.Minute, func() error { // kcat -P is killed before then, with ctx
		select {
		case err := <-exited:
			t.Fatalf("kcat -P finished before a third of the records were stored (%v)\n%s", err, prodOut.Bytes())
		default:
		}
		var sum int64
		for _, e := range listOffsets(t, c.Addrs()[0], topic, true) {
			sum += e
		}
		if sum < clusterRecords/3 {
			return fmt.Errorf("%d of %d records stored, waiting for a third", sum, clusterRecords)
		}
		killedAt = sum
		return nil
	})
	c.Broker(victim).Kill9()
	if err := <-exited; err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, prodOut.Bytes())
	}
	t.Logf("broker %d killed with %d records stored", victim, killedAt)
	k2, next := restartAndKillAnother(t, c, topic, victim)

	ends := endOffsets(t, c.Addrs()[0], topic)
	cmd := exec.CommandContext(ctx, kcat, "-C", "-b", strings.Join(c.Addrs(), ","), "-t", topic, "-o", "beginning", "-e",
		"-f", `%p %o %k %s\n`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	v := newVerifier(clusterRecords, false, nil)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v.count == clusterRecords/3 {
			k2.kill(next)
		}
		f := bytes.SplitN(sc.Bytes(), []byte(" "), 4)
		if len(f) != 4 {
			t.Fatalf("kcat -C line %q", sc.Bytes())
		}
		part, err1 := strconv.ParseInt(string(f[0]), 10, 32)
		off, err2 := strconv.ParseInt(string(f[1]), 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("kcat -C line %q", sc.Bytes())
		}
		v.add(int32(part), off, bytes.Clone(f[2]), bytes.Clone(f[3]), nil)
	}
	if err := sc.Err(); err != nil {
		cmd.Process.Kill()
		t.Fatalf("reading kcat -C output: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("kcat -C: %v after %d records\n%s", err, v.count, stderr.Bytes())
	}
	k2.kill(next)
	k2.wait(t)
	// Every line once, in order, at contiguous offsets: nothing lost,
	// nothing written twice.
	v.finish(t, ends)
}
