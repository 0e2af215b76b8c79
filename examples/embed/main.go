// Command embed runs a Tandem broker inside a Go program, with the plugins
// of `tandem serve`: a producer writes three records, a consumer group
// reads them back and commits its offsets, and the broker stops.
//
// It is the example of docs/embedding.md, and the program whose build
// cost that page gives.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem"
	"github.com/tandem-kafka/tandem/server"
)

func main() {
	dir, err := os.MkdirTemp("", "tandem-embed-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, dir, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dir string, out io.Writer) error {
	b, err := tandem.NewBroker(server.Config{
		DataDir: dir,
		Listen:  "127.0.0.1:0", // a free port; b.Addr() tells which
		Props:   map[string]string{"group.initial.rebalance.delay.ms": "0"},
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer b.Close()

	producer, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("greetings"))
	if err != nil {
		return err
	}
	defer producer.Close()
	admin := kadm.NewClient(producer)
	if _, err := admin.CreateTopic(ctx, 1, 1, nil, "greetings"); err != nil {
		return err
	}
	for _, v := range []string{"hello", "bonjour", "hallo"} {
		if err := producer.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
			return err
		}
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()),
		kgo.ConsumerGroup("readers"), kgo.ConsumeTopics("greetings"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		return err
	}
	defer consumer.Close()
	for read := 0; read < 3; {
		fetches := consumer.PollFetches(ctx)
		if err := fetches.Err(); err != nil {
			return err
		}
		fetches.EachRecord(func(r *kgo.Record) {
			fmt.Fprintf(out, "%d %s\n", r.Offset, r.Value)
			read++
		})
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		return err
	}
	committed, err := admin.FetchOffsets(ctx, "readers")
	if err != nil {
		return err
	}
	o, _ := committed.Lookup("greetings", 0)
	fmt.Fprintln(out, "readers committed offset", o.At)
	return nil
}
