package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kind is what a workload does to the broker.
type Kind string

const (
	Produce  Kind = "produce" // producers only, as fast as the broker acknowledges
	Consume  Kind = "consume" // read a pre-filled log from the start
	EndToEnd Kind = "e2e"     // produce at 50% of the measured max and consume at once
)

// Workload is one cell of the benchmark matrix.
type Workload struct {
	Kind        Kind
	RecordSize  int    // bytes of value per record (>= 16: a timestamp and a sequence lead it)
	Partitions  int32  // partitions of the topic
	Acks        int    // 1 or -1 (all)
	Compression string // "none" or "zstd"
	Duration    time.Duration
	Runs        int   // measured runs; figures are the median with min and max
	Seed        int64 // payload bytes are a function of the seed alone
	// RTT is the round trip between the clusters of a mirror-rtt
	// workload (through a WAN proxy); part of its name.
	RTT time.Duration
}

// Name is a stable, topic-safe name such as "produce-1KiB-p6-acksall-none".
func (w Workload) Name() string {
	acks := "acks1"
	if w.Acks == -1 {
		acks = "acksall"
	}
	name := fmt.Sprintf("%s-%s-p%d-%s-%s", w.Kind, sizeName(w.RecordSize), w.Partitions, acks, w.Compression)
	if w.Kind == MirrorRTT {
		name += fmt.Sprintf("-rtt%dms", w.RTT.Milliseconds())
	}
	return name
}

func sizeName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

// produceKey is the produce workload whose maximum sets an end-to-end
// workload's offered load.
func (w Workload) produceKey() string {
	w.Kind = Produce
	return w.Name()
}

func (w Workload) validate() error {
	switch {
	case w.Kind != Produce && w.Kind != Consume && w.Kind != EndToEnd && !w.Kind.mirrors():
		return fmt.Errorf("unknown workload kind %q", w.Kind)
	case w.RTT < 0 || (w.RTT > 0 && w.Kind != MirrorRTT):
		return fmt.Errorf("round trip %v: only a mirror-rtt workload has one", w.RTT)
	case w.RecordSize < 16:
		return fmt.Errorf("record size %d: must be at least 16 bytes", w.RecordSize)
	case w.Partitions < 1:
		return fmt.Errorf("partitions %d: must be at least 1", w.Partitions)
	case w.Acks != 1 && w.Acks != -1:
		return fmt.Errorf("acks %d: must be 1 or -1", w.Acks)
	case w.Compression != "none" && w.Compression != "zstd":
		return fmt.Errorf("compression %q: must be none or zstd", w.Compression)
	case w.Duration <= 0 || w.Runs < 1:
		return fmt.Errorf("duration %v and runs %d must be positive", w.Duration, w.Runs)
	}
	return nil
}

// runStats is what one run measured from the client side.
type runStats struct {
	Records   int64         // records acknowledged (produce) or read (consume) in the measured run
	Bytes     int64         // value bytes of those records
	Elapsed   time.Duration // length of the measured run
	Produced  int64         // every record acknowledged, the warm-up record included
	PBytes    int64         // value bytes of Produced
	Consumed  int64         // every record read
	CBytes    int64         // value bytes of Consumed
	Errors    int64         // failed produces or fetch errors
	FirstErr  error
	Latencies []time.Duration // end-to-end only
}

// payloads are the record values a workload sends: a few distinct values of
// printable bytes from a 64-letter alphabet (about 6 bits of entropy per
// byte, so zstd has something to do without the data being trivial), all a
// function of the seed and the size.
type payloads struct {
	vals [][]byte
	pool sync.Pool
}

func newPayloads(seed int64, size int) *payloads {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(size)))
	p := &payloads{}
	for range 16 {
		v := make([]byte, size)
		for i := range v {
			v[i] = alphabet[rng.IntN(len(alphabet))]
		}
		p.vals = append(p.vals, v)
	}
	p.pool.New = func() any { return make([]byte, size) }
	return p
}

// record returns the seq-th record: its value starts with the send time
// (Unix nanoseconds) and the sequence number, for latency and checks.
func (p *payloads) record(seq int64, now time.Time) *kgo.Record {
	v := p.pool.Get().([]byte)
	copy(v, p.vals[seq%int64(len(p.vals))])
	binary.BigEndian.PutUint64(v, uint64(now.UnixNano()))
	binary.BigEndian.PutUint64(v[8:], uint64(seq))
	return &kgo.Record{Value: v}
}

func (p *payloads) release(r *kgo.Record) { p.pool.Put(r.Value) }

func sentAt(v []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(v)))
}

func producerOpts(addr, topic string, w Workload) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(time.Millisecond),
		kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.MaxBufferedRecords(1 << 20),
		kgo.MaxBufferedBytes(32 << 20),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordRetries(10),
	}
	if w.Compression == "zstd" {
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	}
	if w.Acks == 1 {
		// kgo requires acks=all for idempotence; acks=1 runs without it and
		// may keep several requests in flight.
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
			kgo.MaxProduceRequestsInflightPerBroker(5))
	} else {
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	return opts
}

func consumerOpts(addr, topic string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(50 << 20),
		kgo.FetchMaxPartitionBytes(10 << 20),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}
}

// createTopic creates topic with kadm and waits until its partitions have
// leaders, so that the first produce does not race the metadata.
func createTopic(ctx context.Context, addr, topic string, partitions int32, rf int16) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, partitions, rf, nil, topic); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil && len(td.Partitions) == int(partitions) {
				ready := true
				for _, p := range td.Partitions {
					ready = ready && p.Leader >= 0 && p.Err == nil
				}
				if ready {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s has no leaders: %w", topic, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// deleteTopic frees what the broker holds for topic (kfake keeps logs in
// memory); failing to delete does not fail the benchmark.
func deleteTopic(ctx context.Context, addr, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = kadm.NewClient(cl).DeleteTopic(ctx, topic)
	return err
}

// produceOpts shape one produce run.
type produceOpts struct {
	rate     float64 // records/s; 0: as fast as acknowledgements come
	e2e      bool    // consume at the same time and measure latency
	maxBytes int64   // stop sending after this many value bytes; 0: no cap
}

// produce sends records for w.Duration, then flushes: the rate is every
// record acknowledged over the time from the first send to the end of the
// flush (as kafka-producer-perf-test counts), so that records buffered at
// the deadline are neither lost nor free. With o.e2e, a consumer reads the topic at the same time and
// records each record's latency from its embedded send time.
func produce(ctx context.Context, addr, topic string, w Workload, p *payloads, o produceOpts) (runStats, error) {
	cl, err := kgo.NewClient(producerOpts(addr, topic, w)...)
	if err != nil {
		return runStats{}, fmt.Errorf("producer: %w", err)
	}
	defer cl.Close()

	var (
		st                  runStats
		acked, ackedB, errs atomic.Int64
		firstErr            atomic.Pointer[error]
		wg                  sync.WaitGroup
	)
	promise := func(r *kgo.Record, err error) {
		if err != nil {
			errs.Add(1)
			firstErr.CompareAndSwap(nil, &err)
		} else {
			acked.Add(1)
			ackedB.Add(int64(len(r.Value)))
		}
		p.release(r)
	}
	// Warm up: metadata, connection and producer ID before the clock runs.
	warm := p.record(0, time.Now())
	if err := cl.ProduceSync(ctx, warm).FirstErr(); err != nil {
		return st, fmt.Errorf("first produce to %s: %w", topic, err)
	}
	promise(warm, nil)

	var (
		cons     *consumer
		consDone = make(chan error, 1)
	)
	if o.e2e {
		if cons, err = newConsumer(addr, topic, true); err != nil {
			return st, err
		}
		defer cons.close()
		wg.Add(1)
		go func() { defer wg.Done(); consDone <- cons.run(ctx) }()
		if err := cons.awaitWarmUp(consDone, &wg); err != nil {
			return st, err
		}
	}

	base, baseB := acked.Load(), ackedB.Load() // the warm-up record is not in the window
	start := time.Now()
	deadline := start.Add(w.Duration)
	for seq := int64(1); ctx.Err() == nil; seq++ {
		now := time.Now()
		if !now.Before(deadline) {
			break
		}
		if o.maxBytes > 0 && seq*int64(w.RecordSize) > o.maxBytes {
			break
		}
		if o.rate > 0 {
			if due := start.Add(time.Duration(float64(seq) / o.rate * float64(time.Second))); now.Before(due) {
				time.Sleep(due.Sub(now))
				now = time.Now()
			}
		}
		cl.Produce(ctx, p.record(seq, now), promise)
	}
	if err := cl.Flush(ctx); err != nil {
		return st, fmt.Errorf("flush: %w", err)
	}
	st.Elapsed = time.Since(start)
	st.Records, st.Bytes = acked.Load()-base, ackedB.Load()-baseB
	st.Produced, st.PBytes, st.Errors = acked.Load(), ackedB.Load(), errs.Load()
	if e := firstErr.Load(); e != nil {
		st.FirstErr = *e
	}
	if o.e2e {
		if err := cons.finish(&st, consDone, &wg, w.Duration); err != nil {
			return st, err
		}
	}
	return st, nil
}

// awaitWarmUp waits until the end-to-end consumer (its run's result on
// ran, its goroutine in wg) has read the warm-up record: the clock starts
// then, so that its start-up is not counted as latency.
func (c *consumer) awaitWarmUp(ran chan error, wg *sync.WaitGroup) error {
	for wait := time.Now(); c.n.Load() == 0; {
		select {
		case err := <-ran:
			return fmt.Errorf("e2e consumer: %w", err)
		case <-time.After(time.Millisecond):
		}
		if time.Since(wait) > 30*time.Second {
			c.close()
			wg.Wait()
			return errors.New("e2e consumer read nothing in 30s")
		}
	}
	return nil
}

// finish waits for the end-to-end consumer to read every record st
// produced (a run of duration d; its run's result on ran), and adds what it read and the
// latencies to st.
func (c *consumer) finish(st *runStats, ran chan error, wg *sync.WaitGroup, d time.Duration) error {
	var err error
	c.want(st.Produced)
	select {
	case err = <-ran:
	case <-time.After(30*time.Second + d):
		err = fmt.Errorf("consumed %d of %d records before timing out", c.n.Load(), st.Produced)
		c.close()
	}
	wg.Wait()
	st.Consumed, st.CBytes = c.n.Load(), c.bytes.Load()
	st.Latencies = c.lat
	if err != nil {
		return fmt.Errorf("e2e consumer: %w", err)
	}
	return nil
}

// consumer reads a topic from the start until it has read a wanted number
// of records.
type consumer struct {
	cl        *kgo.Client
	n, bytes  atomic.Int64
	target    atomic.Int64 // -1 until known
	latencies bool
	lat       []time.Duration
	digests   map[int32]*digest // nil: not kept (see withDigests)
	errs      int64
	closeOnce sync.Once
}

func newConsumer(addr, topic string, latencies bool) (*consumer, error) {
	cl, err := kgo.NewClient(consumerOpts(addr, topic)...)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c := &consumer{cl: cl, latencies: latencies}
	c.target.Store(-1)
	return c, nil
}

func (c *consumer) want(n int64) { c.target.Store(n) }

// withDigests makes the consumer keep a digest of each partition's
// records, read once run has returned.
func (c *consumer) withDigests() *consumer {
	c.digests = map[int32]*digest{}
	return c
}

func (c *consumer) close() { c.closeOnce.Do(c.cl.Close) }

func (c *consumer) done() bool {
	t := c.target.Load()
	return t >= 0 && c.n.Load() >= t
}

// stallTimeout ends a consumer that reads nothing for this long: a broker
// that lost records must not hang the benchmark.
const stallTimeout = 30 * time.Second

func (c *consumer) run(ctx context.Context) error {
	for progress := time.Now(); !c.done(); {
		if time.Since(progress) > stallTimeout {
			return fmt.Errorf("read nothing for %v after %d records (want %d)", stallTimeout, c.n.Load(), c.target.Load())
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fs := c.cl.PollFetches(pctx)
		cancel()
		if fs.IsClientClosed() {
			return errors.New("client closed")
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				c.errs++
				ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		now := time.Now()
		var n, b int64
		fs.EachRecord(func(r *kgo.Record) {
			n++
			b += int64(len(r.Value))
			if c.digests != nil {
				c.digestOf(r.Partition).add(r)
			}
			if c.latencies && binary.BigEndian.Uint64(r.Value[8:]) != 0 { // not the warm-up record
				c.lat = append(c.lat, now.Sub(sentAt(r.Value)))
			}
		})
		c.bytes.Add(b)
		c.n.Add(n)
		if n > 0 {
			progress = now
		}
	}
	return nil
}

// consumeAll reads the whole topic (want records) and times it.
func consumeAll(ctx context.Context, addr, topic string, want int64) (runStats, error) {
	c, err := newConsumer(addr, topic, false)
	if err != nil {
		return runStats{}, err
	}
	defer c.close()
	c.want(want)
	start := time.Now()
	err = c.run(ctx)
	st := runStats{Elapsed: time.Since(start), Consumed: c.n.Load(), CBytes: c.bytes.Load(), Errors: c.errs}
	st.Records, st.Bytes = st.Consumed, st.CBytes
	if err != nil {
		return st, fmt.Errorf("consume %s: %w", topic, err)
	}
	return st, nil
}

// percentile returns the q-quantile (0..1) of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
