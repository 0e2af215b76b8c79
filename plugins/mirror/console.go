package mirror

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

var (
	_ plugin.MirrorDescriber = (*Plugin)(nil)
	_ plugin.HealthReporter  = (*Plugin)(nil)
)

// Health implements plugin.HealthReporter: a line for each mirror with
// topics still mirrored whose source this broker cannot use (unreachable,
// refusing the mirror's credentials, another cluster), with how long ago
// it last answered. It reads this broker's runs only, which learn of the
// source at least every mirror.metadata.refresh.interval.ms (sooner on
// the brokers that copy a partition).
func (p *Plugin) Health() []string {
	img := p.Image()
	if img == nil {
		return nil
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(img.Mirrors)) {
		m := img.Mirrors[name]
		if !slices.ContainsFunc(slices.Collect(maps.Values(m.Topics)), func(mt metadata.MirrorTopic) bool { return !mt.Stopped }) {
			continue // failed over: its source does not matter any more
		}
		why, contact := "", time.Time{}
		if r := p.run(name); r != nil {
			r.mu.Lock()
			why, contact = r.failed, r.contact
			r.mu.Unlock()
		}
		if halt, _ := p.meta.Status(name); halt != "" {
			why = halt
		}
		if why == "" {
			continue
		}
		seen := "never answered"
		if !contact.IsZero() {
			seen = fmt.Sprintf("last answered %s ago", time.Since(contact).Truncate(time.Second))
		}
		out = append(out, fmt.Sprintf("mirror %s: source %s cannot be used (%s): %s", name, m.Configs["bootstrap.servers"], seen, why))
	}
	return out
}

// DescribeMirrors implements plugin.MirrorDescriber: what DescribeMirrors
// answers for every mirror, to a caller allowed everything (the console
// checks its users itself).
func (p *Plugin) DescribeMirrors(ctx context.Context) []plugin.MirrorView {
	img := p.Image()
	if img == nil { // not started
		return nil
	}
	var out []plugin.MirrorView
	for _, dm := range p.describe(ctx, &plugin.RequestContext{}, &mirrorproto.DescribeMirrorsRequest{}, img) {
		v := plugin.MirrorView{Name: dm.MirrorName, State: dm.State, ACLSync: dm.ACLSync}
		if m := img.Mirrors[dm.MirrorName]; m != nil {
			v.Source = m.Configs["bootstrap.servers"]
		}
		if dm.ErrorMessage != nil {
			v.Error = *dm.ErrorMessage
		}
		for _, t := range dm.Topics {
			for _, pd := range t.Partitions {
				v.Partitions = append(v.Partitions, plugin.MirrorPartitionView{Topic: t.TopicName, SourceTopic: t.SourceTopicName, Partition: pd.PartitionIndex,
					State: pd.State, Reason: pd.Reason, SourceOffset: pd.SourceOffset, SourceOffsetTime: pd.SourceOffsetTime,
					DestinationOffset: pd.DestinationOffset, Lag: pd.Lag, LagMs: pd.LagMs, SourceStale: pd.SourceStale,
					DestinationIssue: pd.DestinationIssue})
			}
		}
		for _, d := range dm.Diverged {
			v.Diverged = append(v.Diverged, plugin.DivergedView{Topic: d.Topic, SourceTopic: d.SourceTopic, Partition: d.Partition,
				FirstOffset: d.FirstOffset, LastOffset: d.LastOffset, FirstTimestamp: d.FirstTimestamp, LastTimestamp: d.LastTimestamp,
				Records: d.Records, TruncatedAt: d.TruncatedAt, Cause: d.Cause, CopyStart: d.CopyStart, CopyEnd: d.CopyEnd})
		}
		out = append(out, v)
	}
	return out
}
