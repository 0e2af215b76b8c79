package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/tandem-kafka/tandem/cmd/tandem/internal/mirrorcmd"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const topicsDoc = `Lists, creates, describes and deletes topics, adds partitions and alters
their configs, on any Kafka-compatible cluster (kafka-topics.sh and
kafka-configs.sh --entity-type topics in one command).

Usage: tandem topics <command> [TOPIC...] [flags]
`

func topics(args []string, stdout, stderr io.Writer) int {
	return cli.RunVerbs("topics", topicsDoc, []cli.Verb{
		{Name: "list", Summary: "list topics with their partitions, replication factor and mirror", Run: topicsList},
		{Name: "create", Summary: "create topics (--partitions, --replication-factor, --config k=v)", Run: topicsCreate},
		{Name: "describe", Summary: "partitions (leader, replicas, ISR, offsets), configs and mirror state", Run: topicsDescribe},
		{Name: "delete", Summary: "delete topics", Run: topicsDelete},
		{Name: "add-partitions", Summary: "raise a topic's partition count to --partitions N", Run: topicsAddPartitions},
		{Name: "alter-config", Summary: "set (--config k=v) or remove (--delete-config k) topic configs", Run: topicsAlterConfig},
	}, args, stdout, stderr)
}

// adminTimeout bounds a command that asks a cluster something.
const adminTimeout = time.Minute

// needTopics is the check of a verb that takes topic names.
func needTopics(c *cli.AdminCmd) func() error {
	return func() error {
		if c.NArg() == 0 {
			return cli.UsageErrorf("name the topic(s): tandem %s TOPIC...", c.Name())
		}
		return nil
	}
}

// topicFailures joins the errors of several topics into one line,
// "topic a: ...; topic b: ...", nil for none.
func topicFailures(errs map[string]error) error {
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(errs)) {
		if errs[t] != nil {
			parts = append(parts, fmt.Sprintf("topic %s: %v", t, errs[t]))
		}
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New(strings.Join(parts, "; "))
}

// listedTopic is a topic as `topics list --json` prints it.
type listedTopic struct {
	Topic             string  `json:"topic"`
	TopicID           string  `json:"topic_id"`
	Internal          bool    `json:"internal"`
	Partitions        int     `json:"partitions"`
	ReplicationFactor int     `json:"replication_factor"`
	Mirror            *string `json:"mirror"` // mirror.name: the mirror that writes it; null for an ordinary topic
}

const topicsListDoc = `Lists the topics: partitions, replication factor, and, for a mirror
topic, the mirror that copies it (its mirror.name config).

Usage: tandem topics list [--internal] [--json]
`

func topicsList(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("topics list", topicsListDoc, true)
	internal := c.Bool("internal", false, "include internal topics (__consumer_offsets, ...)")
	return c.Run(args, stdout, stderr, adminTimeout, nil, func(ctx context.Context, _ *kgo.Client, adm *kadm.Client) error {
		list := adm.ListTopics
		if *internal {
			list = adm.ListTopicsWithInternal
		}
		details, err := list(ctx)
		if err != nil {
			return fmt.Errorf("listing topics: %w", err)
		}
		if err := details.Error(); err != nil {
			return fmt.Errorf("listing topics: %w", err)
		}
		mirrors := mirrorNames(ctx, adm, details.Names())
		out := []listedTopic{}
		for _, d := range details.Sorted() {
			out = append(out, listedTopic{Topic: d.Topic, TopicID: topicID(d.ID), Internal: d.IsInternal,
				Partitions: len(d.Partitions), ReplicationFactor: replicationFactor(d), Mirror: mirrors[d.Topic]})
		}
		if c.AsJSON {
			return cli.PrintJSON(stdout, out)
		}
		t := cli.NewTable(stdout, "TOPIC", "PARTITIONS", "REPLICATION-FACTOR", "MIRROR")
		for _, l := range out {
			t.Row(l.Topic, l.Partitions, l.ReplicationFactor, strOrDash(l.Mirror))
		}
		return t.Flush()
	})
}

func strOrDash(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// replicationFactor is the replica count of the topic's first partition,
// as kafka-topics.sh reports it.
func replicationFactor(d kadm.TopicDetail) int {
	if p, ok := d.Partitions[0]; ok {
		return len(p.Replicas)
	}
	for _, p := range d.Partitions {
		return len(p.Replicas)
	}
	return 0
}

// mirrorNames reads the mirror.name config of topics: the mirror of each
// mirror topic. A cluster without mirroring has no such config; one that
// cannot say leaves the topic out.
func mirrorNames(ctx context.Context, adm *kadm.Client, topics []string) map[string]*string {
	out := map[string]*string{}
	if len(topics) == 0 {
		return out
	}
	rcs, _ := adm.DescribeTopicConfigs(ctx, topics...)
	for _, rc := range rcs {
		for _, cf := range rc.Configs {
			if cf.Key == "mirror.name" && cf.Value != nil && *cf.Value != "" {
				out[rc.Name] = cf.Value
			}
		}
	}
	return out
}

const topicsCreateDoc = `Creates topics.

Usage: tandem topics create TOPIC... [--partitions N] [--replication-factor N] [--config k=v ...]

The cluster's num.partitions and default.replication.factor apply when
the flags are not given. Each topic is created or refused on its own: the
exit status is 1 if any was refused.
`

func topicsCreate(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("topics create", topicsCreateDoc, false)
	partitions := c.Int("partitions", -1, "number of partitions (-1: the cluster's num.partitions)")
	rf := c.Int("replication-factor", -1, "replicas of each partition (-1: the cluster's default.replication.factor)")
	var configs cli.MultiFlag
	c.Var(&configs, "config", "topic config `k=v` (repeatable), e.g. retention.ms=3600000")
	var cfg map[string]string
	check := func() error {
		if err := needTopics(c)(); err != nil {
			return err
		}
		if *partitions == 0 || *partitions < -1 || *partitions > 1<<31-1 {
			return cli.UsageErrorf("--partitions %d: want a positive count, or -1 for the cluster's default", *partitions)
		}
		if *rf == 0 || *rf < -1 || *rf > 1<<15-1 {
			return cli.UsageErrorf("--replication-factor %d: want a positive count, or -1 for the cluster's default", *rf)
		}
		var err error
		cfg, err = cli.KeyValues(configs)
		return err
	}
	return c.Run(args, stdout, stderr, adminTimeout, check, func(ctx context.Context, _ *kgo.Client, adm *kadm.Client) error {
		ptrs := map[string]*string{}
		for k, v := range cfg {
			ptrs[k] = &v
		}
		resps, err := adm.CreateTopics(ctx, int32(*partitions), int16(*rf), ptrs, c.Args()...)
		if err != nil {
			return fmt.Errorf("creating topics: %w", err)
		}
		errs := map[string]error{}
		for _, t := range c.Args() {
			r, ok := resps[t]
			switch {
			case !ok:
				errs[t] = errors.New("no answer for it")
			case r.Err != nil:
				errs[t] = cli.KafkaError(r.Err, r.ErrMessage)
			default:
				fmt.Fprintf(stdout, "Created topic %s: %d partition(s), replication factor %d, ID %s.\n", t, r.NumPartitions, r.ReplicationFactor, topicID(r.ID))
			}
		}
		return topicFailures(errs)
	})
}

// describedTopic is a topic as `topics describe --json` prints it.
type describedTopic struct {
	Topic             string               `json:"topic"`
	TopicID           string               `json:"topic_id"`
	Internal          bool                 `json:"internal"`
	ReplicationFactor int                  `json:"replication_factor"`
	Mirror            *string              `json:"mirror"`  // null for an ordinary topic
	Configs           map[string]*string   `json:"configs"` // set on the topic (not defaults); a secret is null
	Partitions        []describedTopicPart `json:"partitions"`
}

type describedTopicPart struct {
	Partition       int32   `json:"partition"`
	Leader          int32   `json:"leader"` // -1: none (offline)
	LeaderEpoch     int32   `json:"leader_epoch"`
	Replicas        []int32 `json:"replicas"`
	ISR             []int32 `json:"isr"`
	OfflineReplicas []int32 `json:"offline_replicas"`
	LogStartOffset  *int64  `json:"log_start_offset"` // null: not known (no leader answered)
	LogEndOffset    *int64  `json:"log_end_offset"`
	MirrorState     *string `json:"mirror_state"` // a mirror topic's partition state (MIRRORING, STOPPED, ...); null otherwise or unknown
	Error           string  `json:"error,omitzero"`
}

const topicsDescribeDoc = `Describes topics (every topic when none is named): per partition the
leader, replicas, in-sync replicas, offline replicas and the log start and
end offsets; the configs set on the topic; and for a mirror topic its
mirror (mirror.name) and each partition's mirror state.

Usage: tandem topics describe [TOPIC...] [--internal] [--json]

An offset no broker could give is "-" (null in JSON), never 0.
`

func topicsDescribe(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("topics describe", topicsDescribeDoc, true)
	internal := c.Bool("internal", false, "with no TOPIC: include internal topics")
	check := func() error { return nil }
	return c.Run(args, stdout, stderr, adminTimeout, check, func(ctx context.Context, cl *kgo.Client, adm *kadm.Client) error {
		out, err := describeTopics(ctx, cl, adm, c.Args(), *internal)
		if err != nil {
			return err
		}
		if c.AsJSON {
			if err := cli.PrintJSON(stdout, out); err != nil {
				return err
			}
		} else {
			printTopics(stdout, out)
		}
		var failed []string
		for _, t := range out {
			for _, p := range t.Partitions {
				if p.Error != "" {
					failed = append(failed, fmt.Sprintf("%s/%d: %s", t.Topic, p.Partition, p.Error))
				}
			}
		}
		if len(failed) > 0 {
			return fmt.Errorf("partitions the cluster could not describe: %s", strings.Join(failed, "; "))
		}
		return nil
	}, mirrorcmd.ClientOpts()...)
}

func describeTopics(ctx context.Context, cl *kgo.Client, adm *kadm.Client, names []string, internal bool) ([]describedTopic, error) {
	var details kadm.TopicDetails
	var err error
	switch {
	case len(names) > 0:
		details, err = adm.ListTopicsWithInternal(ctx, names...)
	case internal:
		details, err = adm.ListTopicsWithInternal(ctx)
	default:
		details, err = adm.ListTopics(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the metadata: %w", err)
	}
	errs := map[string]error{}
	for _, t := range names {
		if d, ok := details[t]; !ok {
			errs[t] = errors.New("not in the metadata")
		} else if d.Err != nil {
			errs[t] = d.Err
		}
	}
	if err := topicFailures(errs); err != nil {
		return nil, err
	}
	topics := details.Names()
	starts, _ := adm.ListStartOffsets(ctx, topics...)
	ends, _ := adm.ListEndOffsets(ctx, topics...)
	configs := map[string]map[string]*string{}
	if len(topics) > 0 {
		rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
		if err != nil {
			return nil, fmt.Errorf("reading the topic configs: %w", err)
		}
		for _, rc := range rcs {
			set := map[string]*string{}
			for _, cf := range rc.Configs {
				if cf.Source == 0 || cf.Source == 1 { // UNKNOWN or DYNAMIC_TOPIC_CONFIG: set on the topic
					set[cf.Key] = cf.Value
					if cf.Sensitive {
						set[cf.Key] = nil
					}
				}
			}
			configs[rc.Name] = set
		}
	}
	out := []describedTopic{}
	for _, d := range details.Sorted() {
		dt := describedTopic{Topic: d.Topic, TopicID: topicID(d.ID), Internal: d.IsInternal, ReplicationFactor: replicationFactor(d),
			Configs: configs[d.Topic], Partitions: []describedTopicPart{}}
		if dt.Configs == nil {
			dt.Configs = map[string]*string{}
		}
		if m := dt.Configs["mirror.name"]; m != nil && *m != "" {
			dt.Mirror = m
		}
		var states map[int32]string
		if dt.Mirror != nil {
			states = mirrorcmd.PartitionStates(ctx, cl, *dt.Mirror, d.Topic)
		}
		for _, p := range d.Partitions.Sorted() {
			dp := describedTopicPart{Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
				Replicas: nonNil(p.Replicas), ISR: nonNil(p.ISR), OfflineReplicas: nonNil(p.OfflineReplicas)}
			if p.Err != nil {
				dp.Error = p.Err.Error()
			}
			if o, ok := starts.Lookup(d.Topic, p.Partition); ok && o.Err == nil && o.Offset >= 0 {
				dp.LogStartOffset = &o.Offset
			}
			if o, ok := ends.Lookup(d.Topic, p.Partition); ok && o.Err == nil && o.Offset >= 0 {
				dp.LogEndOffset = &o.Offset
			}
			if s, ok := states[p.Partition]; ok {
				dp.MirrorState = &s
			}
			dt.Partitions = append(dt.Partitions, dp)
		}
		out = append(out, dt)
	}
	return out, nil
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

func printTopics(w io.Writer, ts []describedTopic) {
	for i, t := range ts {
		if i > 0 {
			fmt.Fprintln(w)
		}
		line := fmt.Sprintf("Topic: %s  ID: %s  Partitions: %d  ReplicationFactor: %d", t.Topic, t.TopicID, len(t.Partitions), t.ReplicationFactor)
		if t.Internal {
			line += "  Internal"
		}
		if t.Mirror != nil {
			line += "  Mirror: " + *t.Mirror + " (read-only here)"
		}
		fmt.Fprintln(w, line)
		var cfgs []string
		for _, k := range slices.Sorted(maps.Keys(t.Configs)) {
			cfgs = append(cfgs, k+"="+cli.CmpOr(strOrDash(t.Configs[k]), `""`))
		}
		if len(cfgs) > 0 {
			fmt.Fprintf(w, "Configs: %s\n", strings.Join(cfgs, ","))
		}
		header := []string{"PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "OFFLINE", "LOG-START", "LOG-END"}
		if t.Mirror != nil {
			header = append(header, "MIRROR-STATE")
		}
		tb := cli.NewTable(w, header...)
		for _, p := range t.Partitions {
			leader := fmt.Sprint(p.Leader)
			if p.Leader < 0 {
				leader = "none"
			}
			cells := []any{p.Partition, leader, p.LeaderEpoch, ids(p.Replicas), ids(p.ISR), ids(p.OfflineReplicas), cli.OrDash(p.LogStartOffset), cli.OrDash(p.LogEndOffset)}
			if t.Mirror != nil {
				cells = append(cells, strOrDash(p.MirrorState))
			}
			tb.Row(cells...)
		}
		tb.Flush()
	}
}

// ids prints broker IDs as kafka-topics.sh does: "1,2,3", "-" for none.
func ids(s []int32) string {
	if len(s) == 0 {
		return "-"
	}
	parts := make([]string, len(s))
	for i, id := range s {
		parts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(parts, ",")
}

const topicsDeleteDoc = `Deletes topics and their records.

Usage: tandem topics delete TOPIC...

A mirror topic is refused (POLICY_VIOLATION: read-only) while its mirror copies it:
fail it over first (tandem mirrors --failover).
`

func topicsDelete(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("topics delete", topicsDeleteDoc, false)
	return c.Run(args, stdout, stderr, adminTimeout, needTopics(c), func(ctx context.Context, _ *kgo.Client, adm *kadm.Client) error {
		resps, err := adm.DeleteTopics(ctx, c.Args()...)
		if err != nil {
			return fmt.Errorf("deleting topics: %w", err)
		}
		errs := map[string]error{}
		for _, t := range c.Args() {
			r, ok := resps[t]
			switch {
			case !ok:
				errs[t] = errors.New("no answer for it")
			case r.Err != nil:
				errs[t] = cli.KafkaError(r.Err, r.ErrMessage)
			default:
				fmt.Fprintf(stdout, "Deleted topic %s.\n", t)
			}
		}
		return topicFailures(errs)
	})
}

const topicsAddPartitionsDoc = `Raises the partition count of topics to --partitions N (the count after,
as kafka-topics.sh --alter --partitions takes it). Partitions cannot be
removed; keys map to other partitions afterwards.

Usage: tandem topics add-partitions TOPIC... --partitions N
`

func topicsAddPartitions(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("topics add-partitions", topicsAddPartitionsDoc, false)
	total := c.Int("partitions", 0, "the partition count after (required)")
	check := func() error {
		if err := needTopics(c)(); err != nil {
			return err
		}
		if *total <= 0 || *total > 1<<31-1 {
			return cli.UsageErrorf("--partitions N is required: the partition count after, above the current one")
		}
		return nil
	}
	return c.Run(args, stdout, stderr, adminTimeout, check, func(ctx context.Context, _ *kgo.Client, adm *kadm.Client) error {
		before, err := adm.ListTopics(ctx, c.Args()...)
		if err != nil {
			return fmt.Errorf("reading the metadata: %w", err)
		}
		resps, err := adm.UpdatePartitions(ctx, *total, c.Args()...)
		if err != nil {
			return fmt.Errorf("adding partitions: %w", err)
		}
		errs := map[string]error{}
		for _, t := range c.Args() {
			r, ok := resps[t]
			switch {
			case !ok:
				errs[t] = errors.New("no answer for it")
			case r.Err != nil:
				errs[t] = cli.KafkaError(r.Err, r.ErrMessage)
			default:
				fmt.Fprintf(stdout, "Topic %s: %d → %d partitions.\n", t, len(before[t].Partitions), *total)
			}
		}
		return topicFailures(errs)
	})
}

const topicsAlterConfigDoc = `Sets and removes configs of topics (IncrementalAlterConfigs, as
kafka-configs.sh --alter --entity-type topics): --config k=v sets k,
--delete-config k returns it to the cluster's default.

Usage: tandem topics alter-config TOPIC... [--config k=v ...] [--delete-config k ...]
`

func topicsAlterConfig(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("topics alter-config", topicsAlterConfigDoc, false)
	var sets, deletes cli.MultiFlag
	c.Var(&sets, "config", "set topic config `k=v` (repeatable)")
	c.Var(&deletes, "delete-config", "remove topic config `k` (repeatable)")
	var alters []kadm.AlterConfig
	check := func() error {
		if err := needTopics(c)(); err != nil {
			return err
		}
		if len(sets)+len(deletes) == 0 {
			return cli.UsageErrorf("nothing to alter: give --config k=v or --delete-config k")
		}
		kv, err := cli.KeyValues(sets)
		if err != nil {
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(kv)) {
			v := kv[k]
			alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &v})
		}
		for _, k := range deletes {
			if _, both := kv[k]; both {
				return cli.UsageErrorf("--config and --delete-config both name %s", k)
			}
			alters = append(alters, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
		}
		return nil
	}
	return c.Run(args, stdout, stderr, adminTimeout, check, func(ctx context.Context, _ *kgo.Client, adm *kadm.Client) error {
		resps, err := adm.AlterTopicConfigs(ctx, alters, c.Args()...)
		if err != nil {
			return fmt.Errorf("altering topic configs: %w", err)
		}
		errs := map[string]error{}
		for _, t := range c.Args() {
			i := slices.IndexFunc(resps, func(r kadm.AlterConfigsResponse) bool { return r.Name == t })
			switch {
			case i < 0:
				errs[t] = errors.New("no answer for it")
			case resps[i].Err != nil:
				errs[t] = cli.KafkaError(resps[i].Err, resps[i].ErrMessage)
			default:
				fmt.Fprintf(stdout, "Altered the configs of topic %s.\n", t)
			}
		}
		return topicFailures(errs)
	})
}

// topicID is a topic ID as Kafka's tools print it: URL-safe base64
// without padding (kafka-topics.sh, and Tandem's cluster IDs), not the
// standard alphabet kadm's String uses.
func topicID(id kadm.TopicID) string { return base64.RawURLEncoding.EncodeToString(id[:]) }
