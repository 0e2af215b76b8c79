package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stdin is what produce reads; a test replaces it.
var stdin io.Reader = os.Stdin

const produceDoc = `Writes records to a topic, one per line of stdin (the line is the value;
with --key-separator, what comes before the first separator is the key),
with acks=all and an idempotent producer. It prints, per partition, the
offsets written.

Usage: tandem produce TOPIC [--key-separator SEP] [--header k=v ...] [--partition N]

The topic must exist (tandem topics create). A line may be up to 16 MiB.
`

func produce(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("produce", produceDoc, false)
	keySep := c.String("key-separator", "", "split each line into key and value at the first `SEP`")
	partition := c.Int("partition", -1, "write every record to partition `N` (default: by key, or spread)")
	var headerFlags cli.MultiFlag
	c.Var(&headerFlags, "header", "header `k=v` on every record (repeatable)")
	var headers []kgo.RecordHeader
	check := func() error {
		if c.NArg() != 1 {
			return cli.UsageErrorf("name one topic: tandem produce TOPIC")
		}
		if *partition < -1 || *partition > 1<<31-1 {
			return cli.UsageErrorf("--partition %d: want a partition number", *partition)
		}
		for _, h := range headerFlags {
			k, v, ok := strings.Cut(h, "=")
			if !ok || k == "" {
				return cli.UsageErrorf("--header %q: want k=v", h)
			}
			headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		return nil
	}
	messages := &produceMessages{}
	opts := append([]kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks()), kgo.UnknownTopicRetries(2), kgo.ProducerLinger(5 * time.Millisecond)},
		messages.opts(&c.Client)...)
	if slices.Contains(args, "--partition") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--partition=") }) {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	return c.Run(args, stdout, stderr, 0, check, func(ctx context.Context, cl *kgo.Client, _ *kadm.Client) error {
		topic := c.Arg(0)
		var (
			mu       sync.Mutex
			firstErr error
			written  = map[int32][2]int64{} // partition → first, last offset
			n        int
		)
		done := func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = cli.KafkaError(err, messages.of(r.Topic, r.Partition)) // the broker's words
				}
				return
			}
			n++
			w, ok := written[r.Partition]
			if !ok {
				w = [2]int64{r.Offset, r.Offset}
			}
			w[0], w[1] = min(w[0], r.Offset), max(w[1], r.Offset)
			written[r.Partition] = w
		}
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			mu.Lock()
			failed := firstErr != nil
			mu.Unlock()
			if failed || ctx.Err() != nil {
				break
			}
			r := &kgo.Record{Topic: topic, Value: []byte(sc.Text()), Headers: headers}
			if *keySep != "" {
				if k, v, ok := strings.Cut(sc.Text(), *keySep); ok {
					r.Key, r.Value = []byte(k), []byte(v)
				}
			}
			if *partition >= 0 {
				r.Partition = int32(*partition)
			}
			cl.Produce(ctx, r, done)
		}
		readErr := sc.Err()
		if err := cl.Flush(ctx); err != nil && firstErr == nil {
			firstErr = err
		}
		mu.Lock()
		defer mu.Unlock()
		var parts []string
		for _, p := range slices.Sorted(maps.Keys(written)) {
			parts = append(parts, fmt.Sprintf("partition %d offsets %d-%d", p, written[p][0], written[p][1]))
		}
		if n > 0 {
			fmt.Fprintf(stdout, "Produced %d record(s) to %s: %s.\n", n, topic, strings.Join(parts, ", "))
		}
		switch {
		case firstErr != nil:
			return fmt.Errorf("producing to %s (%d record(s) written): %w", topic, n, firstErr)
		case readErr != nil:
			return fmt.Errorf("reading stdin (%d record(s) written): %w", n, readErr)
		}
		return nil
	}, opts...)
}

// consumedRecord is a record as consume --json prints it, one per line.
// Keys, values and headers are printed as text (UTF-8).
type consumedRecord struct {
	Topic     string           `json:"topic"`
	Partition int32            `json:"partition"`
	Offset    int64            `json:"offset"`
	Timestamp time.Time        `json:"timestamp"`
	Key       *string          `json:"key"` // null: no key
	Value     *string          `json:"value"`
	Headers   []consumedHeader `json:"headers"`
}

type consumedHeader struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

const consumeDoc = `Prints the records of a topic, one per line (the value; --print-key and
--print-headers put the key and the headers before it, tab-separated), or
one JSON object per record with --json. It reads from the end (only new
records) unless --from-beginning or --offset, until Ctrl-C, --count N
records, or with -e the end of every partition as it was at the start.

Usage: tandem consume TOPIC [--group G] [--from-beginning] [--partition N ... [--offset N]]
         [--count N] [-e] [--print-key] [--print-headers] [--json]

With --group the records are read as a member of consumer group G,
starting from its committed offsets, and the offsets of the records
printed are committed at the end.
`

func consume(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("consume", consumeDoc, true)
	group := c.String("group", "", "read as a member of consumer group `G` and commit what was printed")
	fromBeginning := c.Bool("from-beginning", false, "start at the log start (default: the end), where the group has no offset")
	var partitionFlags cli.MultiFlag
	c.Var(&partitionFlags, "partition", "read only partition `N` (repeatable; not with --group)")
	offset := c.Int64("offset", -1, "with --partition: start at offset `N`")
	count := c.Int("count", 0, "stop after `N` records (0: no limit)")
	var atEnd bool
	c.BoolVar(&atEnd, "e", false, "stop at the end of every partition, as it was at the start (same as --exit-at-end)")
	c.BoolVar(&atEnd, "exit-at-end", false, "stop at the end of every partition, as it was at the start")
	printKey := c.Bool("print-key", false, "print the key before the value")
	printHeaders := c.Bool("print-headers", false, "print the headers (k=v,k=v) before the value")
	var partitions []int32
	check := func() error {
		if c.NArg() != 1 {
			return cli.UsageErrorf("name one topic: tandem consume TOPIC")
		}
		for _, p := range partitionFlags {
			v, err := strconv.ParseInt(p, 10, 32)
			if err != nil || v < 0 {
				return cli.UsageErrorf("--partition %q: want a partition number", p)
			}
			partitions = append(partitions, int32(v))
		}
		switch {
		case *group != "" && len(partitions) > 0:
			return cli.UsageErrorf("--partition and --group do not go together: a group's members share the partitions")
		case *offset >= 0 && len(partitions) == 0:
			return cli.UsageErrorf("--offset needs --partition")
		case *offset >= 0 && *fromBeginning:
			return cli.UsageErrorf("--offset and --from-beginning do not go together")
		case *count < 0:
			return cli.UsageErrorf("--count %d: want 0 or more", *count)
		}
		return nil
	}
	return c.Run(args, stdout, stderr, 0, check, func(ctx context.Context, cl *kgo.Client, adm *kadm.Client) error {
		topic := c.Arg(0)
		details, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return fmt.Errorf("reading the metadata: %w", err)
		}
		d, ok := details[topic]
		if !ok || d.Err != nil {
			return fmt.Errorf("topic %s: %w", topic, orErr(d.Err, errors.New("not in the metadata")))
		}
		for _, p := range partitions {
			if _, ok := d.Partitions[p]; !ok {
				return fmt.Errorf("topic %s has no partition %d (it has %d)", topic, p, len(d.Partitions))
			}
		}
		start := kgo.NewOffset().AtEnd()
		if *fromBeginning {
			start = kgo.NewOffset().AtStart()
		}
		if *offset >= 0 {
			start = kgo.NewOffset().At(*offset)
		}
		// A second client reads: the first stays the admin's.
		opts := consumeOpts(cl, topic, *group, partitions, start)
		// -e: where each partition ends now, and where reading starts.
		rl := &readLoop{stdout: stdout, atEnd: atEnd, count: *count, asJSON: c.AsJSON, printKey: *printKey, printHeaders: *printHeaders, group: *group}
		if atEnd {
			if rl.left, rl.limit, err = endsToReach(ctx, adm, topic, partitions, *group, *fromBeginning, *offset); err != nil {
				return err
			}
		}
		rd, err := kgo.NewClient(opts...)
		if err != nil {
			return err
		}
		defer rd.Close()
		rl.rd = rd
		failure := rl.run(ctx)
		if *group != "" {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := rd.CommitMarkedOffsets(cctx); err != nil && failure == nil {
				failure = fmt.Errorf("committing the offsets of group %s: %w", *group, err)
			}
		}
		return failure
	})
}

// consumeOpts are the options of consume's reading client: cl's, reading
// topic from start as a member of group, or partitions, or every
// partition.
func consumeOpts(cl *kgo.Client, topic, group string, partitions []int32, start kgo.Offset) []kgo.Opt {
	opts := append(cl.Opts(), kgo.KeepControlRecords(), kgo.ConsumeResetOffset(start))
	switch {
	case group != "":
		opts = append(opts, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.AutoCommitMarks())
	case len(partitions) > 0:
		ps := map[int32]kgo.Offset{}
		for _, p := range partitions {
			ps[p] = start
		}
		opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: ps}))
	default:
		opts = append(opts, kgo.ConsumeTopics(topic))
	}
	return opts
}

// readLoop is consume's reading: records printed until Ctrl-C, count of
// them, or with atEnd the end of every partition as it was at the start.
type readLoop struct {
	rd     *kgo.Client
	stdout io.Writer
	atEnd  bool
	// left: partition → the offset to reach; limit: every partition →
	// its end (endsToReach).
	left, limit                    map[int32]int64
	count                          int
	asJSON, printKey, printHeaders bool
	group                          string // marks what it printed for the commit
}

// run polls and prints; its error is the first failure to read or print.
func (l *readLoop) run(ctx context.Context) error {
	printed := 0
	for !(l.atEnd && len(l.left) == 0) && (l.count == 0 || printed < l.count) {
		fs := l.rd.PollFetches(ctx)
		if ctx.Err() != nil {
			break // Ctrl-C: the normal end
		}
		var fetchErr error
		fs.EachError(func(t string, p int32, err error) {
			if fetchErr == nil && !errors.Is(err, context.Canceled) {
				fetchErr = fmt.Errorf("reading %s/%d: %w", t, p, err)
			}
		})
		if fetchErr != nil {
			return fetchErr
		}
		for _, r := range fs.Records() {
			if l.atEnd {
				if to, ok := l.left[r.Partition]; ok && r.Offset+1 >= to {
					delete(l.left, r.Partition)
				}
			}
			if r.Attrs.IsControl() || l.atEnd && r.Offset >= l.limit[r.Partition] {
				continue // a transaction marker, or past the end as it was at the start
			}
			if err := printRecord(l.stdout, r, l.asJSON, l.printKey, l.printHeaders); err != nil {
				return err
			}
			if l.group != "" {
				l.rd.MarkCommitRecords(r)
			}
			printed++
			if l.count > 0 && printed >= l.count {
				return nil
			}
		}
	}
	return nil
}

// endsToReach returns, for -e, the end offset of every partition at the
// start (limit), and those partitions that have records to read before
// it (left). Transaction markers are read too (KeepControlRecords), so
// that a partition whose last offset is a marker is seen to end.
func endsToReach(ctx context.Context, adm *kadm.Client, topic string, only []int32, group string, fromBeginning bool, offset int64) (left, limit map[int32]int64, err error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the end offsets of %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the start offsets of %s: %w", topic, err)
	}
	var committed kadm.OffsetResponses
	if group != "" {
		// A group that does not exist yet has committed nothing; some
		// brokers (kfake, Kafka's newer coordinator) say so with
		// GROUP_ID_NOT_FOUND rather than with empty offsets.
		committed, err = adm.FetchOffsetsForTopics(ctx, group, topic)
		if errors.Is(err, kerr.GroupIDNotFound) {
			committed, err = nil, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading the committed offsets of group %s: %w", group, err)
		}
	}
	left, limit = map[int32]int64{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		limit[o.Partition] = o.Offset
		if len(only) > 0 && !slices.Contains(only, o.Partition) {
			return
		}
		from := o.Offset // the end: nothing to read
		if fromBeginning {
			s, _ := starts.Lookup(topic, o.Partition)
			from = s.Offset
		}
		if offset >= 0 {
			from = offset
		}
		if c, ok := committed.Lookup(topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
			from = c.At
		}
		if from < o.Offset {
			left[o.Partition] = o.Offset
		}
	})
	return left, limit, nil
}

func printRecord(w io.Writer, r *kgo.Record, asJSON, key, headers bool) error {
	if asJSON {
		out := consumedRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(), Headers: []consumedHeader{}}
		if r.Key != nil {
			k := string(r.Key)
			out.Key = &k
		}
		if r.Value != nil {
			v := string(r.Value)
			out.Value = &v
		}
		for _, h := range r.Headers {
			out.Headers = append(out.Headers, consumedHeader{Key: h.Key, Value: string(h.Value)})
		}
		return cli.PrintJSON(w, out)
	}
	var b strings.Builder
	if headers {
		var hs []string
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		b.WriteString(strings.Join(hs, ",") + "\t")
	}
	if key {
		b.Write(r.Key)
		b.WriteString("\t")
	}
	b.Write(r.Value)
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}
