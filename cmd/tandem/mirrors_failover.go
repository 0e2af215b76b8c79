//go:build !tandem_omit_mirror

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/plugins/mirror"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
)

// failover is --failover: a safe promote. The broker waits for lag 0
// against a fresh source end offset and stops the topics, or refuses;
// with --force it stops them anyway, and the table says what that gave
// up.
func (c *mirrorsCmd) failover(ctx context.Context) error {
	if err := need("--mirror", c.name != ""); err != nil {
		return err
	}
	topics := c.topics
	if len(topics) == 0 {
		topics = multiFlag{".*"}
	}
	report, err := c.a.Failover(ctx, c.name, topics, admin.FailoverOptions{Force: c.force, Timeout: c.timeout})
	if len(report) > 0 {
		printFailover(c.stdout, report)
	}
	if err != nil {
		return err
	}
	var lost, lostMs int64
	unknown := 0
	for _, p := range report {
		switch {
		case p.Lag < 0:
			unknown++
		default:
			lost += p.Lag
			lostMs = max(lostMs, p.LagMs)
		}
	}
	fmt.Fprintf(c.stdout, "Failed over mirror %s: %d partition(s) writable here.\n", c.name, len(report))
	switch {
	case unknown > 0:
		fmt.Fprintf(c.stdout, "The source's end offset was never learned for %d partition(s): what they gave up is unknown.\n", unknown)
	case lost > 0:
		fmt.Fprintf(c.stdout, "This failover gave up %d record(s) the source was last known to have (up to %d ms of data, in record time).\n", lost, lostMs)
	default:
		fmt.Fprintln(c.stdout, "Nothing the source was last known to have was given up.")
	}
	return nil
}

// printFailover prints where a failover left each partition.
func printFailover(w io.Writer, report []mirror.FailoverPartition) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tSOURCE-OFFSET\tLEARNED\tDESTINATION-OFFSET\tLAG\tLAG-MS")
	opt := func(v int64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprint(v)
	}
	for _, p := range report {
		learned := "-"
		if p.SourceOffsetTime > 0 {
			learned = time.Since(time.UnixMilli(p.SourceOffsetTime)).Truncate(100*time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, opt(p.SourceOffset), learned, opt(p.DestinationOffset), opt(p.Lag), opt(p.LagMs))
	}
	tw.Flush()
}

// failback is --failback, run against the old primary: it reads mirror
// --mirror's topics from the new primary (--source-bootstrap, with the
// mirror's --config for its security), creates the reverse mirror here
// under the same name (unless it exists, with that source), shows what
// truncation will remove, and on confirmation adds the topics.
func (c *mirrorsCmd) failback(ctx context.Context) error {
	cfg, err := c.mirrorConfigs()
	if err != nil {
		return err
	}
	topics, err := c.failedOverTopics(ctx, cfg)
	if err != nil {
		return err
	}
	created := false
	ms, err := c.a.DescribeMirrors(ctx, c.name)
	switch {
	case err != nil:
		return err
	case len(ms) == 1 && (ms[0].ErrorCode == 0 || ms[0].State != ""): // it exists (its source may fail)
		described, err := c.a.DescribeMirrorConfigs(ctx, c.name)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(described, func(mc admin.MirrorConfig) bool { return mc.Name == "bootstrap.servers" })
		if i < 0 || described[i].Value == nil || *described[i].Value != c.source {
			return fmt.Errorf("mirror %s already exists here with another source: delete it first, or fail back under another name", c.name)
		}
	default:
		if err := c.a.CreateMirror(ctx, c.name, cfg); err != nil {
			return err
		}
		created = true
		fmt.Fprintf(c.stdout, "Created mirror %s from %s.\n", c.name, c.source)
	}
	m := map[string]string{}
	for _, t := range topics {
		m[t] = c.name
	}
	plan, err := c.a.PlanAddTopics(ctx, m)
	if err == nil {
		err = c.confirmTruncation(plan, "--failback")
	}
	if err == nil {
		err = c.a.AddTopicsToMirror(ctx, m)
	}
	if err != nil {
		if created { // leave nothing behind
			if derr := c.a.DeleteMirror(ctx, c.name); derr != nil {
				err = errors.Join(err, fmt.Errorf("deleting the mirror %s just created: %w", c.name, derr))
			}
		}
		return err
	}
	fmt.Fprintf(c.stdout, "Failing back: mirror %s here now copies %d topic(s) from %s: %v\n", c.name, len(topics), c.source, topics)
	return nil
}

// failedOverTopics reads, on the new primary, the topics of mirror
// c.name that failed over (STOPPED): those this cluster must now mirror
// back. A topic still mirroring there has not failed over.
func (c *mirrorsCmd) failedOverTopics(ctx context.Context, cfg map[string]string) ([]string, error) {
	opts, err := mirror.ClientOpts(cfg)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, admin.Opt(), kgo.RetryTimeout(30*time.Second))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ms, err := admin.New(cl).DescribeMirrors(ctx, c.name)
	if err != nil {
		return nil, fmt.Errorf("the new primary %s: %w", c.source, err)
	}
	if len(ms) != 1 || ms[0].ErrorCode != 0 && ms[0].State == "" {
		if len(ms) == 1 {
			return nil, fmt.Errorf("the new primary %s: %w", c.source, admin.ErrorOf(ms[0].ErrorCode, ms[0].ErrorMessage))
		}
		return nil, fmt.Errorf("the new primary %s has no mirror %s", c.source, c.name)
	}
	states := map[string][]string{}
	for _, t := range ms[0].Topics {
		for _, p := range t.Partitions {
			if !slices.Contains(states[t.TopicName], p.State) {
				states[t.TopicName] = append(states[t.TopicName], p.State)
			}
		}
	}
	var out []string
	for _, t := range slices.Sorted(maps.Keys(states)) {
		if !slices.Equal(states[t], []string{"STOPPED"}) {
			return nil, fmt.Errorf("topic %s of mirror %s is %v on the new primary %s, not failed over: fail it over there first (--failover)", t, c.name, states[t], c.source)
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("mirror %s on the new primary %s has no topic", c.name, c.source)
	}
	return out, nil
}

// divergedRange is a manifest entry as --diverged and --describe --json
// print it.
type divergedRange struct {
	Topic          string    `json:"topic"`
	Partition      int32     `json:"partition"`
	FirstOffset    int64     `json:"first_offset"`
	LastOffset     int64     `json:"last_offset"`
	FirstEpoch     int32     `json:"first_epoch"`
	LastEpoch      int32     `json:"last_epoch"`
	Records        int64     `json:"records"`
	FirstTimestamp time.Time `json:"first_timestamp"`
	LastTimestamp  time.Time `json:"last_timestamp"`
	TruncatedAt    time.Time `json:"truncated_at"`
	Cause          string    `json:"cause"`
	CopiedTo       string    `json:"copied_to"`
	CopyStart      int64     `json:"copy_start"`
	CopyEnd        int64     `json:"copy_end"`
}

func divergedOf(d mirror.DivergedRange) divergedRange {
	ms := func(v int64) time.Time { return time.UnixMilli(v).UTC() }
	return divergedRange{Topic: d.Topic, Partition: d.Partition, FirstOffset: d.FirstOffset, LastOffset: d.LastOffset,
		FirstEpoch: d.FirstEpoch, LastEpoch: d.LastEpoch, Records: d.Records, FirstTimestamp: ms(d.FirstTimestamp),
		LastTimestamp: ms(d.LastTimestamp), TruncatedAt: ms(d.TruncatedAt), Cause: d.Cause,
		CopiedTo: fmt.Sprintf("%s.diverged/%d", d.Topic, d.Partition), CopyStart: d.CopyStart, CopyEnd: d.CopyEnd}
}

// diverged is --diverged: the mirror's divergence manifest.
func (c *mirrorsCmd) diverged(ctx context.Context) error {
	if err := need("--mirror", c.name != ""); err != nil {
		return err
	}
	ms, err := c.described(ctx)
	if err != nil {
		return err
	}
	var ds []divergedRange
	for _, m := range ms {
		ds = append(ds, m.Diverged...)
	}
	if c.asJSON {
		if ds == nil {
			ds = []divergedRange{}
		}
		return json.NewEncoder(c.stdout).Encode(ds)
	}
	if len(ds) == 0 {
		fmt.Fprintf(c.stdout, "Mirror %s has truncated nothing.\n", c.name)
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tOFFSETS\tEPOCHS\tRECORDS\tTIMESTAMPS\tTRUNCATED\tCAUSE\tCOPIED-TO")
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\t%d\t%d-%d\t%d-%d\t%d\t%s - %s\t%s\t%s\t%s@%d-%d\n", d.Topic, d.Partition, d.FirstOffset, d.LastOffset,
			d.FirstEpoch, d.LastEpoch, d.Records, d.FirstTimestamp.Format(time.RFC3339), d.LastTimestamp.Format(time.RFC3339),
			d.TruncatedAt.Format(time.RFC3339), d.Cause, d.CopiedTo, d.CopyStart, d.CopyEnd)
	}
	return tw.Flush()
}
