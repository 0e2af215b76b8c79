package mirror

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// LastMirroredOffsets (key 97) of KIP-1279 (Cluster Mirroring): the
// plugin's side.

// lastMirrored answers LastMirroredOffsets from whichever mirror holds (or
// held) each topic; the last mirror epoch is -1 for a partition never
// mirrored here.
func (p *Plugin) lastMirrored(ctx context.Context, rc *plugin.RequestContext, req *mirrorproto.LastMirroredOffsetsRequest) []mirrorproto.OffsetsTopic {
	img := p.Image()
	var out []mirrorproto.OffsetsTopic
	for _, t := range req.Topics {
		ot := mirrorproto.OffsetsTopic{Name: t.Name}
		mirror, mt, ok := img.LastMirrorOf(t.Name)
		allowed := rc.Allowed(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Name)
		for _, idx := range t.Partitions {
			op := mirrorproto.OffsetsPartition{PartitionIndex: idx, LastMirroredOffset: -1, LastMirrorEpoch: -1}
			if !allowed {
				op.ErrorCode = kerr.TopicAuthorizationFailed.Code
			} else if here := img.Topics[t.Name]; !ok && here != nil {
				// No mirror holds the topic (any more): the epochs kept
				// for the topic alone when its mirroring last stopped.
				if st, err := p.store.Read(ctx, mirrorstate.PartitionKey{Mirror: "", Topic: t.Name, Partition: idx}, here.ID); err == nil && st.TopicID == here.ID {
					op.LastMirroredOffset, op.LastMirrorEpoch = st.LMO, st.LME
				}
			} else if ok {
				st, err := p.store.Read(ctx, mirrorstate.PartitionKey{Mirror: mirror, Topic: t.Name, Partition: idx}, mt.ID)
				switch {
				case err != nil:
					op.ErrorCode, _ = code(err)
				case st.State == mirrorstate.Stopped || st.State == mirrorstate.Stopping:
					op.LastMirroredOffset, op.LastMirrorEpoch = st.LMO, st.LME
				default:
					// Still mirroring: the latest source epoch it holds.
					if ep := p.Host().Partition(mt.ID, idx); ep != nil {
						offs := ep.Offsets()
						op.LastMirroredOffset = offs.LogEnd - 1
						if offs.LogEnd > offs.LogStart {
							op.LastMirrorEpoch = ep.EpochAt(offs.LogEnd - 1)
						}
					}
				}
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		out = append(out, ot)
	}
	return out
}
