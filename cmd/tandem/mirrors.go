//go:build !tandem_omit_mirror

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
)

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// mirrors is `tandem mirrors`, the KIP's kafka-mirrors.sh.
func mirrors(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mirrors", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bootstrap := fs.String("bootstrap-server", "127.0.0.1:9092", "destination cluster `HOST:PORT`")
	create := fs.Bool("create", false, "create a mirror (--mirror, --source-bootstrap, --config)")
	add := fs.Bool("add", false, "add --topic to --mirror")
	remove := fs.Bool("remove", false, "remove --topic (a regular expression) from --mirror: failover")
	pause := fs.Bool("pause", false, "pause --mirror (optionally only --topic)")
	resume := fs.Bool("resume", false, "resume --mirror (optionally only --topic)")
	del := fs.Bool("delete", false, "delete --mirror with its topics")
	list := fs.Bool("list", false, "list mirrors")
	describe := fs.Bool("describe", false, "describe mirrors (or --mirror) with their lag")
	asJSON := fs.Bool("json", false, "print JSON")
	name := fs.String("mirror", "", "mirror `NAME`")
	source := fs.String("source-bootstrap", "", "source cluster `HOST:PORT`")
	allTopics := fs.Bool("all-topics", false, "with --remove, --pause or --resume: every topic of the mirror")
	var topics, configs multiFlag
	fs.Var(&topics, "topic", "topic `NAME` (repeatable)")
	fs.Var(&configs, "config", "mirror config `k=v` (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(*bootstrap), admin.Opt(), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		fmt.Fprintln(stderr, "tandem mirrors:", err)
		return 1
	}
	defer cl.Close()
	a := admin.New(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if *allTopics {
		topics = multiFlag{".*"}
	}
	need := func(what string, ok bool) error {
		if !ok {
			return fmt.Errorf("%s is required", what)
		}
		return nil
	}
	err = func() error {
		switch {
		case *create:
			if err := need("--mirror and --source-bootstrap", *name != "" && *source != ""); err != nil {
				return err
			}
			cfg := map[string]string{"bootstrap.servers": *source}
			for _, kv := range configs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("--config %q: want k=v", kv)
				}
				cfg[k] = v
			}
			if err := a.CreateMirror(ctx, *name, cfg); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "Created mirror %s.\n", *name)
		case *add:
			if err := need("--mirror and --topic", *name != "" && len(topics) > 0); err != nil {
				return err
			}
			m := map[string]string{}
			for _, t := range topics {
				m[t] = *name
			}
			if err := a.AddTopicsToMirror(ctx, m); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "Added %d topic(s) to mirror %s: %v\n", len(topics), *name, []string(topics))
		case *remove:
			if err := need("--mirror and --topic", *name != "" && len(topics) > 0); err != nil {
				return err
			}
			msg, err := a.RemoveTopicsFromMirror(ctx, *name, topics)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, msg)
		case *pause, *resume:
			if err := need("--mirror", *name != ""); err != nil {
				return err
			}
			if *pause {
				err = a.PauseMirror(ctx, *name, topics...)
			} else {
				err = a.ResumeMirror(ctx, *name, topics...)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "Mirror %s: done.\n", *name)
		case *del:
			if err := need("--mirror", *name != ""); err != nil {
				return err
			}
			if err := a.DeleteMirror(ctx, *name); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "Deleted mirror %s.\n", *name)
		case *list:
			ms, err := a.ListMirrors(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				return json.NewEncoder(stdout).Encode(ms)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MIRROR\tSOURCE\tTOPICS")
			for _, m := range ms {
				fmt.Fprintf(tw, "%s\t%s\t%d\n", m.MirrorName, m.SourceBootstrap, m.TopicCount)
			}
			return tw.Flush()
		case *describe:
			var names []string
			if *name != "" {
				names = []string{*name}
			}
			ms, err := a.DescribeMirrors(ctx, names...)
			if err != nil {
				return err
			}
			if *asJSON {
				return json.NewEncoder(stdout).Encode(ms)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MIRROR\tTOPIC\tPARTITION\tSOURCE-OFFSET\tDESTINATION-OFFSET\tLAG\tSTATE")
			for _, m := range ms {
				if m.ErrorMessage != nil {
					fmt.Fprintf(stderr, "mirror %s: %s: %s\n", m.MirrorName, m.State, *m.ErrorMessage)
				}
				for _, t := range m.Topics {
					for _, p := range t.Partitions {
						fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", m.MirrorName, t.TopicName, p.PartitionIndex, p.SourceOffset, p.DestinationOffset, p.Lag, p.State)
					}
				}
			}
			return tw.Flush()
		default:
			fs.Usage()
			return fmt.Errorf("one of --create, --add, --remove, --pause, --resume, --delete, --list, --describe is required")
		}
		return nil
	}()
	if err != nil {
		fmt.Fprintln(stderr, "tandem mirrors:", err)
		return 1
	}
	return 0
}
