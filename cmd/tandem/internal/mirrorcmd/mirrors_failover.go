package mirrorcmd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// failover is --failover: a safe promote. The broker waits for lag 0
// against a fresh source end offset and stops the topics, or refuses;
// with --force it stops them anyway, and the table says what that gave
// up.
func (c *mirrorsCmd) failover(ctx context.Context) error {
	if err := need(flagReq{"--mirror", c.name != ""}); err != nil {
		return err
	}
	topics := c.topics
	if len(topics) == 0 {
		topics = cli.MultiFlag{".*"}
	}
	report, err := c.a.Failover(ctx, c.name, topics, admin.FailoverOptions{Force: c.force, Timeout: c.timeout, Consistent: c.consistent})
	if c.asJSON {
		return printFailoverJSON(c.stdout, report, err)
	}
	var now, before []mirrorproto.FailoverPartition
	for _, p := range report {
		if p.AlreadyStopped {
			before = append(before, p)
		} else {
			now = append(now, p)
		}
	}
	if len(now) > 0 {
		printFailover(c.stdout, now)
	}
	if err != nil {
		return refusal(c.stdout, err)
	}
	printFailedOverBefore(c.stdout, c.name, before)
	if len(now) == 0 {
		fmt.Fprintf(c.stdout, "Mirror %s: nothing left to fail over.\n", c.name)
		return nil
	}
	printCut(c.stdout, now)
	var lost, lostMs, learned int64
	unknown, stale := 0, 0
	for _, p := range now {
		switch {
		case p.Lag < 0:
			unknown++
		default:
			lost += p.Lag
			lostMs = max(lostMs, p.LagMs)
			if p.SourceStale {
				stale++
				if learned == 0 || p.SourceOffsetTime < learned {
					learned = p.SourceOffsetTime
				}
			}
		}
	}
	fmt.Fprintf(c.stdout, "Failed over mirror %s: %d partition(s) writable here.\n", c.name, len(now))
	switch {
	case unknown > 0:
		fmt.Fprintf(c.stdout, "The source's end offset was never learned for %d partition(s): what they gave up is unknown.\n", unknown)
	case stale > 0:
		// What the source acknowledged after it was last heard of is not
		// in the figure: it is a lower bound.
		ago := time.Since(time.UnixMilli(learned)).Truncate(100 * time.Millisecond)
		if lost == 0 {
			fmt.Fprintf(c.stdout, "Nothing the source was last known to have was given up, but its end offset was last learned %s ago and the source could not be asked since: records it acknowledged after that are not here.\n", ago)
			break
		}
		fmt.Fprintf(c.stdout, "This failover gave up at least %d record(s) (at least %d ms of data, in record time): the source's end offset was last learned %s ago, and the source could not be asked since.\n",
			lost, lostMs, ago)
	case lost > 0:
		fmt.Fprintf(c.stdout, "This failover gave up %d record(s) the source was last known to have (up to %d ms of data, in record time).\n", lost, lostMs)
	default:
		fmt.Fprintln(c.stdout, "Nothing the source was last known to have was given up.")
	}
	return nil
}

// printCut says where a consistent failover cut its partitions: the
// source time T they all end at, and what was moved beyond it into the
// divergence quarantine (<topic>.diverged, listed by --diverged).
func printCut(w io.Writer, report []mirrorproto.FailoverPartition) {
	var t, records, ms int64
	cut := 0
	for _, p := range report {
		if p.CutTime == 0 {
			continue
		}
		cut++
		t, records, ms = p.CutTime, records+p.CutRecords, max(ms, p.CutMs)
	}
	if cut == 0 {
		return
	}
	fmt.Fprintf(w, "Consistent cut at %s (source record time): %d partition(s) end there.\n", time.UnixMilli(t).UTC().Format(time.RFC3339Nano), cut)
	if records == 0 {
		fmt.Fprintln(w, "Nothing held here lay beyond the cut.")
		return
	}
	fmt.Fprintf(w, "Beyond the cut, %d record(s) (up to %d ms of data, in record time) were moved into the divergence quarantine (--diverged lists them):\n", records, ms)
	for _, p := range report {
		if p.CutRecords > 0 {
			fmt.Fprintf(w, "  %s-%d: %d record(s), %d ms\n", p.Topic, p.Partition, p.CutRecords, p.CutMs)
		}
	}
}

// failoverJSON is a partition of --failover --json: where the failover
// left it, with -1 (or null) for what is not known.
type failoverJSON struct {
	Topic             string     `json:"topic"`
	Partition         int32      `json:"partition"`
	SourceOffset      int64      `json:"source_offset"`
	SourceOffsetTime  *time.Time `json:"source_offset_time"`
	SourceStale       bool       `json:"source_stale"`
	DestinationOffset int64      `json:"destination_offset"`
	Lag               int64      `json:"lag"`
	LagMs             int64      `json:"lag_ms"`
	AlreadyStopped    bool       `json:"already_stopped"`
	CutTime           *time.Time `json:"cut_time"`
	CutRecords        int64      `json:"cut_records"`
	CutMs             int64      `json:"cut_ms"`
}

// printFailoverJSON prints --failover --json: {"partitions": [...],
// "error": "..."}, the report also when the failover failed (a refused
// safe failover reports the lag that refused it).
func printFailoverJSON(w io.Writer, report []mirrorproto.FailoverPartition, err error) error {
	out := struct {
		Partitions []failoverJSON `json:"partitions"`
		Error      *string        `json:"error"`
	}{Partitions: []failoverJSON{}}
	at := func(ms int64) *time.Time {
		if ms <= 0 {
			return nil
		}
		t := time.UnixMilli(ms).UTC()
		return &t
	}
	for _, p := range report {
		out.Partitions = append(out.Partitions, failoverJSON{Topic: p.Topic, Partition: p.Partition, SourceOffset: p.SourceOffset,
			SourceOffsetTime: at(p.SourceOffsetTime), SourceStale: p.SourceStale, DestinationOffset: p.DestinationOffset,
			Lag: p.Lag, LagMs: p.LagMs, AlreadyStopped: p.AlreadyStopped, CutTime: at(p.CutTime), CutRecords: p.CutRecords, CutMs: p.CutMs})
	}
	if err != nil {
		msg := err.Error()
		out.Error = &msg
	}
	if jerr := json.NewEncoder(w).Encode(out); jerr != nil {
		return jerr
	}
	return err
}

// printFailedOverBefore says which partitions had failed over before, and
// where their mirrored data ends: a failover repeated (by a script, after
// a timeout) answers what was done, not an error.
func printFailedOverBefore(w io.Writer, name string, before []mirrorproto.FailoverPartition) {
	byTopic := map[string][]string{}
	for _, p := range before {
		at := "an offset not recorded"
		if p.DestinationOffset >= 0 {
			at = fmt.Sprintf("offset %d", p.DestinationOffset)
		}
		byTopic[p.Topic] = append(byTopic[p.Topic], fmt.Sprintf("partition %d at %s", p.Partition, at))
	}
	for _, t := range slices.Sorted(maps.Keys(byTopic)) {
		fmt.Fprintf(w, "Topic %s of mirror %s was failed over already: its mirrored data ends at %s.\n", t, name, strings.Join(byTopic[t], ", "))
	}
}

// printFailover prints where a failover left each partition; a lag from a
// source end offset that was not current is a lower bound (">=").
func printFailover(w io.Writer, report []mirrorproto.FailoverPartition) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tSOURCE-OFFSET\tLEARNED\tDESTINATION-OFFSET\tLAG\tLAG-MS")
	opt := func(v int64, stale bool) string {
		switch {
		case v < 0:
			return "-"
		case stale:
			return fmt.Sprintf(">=%d", v)
		}
		return fmt.Sprint(v)
	}
	for _, p := range report {
		learned := "-"
		if p.SourceOffsetTime > 0 {
			learned = time.Since(time.UnixMilli(p.SourceOffsetTime)).Truncate(100*time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, opt(p.SourceOffset, false), learned, opt(p.DestinationOffset, false),
			opt(p.Lag, p.SourceStale), opt(p.LagMs, p.SourceStale))
	}
	tw.Flush()
}

// failback is --failback, run against the old primary: it reads mirror
// --mirror's topics from the new primary (--source-bootstrap, with the
// mirror's --config for its security), creates the reverse mirror here
// under the same name (unless it exists with a source of that cluster ID), shows what
// truncation will remove, and on confirmation adds the topics.
func (c *mirrorsCmd) failback(ctx context.Context) error {
	cfg, err := c.mirrorConfigs()
	if err != nil {
		return err
	}
	newID, err := clusterIDOf(ctx, cfg)
	if err != nil {
		return fmt.Errorf("the new primary %s: %w", c.source, err)
	}
	ms, err := c.a.DescribeMirrors(ctx, c.name)
	if err != nil {
		return err
	}
	exists := len(ms) == 1 && (ms[0].ErrorCode == 0 || ms[0].State != "") // it exists (its source may fail)
	if exists {
		if err := c.sameSource(ctx, ms[0], cfg, newID); err != nil {
			return err
		}
	}
	topics, err := c.failedOverTopics(ctx, cfg)
	if err != nil {
		return err
	}
	created := false
	if !exists {
		if err := c.a.CreateMirror(ctx, c.name, cfg); err != nil {
			return err
		}
		created = true
		fmt.Fprintf(c.stdout, "Created mirror %s from %s.\n", c.name, c.source)
	}
	var add []mirrorproto.AddTopic
	names := make([]string, 0, len(topics))
	for _, t := range topics {
		// The topic here is the one the new primary copied (its
		// source name there), whatever its name there.
		add = append(add, mirrorproto.AddTopic{TopicName: t.name, MirrorName: &c.name, DestinationName: t.here})
		names = append(names, t.name)
	}
	plan, err := c.a.AddTopics(ctx, add, true)
	if err == nil {
		err = c.confirmTruncation(plan, "--failback")
	}
	if err == nil {
		_, err = c.a.AddTopics(ctx, add, false)
	}
	if err != nil {
		if created { // leave nothing behind
			if derr := c.a.DeleteMirror(ctx, c.name); derr != nil {
				err = errors.Join(err, fmt.Errorf("deleting the mirror %s just created: %w", c.name, derr))
			}
		}
		return err
	}
	fmt.Fprintf(c.stdout, "Failing back: mirror %s here now copies %d topic(s) from %s: %v\n", c.name, len(topics), c.source, names)
	return nil
}

// sameSource checks that the mirror m that exists here copies from the
// cluster --source-bootstrap names (cluster ID newID): the cluster ID the
// mirror recorded, or else the one its configured bootstrap servers
// answer with, whatever addresses either is spelled with.
func (c *mirrorsCmd) sameSource(ctx context.Context, m mirrorproto.DescribedMirror, cfg map[string]string, newID string) error {
	described, err := c.a.DescribeMirrorConfigs(ctx, c.name)
	if err != nil {
		return err
	}
	configured := "?"
	if i := slices.IndexFunc(described, func(mc admin.MirrorConfig) bool { return mc.Name == "bootstrap.servers" }); i >= 0 && described[i].Value != nil {
		configured = *described[i].Value
	}
	id := m.SourceClusterID
	if id == "" { // never synced: ask its source
		asked := maps.Clone(cfg)
		asked["bootstrap.servers"] = configured
		if id, err = clusterIDOf(ctx, asked); err != nil {
			return fmt.Errorf("mirror %s exists here with source %s, which does not answer (%v) and whose cluster ID it never learned: cannot tell whether it is %s (cluster %s)",
				c.name, configured, err, c.source, newID)
		}
	}
	if id != newID {
		return fmt.Errorf("mirror %s exists here with source %s (cluster %s), not %s (cluster %s): delete it first, or fail back under another name",
			c.name, configured, id, c.source, newID)
	}
	return nil
}

// clusterIDOf asks the cluster of cfg's bootstrap.servers, with cfg's
// security, for its cluster ID.
func clusterIDOf(ctx context.Context, cfg map[string]string) (string, error) {
	opts, err := mirrorcfg.ClientOpts(cfg)
	if err != nil {
		return "", err
	}
	cl, err := kgo.NewClient(append(opts, kgo.DialTimeout(5*time.Second))...)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", err
	}
	if resp.ClusterID == nil {
		return "", fmt.Errorf("it answers with no cluster ID")
	}
	return *resp.ClusterID, nil
}

// failedTopic is a topic of the new primary that failed over: its name
// there, and the name here of the topic it copied when that differs
// ("" when the same: mirrors without mirror.topic.prefix).
type failedTopic struct{ name, here string }

// failedOverTopics reads, on the new primary, the topics of mirror
// c.name that failed over (STOPPED): those this cluster must now mirror
// back. A topic still mirroring there has not failed over.
func (c *mirrorsCmd) failedOverTopics(ctx context.Context, cfg map[string]string) ([]failedTopic, error) {
	opts, err := mirrorcfg.ClientOpts(cfg)
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
	match, err := c.topicFilter()
	if err != nil {
		return nil, err
	}
	states, here := map[string][]string{}, map[string]string{}
	for _, t := range ms[0].Topics {
		if !match(t.TopicName) {
			continue
		}
		states[t.TopicName] = []string{}
		here[t.TopicName] = t.SourceTopicName
		for _, p := range t.Partitions {
			if !slices.Contains(states[t.TopicName], p.State) {
				states[t.TopicName] = append(states[t.TopicName], p.State)
			}
		}
	}
	// What was failed over comes back: a topic still mirrored from here
	// stays as it is (named with --topic, it is an error).
	var out []failedTopic
	var mirrored []string
	for _, t := range slices.Sorted(maps.Keys(states)) {
		if slices.Equal(states[t], []string{"STOPPED"}) {
			out = append(out, failedTopic{t, here[t]})
		} else {
			mirrored = append(mirrored, fmt.Sprintf("%s (%s)", t, strings.Join(states[t], ", ")))
		}
	}
	switch {
	case len(states) == 0 && len(c.topics) > 0:
		return nil, fmt.Errorf("no topic of mirror %s on the new primary %s matches --topic %s", c.name, c.source, strings.Join(c.topics, ", --topic "))
	case len(states) == 0:
		return nil, fmt.Errorf("mirror %s on the new primary %s has no topic", c.name, c.source)
	case len(mirrored) > 0 && (len(c.topics) > 0 || len(out) == 0):
		return nil, fmt.Errorf("mirror %s on the new primary %s has not failed over %s: fail it over there first (--failover)", c.name, c.source, strings.Join(mirrored, ", "))
	case len(mirrored) > 0:
		fmt.Fprintf(c.stdout, "Not failed over on %s, so still mirrored from here: %s.\n", c.source, strings.Join(mirrored, ", "))
	}
	return out, nil
}

// refusalRE splits a safe failover's refusal: what it refused, then per
// reason the partitions it holds for ("a-0, a-1: reason; b-0: lag 3"),
// then the --force hint and the error code.
var refusalRE = regexp.MustCompile(`^(.*?(?:nothing would be lost|still behind the source after [^:]+)): (.*) (\(--force fails over anyway\))`)

// refusal prints the partitions a safe failover refused for, one reason
// a line, and returns the refusal itself in one short line: with many
// partitions the broker's message is hundreds of characters.
func refusal(w io.Writer, err error) error {
	var ae *admin.Error
	if !errors.As(err, &ae) {
		return err
	}
	m := refusalRE.FindStringSubmatch(ae.Message)
	if m == nil {
		return err
	}
	fmt.Fprintln(w, "Not failed over; the partitions, by reason:")
	for _, item := range strings.Split(m[2], "; ") {
		ids, reason, ok := strings.Cut(item, ": ")
		if !ok {
			fmt.Fprintf(w, "  %s\n", item)
			continue
		}
		parts := strings.Split(ids, ", ")
		if len(parts) > 8 {
			ids = fmt.Sprintf("%s and %d more", strings.Join(parts[:8], ", "), len(parts)-8)
		}
		fmt.Fprintf(w, "  %s: %s\n", ids, reason)
	}
	return fmt.Errorf("%s, for the partitions above %s [%s]", m[1], m[3], ae.Code.Message)
}

// divergedRange is a manifest entry as --diverged and --describe --json
// print it.
type divergedRange struct {
	Topic          string    `json:"topic"`
	SourceTopic    string    `json:"source_topic,omitzero"` // the mirror topic's name on the source, when not topic
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

func divergedOf(d mirrorproto.DivergedRange) divergedRange {
	ms := func(v int64) time.Time { return time.UnixMilli(v).UTC() }
	return divergedRange{Topic: d.Topic, SourceTopic: d.SourceTopic, Partition: d.Partition, FirstOffset: d.FirstOffset, LastOffset: d.LastOffset,
		FirstEpoch: d.FirstEpoch, LastEpoch: d.LastEpoch, Records: d.Records, FirstTimestamp: ms(d.FirstTimestamp),
		LastTimestamp: ms(d.LastTimestamp), TruncatedAt: ms(d.TruncatedAt), Cause: d.Cause,
		CopiedTo: fmt.Sprintf("%s.diverged/%d", d.Topic, d.Partition), CopyStart: d.CopyStart, CopyEnd: d.CopyEnd}
}

// diverged is --diverged: the mirror's divergence manifest.
func (c *mirrorsCmd) diverged(ctx context.Context) error {
	if err := need(flagReq{"--mirror", c.name != ""}); err != nil {
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
	sortDiverged(ds)
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
	return printDiverged(c.stdout, ds)
}

// sortDiverged puts ranges in the order of the log: by topic, partition
// and offset (brokers answer their own partitions' ranges in turn).
func sortDiverged(ds []divergedRange) {
	slices.SortStableFunc(ds, func(a, b divergedRange) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.FirstOffset, b.FirstOffset))
	})
}

// printDiverged prints the divergence manifest as a table; offset ranges
// are inclusive, COPIED-TO's as OFFSETS' (copy_end in JSON is the offset
// after the copy, as a log end is).
func printDiverged(w io.Writer, ds []divergedRange) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tOFFSETS\tEPOCHS\tRECORDS\tTIMESTAMPS\tTRUNCATED\tCAUSE\tCOPIED-TO")
	for _, d := range ds {
		topic := d.Topic
		if d.SourceTopic != "" {
			topic += " (source " + d.SourceTopic + ")"
		}
		copied := fmt.Sprintf("%s@%d-%d", d.CopiedTo, d.CopyStart, d.CopyEnd-1)
		switch {
		case d.CopyEnd < 0:
			copied = d.CopiedTo + " (copying)"
		case d.CopyEnd <= d.CopyStart:
			copied = d.CopiedTo + " (nothing)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d-%d\t%d-%d\t%d\t%s - %s\t%s\t%s\t%s\n", topic, d.Partition, d.FirstOffset, d.LastOffset,
			d.FirstEpoch, d.LastEpoch, d.Records, d.FirstTimestamp.Format(time.RFC3339), d.LastTimestamp.Format(time.RFC3339),
			d.TruncatedAt.Format(time.RFC3339), d.Cause, copied)
	}
	return tw.Flush()
}
