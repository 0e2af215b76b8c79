package mirrorcmd

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
)

// The mirror-specific part of topics describe and cluster health: the
// states the mirror APIs report. Against a cluster without the mirror
// APIs, a mirror topic shows its mirror.name alone.

// ClientOpts let a client send the mirror requests.
func ClientOpts() []kgo.Opt { return []kgo.Opt{admin.Opt()} }

// PartitionStates returns the state of each partition of topic in
// mirror name, nil if the cluster cannot say (no mirror APIs, an error).
func PartitionStates(ctx context.Context, cl *kgo.Client, name, topic string) map[int32]string {
	a := admin.New(cl)
	if a.Supported(ctx) != nil {
		return nil
	}
	ms, err := a.DescribeMirrors(ctx, name)
	if err != nil || len(ms) != 1 {
		return nil
	}
	out := map[int32]string{}
	for _, t := range ms[0].Topics {
		if t.TopicName == topic {
			for _, p := range t.Partitions {
				out[p.PartitionIndex] = p.State
			}
		}
	}
	return out
}

// Problems lists the mirrors in trouble: a mirror FAILED, a
// partition FAILED or unable to copy (its REASON), as tandem mirrors
// --describe exits 1 for. A cluster without the mirror APIs has none;
// one that cannot describe its mirrors is a problem itself.
func Problems(ctx context.Context, cl *kgo.Client) []string {
	a := admin.New(cl)
	if a.Supported(ctx) != nil {
		return nil
	}
	ms, err := a.DescribeMirrors(ctx)
	if err != nil {
		return []string{fmt.Sprintf("mirrors cannot be described: %v", err)}
	}
	var out []string
	for _, m := range ms {
		if m.ErrorCode != 0 && m.State == "" {
			out = append(out, fmt.Sprintf("mirror %s: %v", m.MirrorName, admin.ErrorOf(m.ErrorCode, m.ErrorMessage)))
			continue
		}
		if m.State == "FAILED" {
			msg := ""
			if m.ErrorMessage != nil {
				msg = ": " + *m.ErrorMessage
			}
			out = append(out, fmt.Sprintf("mirror %s is FAILED%s", m.MirrorName, msg))
		}
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				switch {
				case p.State == "FAILED":
					out = append(out, fmt.Sprintf("mirror %s: %s/%d is FAILED %s", m.MirrorName, t.TopicName, p.PartitionIndex, p.Reason))
				case p.Reason != "" && p.State != "STOPPED":
					out = append(out, fmt.Sprintf("mirror %s: %s/%d (%s) cannot be copied: %s", m.MirrorName, t.TopicName, p.PartitionIndex, p.State, p.Reason))
				}
			}
		}
	}
	return out
}
