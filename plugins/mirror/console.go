package mirror

import (
	"context"

	"github.com/tandem-kafka/tandem/server/plugin"
)

var _ plugin.MirrorDescriber = (*Plugin)(nil)

// DescribeMirrors implements plugin.MirrorDescriber: what DescribeMirrors
// answers for every mirror, to a caller allowed everything (the console
// checks its users itself).
func (p *Plugin) DescribeMirrors(ctx context.Context) []plugin.MirrorView {
	img := p.Image()
	if img == nil { // not started
		return nil
	}
	var out []plugin.MirrorView
	for _, dm := range p.describe(ctx, &plugin.RequestContext{}, &DescribeMirrorsRequest{}) {
		v := plugin.MirrorView{Name: dm.MirrorName, State: dm.State, ACLSync: dm.ACLSync}
		if m := img.Mirrors[dm.MirrorName]; m != nil {
			v.Source = m.Configs["bootstrap.servers"]
		}
		if dm.ErrorMessage != nil {
			v.Error = *dm.ErrorMessage
		}
		for _, t := range dm.Topics {
			for _, pd := range t.Partitions {
				v.Partitions = append(v.Partitions, plugin.MirrorPartitionView{Topic: t.TopicName, Partition: pd.PartitionIndex,
					State: pd.State, Reason: pd.Reason, SourceOffset: pd.SourceOffset, SourceOffsetTime: pd.SourceOffsetTime,
					DestinationOffset: pd.DestinationOffset, Lag: pd.Lag, LagMs: pd.LagMs})
			}
		}
		for _, d := range dm.Diverged {
			v.Diverged = append(v.Diverged, plugin.DivergedView{Topic: d.Topic, Partition: d.Partition,
				FirstOffset: d.FirstOffset, LastOffset: d.LastOffset, FirstTimestamp: d.FirstTimestamp, LastTimestamp: d.LastTimestamp,
				Records: d.Records, TruncatedAt: d.TruncatedAt, Cause: d.Cause, CopyStart: d.CopyStart, CopyEnd: d.CopyEnd})
		}
		out = append(out, v)
	}
	return out
}
