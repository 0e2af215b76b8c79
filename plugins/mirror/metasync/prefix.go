package metasync

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// Mirrors with mirror.topic.prefix (active-active and many-to-one): the
// source's topic T is prefix+T here. Every request to the source names
// its topics by the source's names; everything here (topics, states,
// group offsets, ACLs) by ours. A prefixed mirror never copies a topic
// that is itself a mirror topic on its source: two clusters mirroring
// each other would otherwise copy each other's copies back, with one
// more prefix each round.

// SourceMirrors is what a source cluster says of its own mirrors.
type SourceMirrors struct {
	// Topics are its mirror topics (members of one of its mirrors that
	// have not failed over), with the mirror of each.
	Topics map[string]string
	// Prefixes are its mirrors' mirror.topic.prefix values (none empty).
	Prefixes []string
}

// SourceMirrorTopics asks the source behind cl about its mirrors. A
// source that does not serve DescribeMirrors (Apache Kafka, a Tandem
// without the mirror plugin) has none. A mirror the source hides from
// the mirror's principal (no DESCRIBE on it) is not listed: the topics'
// mirror.name configs, which the sync reads with the other configs,
// still tell which topics are mirror topics.
func SourceMirrorTopics(ctx context.Context, cl *kgo.Client) (SourceMirrors, error) {
	out := SourceMirrors{Topics: map[string]string{}}
	versions, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		return out, fmt.Errorf("ApiVersions: %w", err)
	}
	if !slices.ContainsFunc(versions.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == mirrorproto.KeyDescribeMirrors }) {
		return out, nil
	}
	// Local: the source's states and its image, without asking each of
	// its leaders for their lag.
	resp, err := cl.Request(ctx, &mirrorproto.DescribeMirrorsRequest{Local: true})
	if err != nil {
		return out, fmt.Errorf("DescribeMirrors: %w", err)
	}
	for _, m := range resp.(*mirrorproto.DescribeMirrorsResponse).Mirrors {
		if m.TopicPrefix != "" {
			out.Prefixes = append(out.Prefixes, m.TopicPrefix)
		}
		for _, t := range m.Topics {
			if !failedOver(t) {
				out.Topics[t.TopicName] = m.MirrorName
			}
		}
	}
	return out, nil
}

// failedOver reports whether every partition of a described mirror
// topic is STOPPED: a writable topic of the source's own now.
func failedOver(t mirrorproto.DescribedTopic) bool {
	return len(t.Partitions) > 0 && !slices.ContainsFunc(t.Partitions, func(p mirrorproto.PartitionDetail) bool { return p.State != "STOPPED" })
}

// needSourceMirrors reports whether discovery must ask the source for
// its mirror topics: a prefixed mirror's patterns select a topic it does
// not hold yet. (Comparing counts missed a new candidate when the mirror
// held a topic its patterns no longer select, or one deleted there.)
func needSourceMirrors(prefix string, candidates []string, held map[string]string) bool {
	return prefix != "" && slices.ContainsFunc(candidates, func(name string) bool { _, ok := held[name]; return !ok })
}

// discoverable returns the source topics (by source name) a mirror with
// prefix discovers, given those it already holds (by source name),
// the source's own mirror topics, and taken, which reports a name here
// another mirror holds or that is not ours to create. candidates are the
// topics the include/exclude patterns select, sorted.
func discoverable(candidates []string, prefix string, held, sourceMirrors map[string]string, taken func(dest string) bool) []string {
	var out []string
	for _, name := range candidates {
		if _, ok := held[name]; ok {
			continue
		}
		if prefix != "" && sourceMirrors[name] != "" {
			continue // a copy of a copy: never, whatever the patterns say
		}
		if taken(prefix + name) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// ownCopies maps the source's copies of this cluster's own topics to
// them, by source name: a source topic whose topic ID is a topic here
// under another name that no mirror here writes. In two clusters
// mirroring each other, A's b.orders is B's orders: a group that read
// b.orders on A resumes on orders on B.
func ownCopies(img *metadata.Image, src map[string]srcTopic) map[string]*metadata.Topic {
	out := map[string]*metadata.Topic{}
	for name, st := range src {
		if t := img.TopicsByID[st.id]; st.err == 0 && t != nil && t.Name != name && img.MirrorOf(t.Name) == "" {
			out[name] = t
		}
	}
	return out
}

// prefixACLs returns the source bindings the rules include, with those on
// topics renamed for a mirror with prefix: a literal or prefixed topic
// name N becomes prefix+N, and the literal wildcard "*" (every topic of
// the source) the prefixed pattern prefix (every topic the mirror can
// make here). Other resources (groups, transactional IDs, the cluster)
// keep their names: they are the same on both sides. Topic bindings
// under a prefix of the source's own mirrors (theirs) are left out: they
// are about the source's copies, which this mirror never copies, and
// two clusters mirroring each other would otherwise copy each other's
// copies back with one more prefix every cycle.
func prefixACLs(source []metadata.ACL, rules []mirrorcfg.ACLRule, prefix string, theirs []string) []metadata.ACL {
	const (
		topic    = int8(kmsg.ACLResourceTypeTopic)
		literal  = int8(kmsg.ACLResourcePatternTypeLiteral)
		prefixed = int8(kmsg.ACLResourcePatternTypePrefixed)
	)
	var out []metadata.ACL
	for _, a := range source {
		if !aclIncluded(rules, a) {
			continue
		}
		if a.ResourceType == topic && slices.ContainsFunc(theirs, func(p string) bool { return strings.HasPrefix(a.ResourceName, p) }) {
			continue
		}
		if a.ResourceType == topic {
			switch {
			case a.PatternType == literal && a.ResourceName == "*":
				a.ResourceName, a.PatternType = prefix, prefixed
			case a.PatternType == literal || a.PatternType == prefixed:
				a.ResourceName = prefix + a.ResourceName
			}
		}
		out = append(out, a)
	}
	return out
}
