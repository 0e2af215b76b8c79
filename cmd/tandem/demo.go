//go:build !tandem_omit_mirror

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem"
	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/tandem-kafka/tandem/cmd/tandem/internal/mirrorcmd"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/server"
)

const demoDoc = `Shows Cluster Mirroring on one machine: starts a source and a destination
cluster in this process, produces a topic on the source while the
destination mirrors it, and prints tandem mirrors --describe until the lag
is 0. Nothing is left behind.

With --brokers N the source cluster has N brokers (a metadata quorum of
N voters) and the topic replication factor min(3, N). The destination
is one broker, to keep the demo small; a multi-broker destination is
set up as in docs/mirroring.md.

Usage: tandem demo [flags]
`

// demo is `tandem demo`: a source and a destination cluster in this
// process (temporary directories, free 127.0.0.1 ports), a topic produced
// on the source while the destination mirrors it, and `tandem mirrors
// --describe` printed until the lag is 0. The mirror is created and the
// topic added with the same code as the two `tandem mirrors` commands it
// prints.
func demo(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlags("demo", demoDoc)
	records := fs.Int("records", 50000, "records to produce on the source")
	size := fs.Int("record-bytes", 200, "bytes per record value")
	rate := fs.Int64("rate", 1<<20, "mirror.replication.throttled.rate of the destination, bytes/s (0: unlimited), so that the lag is visible")
	interval := fs.Duration("interval", time.Second, "time between two --describe")
	duration := fs.Duration("duration", 2*time.Minute, "give up after this long")
	brokers := fs.Int("brokers", 1, "brokers in the source cluster (1 to 9)")
	if code, done := fs.ParseArgs(args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		return cli.Exit(stderr, "demo", cli.UsageErrorf("unexpected arguments %q", fs.Args()))
	}
	if *brokers < 1 || *brokers > 9 {
		return cli.Exit(stderr, "demo", cli.UsageErrorf("--brokers %d: want 1 to 9", *brokers))
	}
	if err := runDemo(stdout, stderr, *brokers, *records, *size, *rate, *interval, *duration); err != nil {
		return cli.Exit(stderr, "demo", err)
	}
	return 0
}

func runDemo(stdout, stderr io.Writer, brokers, records, size int, rate int64, interval, duration time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	rf := min(3, brokers)
	srcAddrs, stop, err := startDemoCluster(ctx, log, "source", brokers, rf, nil)
	stops = append(stops, stop)
	if err != nil {
		return err
	}
	dstAddrs, stop, err := startDemoCluster(ctx, log, "destination", 1, rf, map[string]string{"mirror.replication.throttled.rate": strconv.FormatInt(rate, 10)})
	stops = append(stops, stop)
	if err != nil {
		return err
	}
	srcList, dstList := strings.Join(srcAddrs, ","), strings.Join(dstAddrs, ",")
	fmt.Fprintf(stdout, "source cluster      %s\ndestination cluster %s\n\n", srcList, dstList)

	const topic, name = "demo", "demo"
	cl, err := kgo.NewClient(kgo.SeedBrokers(srcAddrs...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, int16(rf), nil, topic); err != nil {
		return fmt.Errorf("create topic %s on the source: %w", topic, err)
	}
	// A first half before the mirror exists, the rest while it mirrors.
	if err := produceDemo(ctx, cl, size, 0, records/2); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	fmt.Fprintf(stdout, "produced %d records to topic %s (replication factor %d) on the source\n\n", records/2, topic, rf)

	for _, cmd := range [][]string{
		{"--bootstrap-server", dstAddrs[0], "--create", "--mirror", name, "--source-bootstrap", srcList},
		{"--bootstrap-server", dstAddrs[0], "--add", "--topic", topic, "--mirror", name},
	} {
		fmt.Fprintf(stdout, "$ tandem mirrors %s\n", strings.Join(cmd, " "))
		if code := mirrorcmd.Run(cmd, stdout, stderr); code != 0 {
			return fmt.Errorf("tandem mirrors %s failed", strings.Join(cmd, " "))
		}
	}
	produced := make(chan error, 1)
	go func() { produced <- produceDemo(ctx, cl, size, records/2, records) }()

	acl, err := kgo.NewClient(kgo.SeedBrokers(dstAddrs...), admin.Opt())
	if err != nil {
		return err
	}
	defer acl.Close()
	return watchDemo(ctx, stdout, stderr, admin.New(acl), kadm.NewClient(cl), dstAddrs[0], name, topic, records, produced, interval, duration)
}

// startDemoCluster starts one cluster of the demo, of brokers brokers (a
// replication factor of rf for more than one), with the properties extra,
// and returns its bootstrap servers, node 1 first, and what stops it
// (never nil, to be called even if starting failed).
func startDemoCluster(ctx context.Context, log *slog.Logger, name string, brokers, rf int, extra map[string]string) ([]string, func(), error) {
	props := map[string]string{"mirror.topic.num.partitions": "3", "offsets.topic.num.partitions": "3",
		"transaction.state.log.num.partitions": "3", "replica.fetch.wait.max.ms": "100", "mirror.replica.fetch.backoff.ms": "200"}
	listen := []string{"127.0.0.1:0"}
	if brokers > 1 {
		addrs, err := freeLoopbackAddrs(2 * brokers)
		if err != nil {
			return nil, func() {}, err
		}
		listen = addrs[:brokers]
		voters := make([]string, brokers)
		for i, a := range addrs[brokers:] {
			voters[i] = fmt.Sprintf("%d@%s", i+1, a)
		}
		props["controller.quorum.voters"] = strings.Join(voters, ",")
		for _, k := range []string{"default.replication.factor", "offsets.topic.replication.factor", "transaction.state.log.replication.factor", "mirror.topic.replication.factor"} {
			props[k] = strconv.Itoa(rf)
		}
	}
	for k, v := range extra {
		props[k] = v
	}
	// A cluster's voters start together: each waits for a majority.
	bs, dirs := make([]*server.Broker, brokers), make([]string, brokers)
	errs := make(chan error, brokers)
	for i := range brokers {
		go func() {
			dir, err := os.MkdirTemp("", fmt.Sprintf("tandem-demo-%s-%d-", name, i+1))
			if err != nil {
				errs <- err
				return
			}
			b, err := tandem.NewBroker(server.Config{NodeID: int32(i + 1), DataDir: dir, Listen: listen[i], Props: props, Logger: log})
			if err == nil {
				err = b.Start(ctx)
			}
			if err != nil {
				os.RemoveAll(dir)
				errs <- fmt.Errorf("start the %s cluster: %w", name, err)
				return
			}
			bs[i], dirs[i] = b, dir
			errs <- nil
		}()
	}
	var err error
	for range brokers {
		err = cmpErr(err, <-errs)
	}
	stop := func() { closeAll(bs, dirs) }
	if err != nil {
		return nil, stop, err
	}
	addrs := make([]string, brokers)
	for i, b := range bs {
		addrs[i] = b.Addr()
	}
	return addrs, stop, nil
}

// produceDemo produces the demo's records from to to (keys their numbers,
// values of size bytes, random letters after "record N": the lag is not
// compressed away) and waits for them.
func produceDemo(ctx context.Context, cl *kgo.Client, size, from, to int) error {
	rng := rand.New(rand.NewPCG(uint64(from), 1))
	for i := from; i < to; i++ {
		value := fmt.Appendf(make([]byte, 0, size), "record %d ", i)
		for len(value) < size {
			value = append(value, byte('a'+rng.IntN(26)))
		}
		cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: value}, nil)
	}
	return cl.Flush(ctx)
}

// watchDemo prints tandem mirrors --describe of the demo's mirror on the
// destination dst every interval until the second half of the records is
// produced (produced says when) and the mirror has caught up, or ctx ends.
func watchDemo(ctx context.Context, stdout, stderr io.Writer, a *admin.Client, src *kadm.Client, dst, name, topic string, records int, produced chan error, interval, duration time.Duration) error {
	describe := []string{"--bootstrap-server", dst, "--describe", "--mirror", name}
	done := false
	for !done {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the mirror did not catch up within %v", duration)
		case <-time.After(interval):
		}
		if produced != nil {
			select {
			case err := <-produced:
				if err != nil {
					return fmt.Errorf("produce: %w", err)
				}
				fmt.Fprintf(stdout, "\nproduced all %d records\n", records)
				produced = nil
			default:
			}
		}
		done = produced == nil && caughtUp(ctx, a, src, name, topic)
		fmt.Fprintf(stdout, "\n$ tandem mirrors %s\n", strings.Join(describe, " "))
		if code := mirrorcmd.Run(describe, stdout, stderr); code != 0 {
			return fmt.Errorf("describe failed")
		}
	}
	fmt.Fprintf(stdout, "\nthe mirror caught up: lag 0 on every partition; stopping both clusters\n")
	return nil
}

// closeAll stops a demo cluster's brokers together (each moves its
// leaderships away first) and removes their data.
func closeAll(bs []*server.Broker, dirs []string) {
	var wg sync.WaitGroup
	for i, b := range bs {
		if b == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.Close()
			os.RemoveAll(dirs[i])
		}()
	}
	wg.Wait()
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// freeLoopbackAddrs reserves n 127.0.0.1 addresses: each was free a
// moment ago.
func freeLoopbackAddrs(n int) ([]string, error) {
	return portRange("127.0.0.1:0", 0, n)
}

// caughtUp reports whether every partition of the mirror is MIRRORING
// and holds everything the source has (asked of the source itself: the
// mirror's own view of the source may be a fetch old).
func caughtUp(ctx context.Context, a *admin.Client, source *kadm.Client, name, topic string) bool {
	ends, err := source.ListEndOffsets(ctx, topic)
	if err != nil || ends.Error() != nil {
		return false
	}
	ms, err := a.DescribeMirrors(ctx, name)
	if err != nil || len(ms) != 1 || len(ms[0].Topics) != 1 {
		return false
	}
	for _, p := range ms[0].Topics[0].Partitions {
		end, ok := ends.Lookup(topic, p.PartitionIndex)
		if p.State != "MIRRORING" || p.Lag != 0 || !ok || p.DestinationOffset != end.Offset {
			return false
		}
	}
	return true
}
