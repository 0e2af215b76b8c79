// Package integration tests the built tandem binary on 127.0.0.1 with real
// Kafka clients: franz-go, sarama, segmentio/kafka-go and kcat (librdkafka).
package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

func TestMain(m *testing.M) { os.Exit(tandemtest.Main(m)) }

const (
	numRecords    = 100_000
	numPartitions = 6
)

// genRecord returns record i of a deterministic data set: keys spread over
// the partitions by the clients' partitioners, values of 100–1000 bytes of
// printable text (compressible like real payloads, safe for kcat's line
// format) and zero to two headers.
func genRecord(i int) (key, value []byte, headers [][2][]byte) {
	r := rand.New(rand.NewPCG(uint64(i), 0x7a6e64656d))
	key = fmt.Appendf(nil, "key-%06d", i)
	n := 100 + r.IntN(901)
	value = make([]byte, 0, n)
	value = fmt.Appendf(value, "record %d ", i)
	words := []string{"tandem ", "kafka ", "mirror ", "offset ", "epoch ", "batch ", "pebble "}
	for len(value) < n {
		if r.IntN(4) == 0 {
			value = append(value, byte('a'+r.IntN(26)), byte('0'+r.IntN(10)))
		} else {
			value = append(value, words[r.IntN(len(words))]...)
		}
	}
	value = value[:n]
	switch i % 3 {
	case 1:
		headers = [][2][]byte{{[]byte("idx"), []byte(strconv.Itoa(i))}}
	case 2:
		bin := make([]byte, r.IntN(21))
		for j := range bin {
			bin[j] = byte(r.Uint32())
		}
		headers = [][2][]byte{{[]byte("idx"), []byte(strconv.Itoa(i))}, {[]byte("bin"), bin}}
	}
	return key, value, headers
}

func recordIndex(key []byte) (int, error) {
	s, ok := strings.CutPrefix(string(key), "key-")
	if !ok {
		return 0, fmt.Errorf("key %q is not key-N", key)
	}
	return strconv.Atoi(s)
}

// pos is where a record was acknowledged.
type pos struct {
	partition int32
	offset    int64
}

// verifier checks consumed records as they arrive: per partition, offsets
// contiguous from 0 and records in production order; every record exactly
// once, byte-identical to genRecord; and, when acked is set, each at the
// partition and offset its producer was told.
type verifier struct {
	n       int
	headers bool  // compare headers (kcat writes none)
	acked   []pos // by record index; nil: not known

	next    map[int32]int64 // next expected offset per partition
	lastIdx map[int32]int
	seen    []bool
	count   int
	nerrs   int
	errs    []string
}

func newVerifier(n int, headers bool, acked []pos) *verifier {
	return &verifier{n: n, headers: headers, acked: acked, next: map[int32]int64{},
		lastIdx: map[int32]int{}, seen: make([]bool, n)}
}

func (v *verifier) errorf(format string, args ...any) {
	v.nerrs++
	if len(v.errs) < 15 {
		v.errs = append(v.errs, fmt.Sprintf(format, args...))
	}
}

func (v *verifier) add(partition int32, offset int64, key, value []byte, headers [][2][]byte) {
	v.count++
	if want := v.next[partition]; offset != want {
		v.errorf("partition %d: offset %d, want %d (gap or reorder)", partition, offset, want)
	}
	v.next[partition] = offset + 1
	i, err := recordIndex(key)
	if err != nil || i < 0 || i >= v.n {
		v.errorf("partition %d offset %d: bad key %q", partition, offset, key)
		return
	}
	if v.seen[i] {
		v.errorf("partition %d offset %d: record %d seen twice", partition, offset, i)
	}
	v.seen[i] = true
	if last, ok := v.lastIdx[partition]; ok && i <= last {
		v.errorf("partition %d offset %d: record %d after record %d (out of order)", partition, offset, i, last)
	}
	v.lastIdx[partition] = i
	_, wantValue, wantHeaders := genRecord(i)
	if !bytes.Equal(value, wantValue) {
		v.errorf("partition %d offset %d: record %d value differs (%d bytes, want %d)", partition, offset, i, len(value), len(wantValue))
	}
	if v.headers && !equalHeaders(headers, wantHeaders) {
		v.errorf("partition %d offset %d: record %d headers %q, want %q", partition, offset, i, headers, wantHeaders)
	}
	if v.acked != nil && v.acked[i] != (pos{partition, offset}) {
		v.errorf("record %d read at %d/%d, acknowledged at %d/%d", i, partition, offset, v.acked[i].partition, v.acked[i].offset)
	}
}

func equalHeaders(a, b [][2][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i][0], b[i][0]) || !bytes.Equal(a[i][1], b[i][1]) {
			return false
		}
	}
	return true
}

// finish fails the test if check finds a problem.
func (v *verifier) finish(t *testing.T, ends map[int32]int64) {
	t.Helper()
	if err := v.check(ends); err != nil {
		t.Fatal(err)
	}
}

// check reports what went wrong, after checking that every record was read
// and that the partitions end where the reads ended (no extra records).
func (v *verifier) check(ends map[int32]int64) error {
	if v.count != v.n {
		v.errorf("read %d records, want %d", v.count, v.n)
	}
	if missing := v.n - countTrue(v.seen); missing > 0 {
		v.errorf("%d records never read (first: %d)", missing, firstFalse(v.seen))
	}
	if len(v.next) != numPartitions {
		v.errorf("records in %d partitions, want %d", len(v.next), numPartitions)
	}
	for p, end := range ends {
		if v.next[p] != end {
			v.errorf("partition %d ends at offset %d, reads ended at %d", p, end, v.next[p])
		}
	}
	if v.nerrs > 0 {
		return fmt.Errorf("%d problems in the consumed data:\n  %s", v.nerrs, strings.Join(v.errs, "\n  "))
	}
	return nil
}

func countTrue(bs []bool) (n int) {
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func firstFalse(bs []bool) int {
	for i, b := range bs {
		if !b {
			return i
		}
	}
	return -1
}

// endOffsets returns the end offset of every partition of topic.
func endOffsets(t testing.TB, addr, topic string) map[int32]int64 {
	t.Helper()
	return listOffsets(t, addr, topic, true)
}

func listOffsets(t testing.TB, addr, topic string, end bool) map[int32]int64 {
	t.Helper()
	adm := kadm.NewClient(tandemtest.Client(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	list := adm.ListStartOffsets
	if end {
		list = adm.ListEndOffsets
	}
	offs, err := list(ctx, topic)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		t.Fatalf("listing offsets of %s: %v", topic, err)
	}
	m := make(map[int32]int64)
	offs.Each(func(o kadm.ListedOffset) { m[o.Partition] = o.Offset })
	return m
}

// consumeAll reads topic from the beginning with a fresh franz-go client
// until n records arrived, handing each to fn. It fails if no record
// arrives for 30 seconds.
func consumeAll(t testing.TB, addr, topic string, n int, fn func(*kgo.Record), opts ...kgo.Opt) {
	t.Helper()
	cl := tandemtest.Client(t, addr, append([]kgo.Opt{kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(50 << 20)}, opts...)...)
	defer cl.Close()
	for got := 0; got < n; {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		if ctx.Err() != nil && fs.NumRecords() == 0 {
			t.Fatalf("consuming %s: no record for 30s after %d of %d", topic, got, n)
		}
		fs.EachError(func(topic string, p int32, err error) {
			if ctx.Err() == nil {
				t.Errorf("fetching %s/%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { got++; fn(r) })
	}
}

func kgoHeaders(hs [][2][]byte) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	for _, h := range hs {
		out = append(out, kgo.RecordHeader{Key: string(h[0]), Value: h[1]})
	}
	return out
}

func fromKgoHeaders(hs []kgo.RecordHeader) [][2][]byte {
	var out [][2][]byte
	for _, h := range hs {
		out = append(out, [2][]byte{[]byte(h.Key), h.Value})
	}
	return out
}
