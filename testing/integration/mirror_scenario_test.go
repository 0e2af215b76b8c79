package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// mirrorServeArgs are `tandem serve` flags for the scenario's clusters.
var mirrorServeArgs = []string{"--set", "mirror.topic.num.partitions=4", "--set", "offsets.topic.num.partitions=4",
	"--set", "transaction.state.log.num.partitions=4", "--set", "replica.fetch.wait.max.ms=200",
	"--set", "mirror.replica.fetch.backoff.ms=200", "--set", "mirror.metadata.refresh.interval.ms=1000"}

// rawLog reads every batch of a partition below its high watermark with
// raw Fetch requests, as stored.
func rawLog(t *testing.T, addr, topic string, partition int32) [][]byte {
	t.Helper()
	cl := tandemtest.Client(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil || md.Topics[topic].Err != nil {
		t.Fatalf("metadata of %s at %s: %v %v", topic, addr, err, md.Topics[topic].Err)
	}
	var out [][]byte
	for offset := int64(0); ; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxBytes, req.SessionEpoch = -1, 1<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, md.Topics[topic].ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = partition, offset, 1<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("fetch %s-%d@%d from %s: %v", topic, partition, offset, addr, err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			t.Fatalf("fetch %s-%d@%d from %s: error %d", topic, partition, offset, addr, p.ErrorCode)
		}
		b := p.RecordBatches
		for len(b) >= 12 {
			n := int(binary.BigEndian.Uint32(b[8:])) + 12
			if n > len(b) {
				break
			}
			if last := int64(binary.BigEndian.Uint64(b)) + int64(binary.BigEndian.Uint32(b[23:])); last >= offset {
				out = append(out, b[:n])
				offset = last + 1
			}
			b = b[n:]
		}
		if offset >= p.HighWatermark {
			return out
		}
	}
}

// tryEnds returns the end offsets of topic's partitions, false if they
// cannot be listed (yet).
func tryEnds(t *testing.T, addr, topic string) (map[int32]int64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(tandemtest.Client(t, addr)).ListEndOffsets(ctx, topic)
	if err != nil || offs.Error() != nil {
		return nil, false
	}
	m := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) { m[o.Partition] = o.Offset })
	return m, true
}

// batchValues returns the values of a batch's records (uncompressed:
// the scenario's producers do not compress).
func batchValues(t *testing.T, b []byte) []string {
	t.Helper()
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if rb.Attributes&0x20 != 0 {
		return nil // a control batch
	}
	recs := rb.Records
	var out []string
	for range rb.NumRecords {
		var r kmsg.Record
		if err := r.ReadFrom(recs); err != nil {
			t.Fatal(err)
		}
		out = append(out, string(r.Value))
		recs = recs[int(r.Length)+varintLen(int64(r.Length)):]
	}
	return out
}

func varintLen(v int64) int { return len(binary.AppendVarint(nil, v)) }

// TestMirrorDisasterScenario is issue 11's "Done when": A mirrors to B
// under a steady producer; A is killed (SIGKILL); B fails over with
// --failover --force, which reports what it gave up, and takes writes; A
// comes back with writes of its own; --failback on A makes A mirror B; A
// ends byte-identical to B (raw Fetch, batch by batch), the records A had
// and B did not are in t.diverged on A, and the manifest lists exactly
// them.
func TestMirrorDisasterScenario(t *testing.T) {
	a := tandemtest.StartProcess(t, t.TempDir(), mirrorServeArgs...)
	// B is throttled: it lags behind A, as a mirror over a WAN does.
	b := tandemtest.StartProcess(t, t.TempDir(), append(slices.Clone(mirrorServeArgs), "--set", "mirror.replication.throttled.rate=15000", "--set", "replica.fetch.max.bytes=3000")...)
	const topic, parts = "t", int32(2)
	tandemtest.CreateTopic(t, a.Addr, topic, parts)
	ok := func(addr string, args ...string) string {
		t.Helper()
		code, out, errOut := runMirrors(t, append([]string{"--bootstrap-server", addr}, args...)...)
		if code != 0 {
			t.Fatalf("tandem mirrors %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}

	// A steady producer on A; B mirrors.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	acked := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cl, err := kgo.NewClient(kgo.SeedBrokers(a.Addr), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(2*time.Millisecond),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
			kgo.RecordDeliveryTimeout(5*time.Second), kgo.ProducerBatchCompression(kgo.NoCompression()))
		if err != nil {
			return
		}
		defer cl.Close()
		for i := 0; ctx.Err() == nil; i++ {
			cl.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "a-%06d", i)}, func(_ *kgo.Record, err error) {
				if err == nil {
					mu.Lock()
					acked++
					mu.Unlock()
				}
			})
			time.Sleep(200 * time.Microsecond)
		}
	}()
	ok(b.Addr, "--create", "--add", "--mirror", "M", "--source-bootstrap", a.Addr, "--topic", topic)
	waitFor(t, 60*time.Second, "B to mirror some records", func() bool {
		mu.Lock()
		n := acked
		mu.Unlock()
		ends, ok := tryEnds(t, b.Addr, topic)
		return ok && n > 3000 && ends[0] > 200 && ends[1] > 200
	})

	// A dies; B is promoted, with the loss reported.
	a.Kill9()
	cancel()
	wg.Wait()
	out := ok(b.Addr, "--failover", "--mirror", "M", "--force", "--timeout", "5s")
	t.Logf("failover:\n%s", out)
	bEnds := endOffsets(t, b.Addr, topic)
	reported := map[int32]int64{}
	for p := range parts {
		var src, dst, lag int64
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) >= 7 && f[0] == topic && f[1] == strconv.Itoa(int(p)) {
				src, _ = strconv.ParseInt(f[2], 10, 64)
				dst, _ = strconv.ParseInt(f[len(f)-3], 10, 64)
				// The source is dead: what it acknowledged after B last
				// heard of it is not known, so the lag is a lower bound.
				lag, _ = strconv.ParseInt(strings.TrimPrefix(f[len(f)-2], ">="), 10, 64)
			}
		}
		if dst <= 0 || lag != src-dst || dst+1 != bEnds[p] { // the failover's barrier follows the mirrored data
			t.Fatalf("partition %d: failover reported source %d destination %d lag %d; B's log ends at %d", p, src, dst, lag, bEnds[p])
		}
		reported[p] = lag
	}
	if reported[0]+reported[1] == 0 || !strings.Contains(out, fmt.Sprintf("gave up at least %d record(s)", reported[0]+reported[1])) {
		t.Fatalf("the forced failover of a lagging mirror does not report what it gave up:\n%s", out)
	}
	bc := tandemtest.Client(t, b.Addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	for p := range parts {
		for i := range 10 {
			if err := bc.ProduceSync(wctx, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "b-%d-%d", p, i)}).FirstErr(); err != nil {
				t.Fatalf("B does not take writes after the failover: %v", err)
			}
		}
	}

	// A comes back, with records B never got (at least those B knew it
	// lacked) and writes of its own.
	a.Restart()
	for p, end := range endOffsets(t, a.Addr, topic) {
		if lost := end - (bEnds[p] - 1); lost < reported[p] {
			t.Fatalf("partition %d: the failover reported %d records given up, A has %d more than B", p, reported[p], lost)
		}
	}
	ac := tandemtest.Client(t, a.Addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range parts {
		for i := range 7 {
			if err := ac.ProduceSync(wctx, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "a-late-%d-%d", p, i)}).FirstErr(); err != nil {
				t.Fatalf("produce to A after its restart: %v", err)
			}
		}
	}
	// What A has that B does not: everything from the first batch where
	// their logs differ.
	want := map[int32][][]byte{}
	for p := range parts {
		al, bl := rawLog(t, a.Addr, topic, p), rawLog(t, b.Addr, topic, p)
		i := 0
		for i < len(al) && i < len(bl) && bytes.Equal(al[i], bl[i]) {
			i++
		}
		want[p] = al[i:]
		if len(want[p]) == 0 {
			t.Fatalf("partition %d: A has nothing B lacks", p)
		}
	}

	// Failback, on A.
	out = ok(a.Addr, "--failback", "--mirror", "M", "--source-bootstrap", b.Addr, "--yes")
	t.Logf("failback:\n%s", out)
	waitFor(t, 60*time.Second, "A to converge with B", func() bool {
		ae, be := endOffsets(t, a.Addr, topic), endOffsets(t, b.Addr, topic)
		return ae[0] == be[0] && ae[1] == be[1]
	})
	for p := range parts {
		if err := diffLogs(rawLog(t, b.Addr, topic, p), rawLog(t, a.Addr, topic, p)); err != nil {
			t.Fatalf("partition %d: A is not byte-identical to B: %v", p, err)
		}
	}

	// t.diverged on A holds exactly what A had and B did not, same bytes
	// from the attributes on (the CRC covers them), and the manifest lists
	// exactly those records.
	var manifest []struct {
		Diverged []struct {
			Topic       string `json:"topic"`
			Partition   int32  `json:"partition"`
			FirstOffset int64  `json:"first_offset"`
			LastOffset  int64  `json:"last_offset"`
			Records     int64  `json:"records"`
			CopyStart   int64  `json:"copy_start"`
			CopyEnd     int64  `json:"copy_end"`
		} `json:"diverged"`
	}
	if err := json.Unmarshal([]byte(ok(a.Addr, "--describe", "--mirror", "M", "--json")), &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("--describe --json: %v", err)
	}
	total := 0
	for p := range parts {
		got := rawLog(t, a.Addr, topic+".diverged", p)
		if len(got) != len(want[p]) {
			t.Fatalf("partition %d: t.diverged has %d batches, A had %d that B lacks", p, len(got), len(want[p]))
		}
		var wantValues []string
		for i := range got {
			if !bytes.Equal(got[i][17:], want[p][i][17:]) {
				t.Fatalf("partition %d: copy %d differs from the batch A had", p, i)
			}
			wantValues = append(wantValues, batchValues(t, want[p][i])...)
		}
		var ranges [][2]int64
		var records int64
		for _, d := range manifest[0].Diverged {
			if d.Topic == topic && d.Partition == p {
				ranges = append(ranges, [2]int64{d.FirstOffset, d.LastOffset})
				records += d.Records
			}
		}
		first := int64(binary.BigEndian.Uint64(want[p][0]))
		lastB := want[p][len(want[p])-1]
		last := int64(binary.BigEndian.Uint64(lastB)) + int64(binary.BigEndian.Uint32(lastB[23:]))
		slices.SortFunc(ranges, func(x, y [2]int64) int { return int(x[0] - y[0]) })
		if len(ranges) == 0 || ranges[0][0] != first || ranges[len(ranges)-1][1] != last || records != int64(len(wantValues)) {
			t.Fatalf("partition %d: manifest ranges %v with %d records, want offsets %d-%d and %d records", p, ranges, records, first, last, len(wantValues))
		}
		for i := 1; i < len(ranges); i++ {
			if ranges[i][0] > ranges[i-1][1]+1 {
				t.Fatalf("partition %d: manifest ranges %v leave a gap", p, ranges)
			}
		}
		total += len(wantValues)
	}
	resp, err := http.Get("http://" + a.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if v, _ := metricValue(string(body), `tandem_mirror_diverged_records{mirror="M"}`); int(v) != total {
		t.Fatalf("tandem_mirror_diverged_records %v, want %d", v, total)
	}
	t.Logf("diverged: %d records quarantined in %s.diverged", total, topic)
}
