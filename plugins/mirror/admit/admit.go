// Package admit holds what the mirror APIs refuse before they change
// anything: a new mirror whose source is this very cluster or whose
// discovery would take a topic another mirror holds (CreateMirror), a
// topic whose name or ID here is taken, a mirror topic of the source
// copied under a prefix, a mirror loop (AddTopicsToMirror), a source
// that is no Kafka listener; and which of a mirror's topics a list of
// anchored patterns selects (Select, SelectAll). Its functions are pure
// but ProbeKafka and ServesKey, which ask the source.
package admit

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/metasync"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// DiscoveryTaken refuses a new mirror m whose mirror.topics.include
// selects a source topic (of resp) whose name here another mirror
// already holds, when either mirror renames its topics.
func DiscoveryTaken(img *metadata.Image, m *metadata.Mirror, resp *kmsg.MetadataResponse) error {
	in, err := mirrorcfg.Regexps("mirror.topics.include", m.Configs["mirror.topics.include"])
	if err != nil || len(in) == 0 {
		return err
	}
	ex, err := mirrorcfg.Regexps("mirror.topics.exclude", m.Configs["mirror.topics.exclude"])
	if err != nil {
		return err
	}
	match := func(res []*regexp.Regexp, s string) bool {
		return slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(s) })
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || metasync.IsInternal(*t.Topic, t.IsInternal) || !match(in, *t.Topic) || match(ex, *t.Topic) {
			continue
		}
		dest := mirrorcfg.DestName(m.Configs, *t.Topic)
		other := img.MirrorOf(dest)
		if other == "" {
			continue
		}
		if otherSrc := img.Mirrors[other].Topics[dest].SourceName(dest); otherSrc != dest || dest != *t.Topic {
			return NameTaken(dest, m.Name, *t.Topic, other, otherSrc)
		}
		// Both without prefixes: as always, discovery leaves the topic
		// to the mirror that holds it.
	}
	return nil
}

// ErrNotKafka is what ProbeKafka wraps when an address takes the
// connection but does not answer as a Kafka listener.
var ErrNotKafka = errors.New("not a Kafka listener")

// ProbeKafka sends an ApiVersions v0 request to addr and checks that what
// comes back is its answer. A connection that cannot be made is a dial
// error; anything else that goes wrong wraps ErrNotKafka.
func ProbeKafka(ctx context.Context, addr string, tc *tls.Config, timeout time.Duration) error {
	d := &net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout)) //nolint:errcheck // a failed read reports it
	if tc != nil {
		tc = tc.Clone()
		if tc.ServerName == "" {
			tc.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tconn := tls.Client(conn, tc)
		if err := tconn.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("TLS handshake: %v: %w", err, ErrNotKafka)
		}
		conn = tconn
	}
	const corr = 0x7a6d
	req := binary.BigEndian.AppendUint16(nil, 18)    // ApiVersions
	req = binary.BigEndian.AppendUint16(req, 0)      // v0
	req = binary.BigEndian.AppendUint32(req, corr)   // correlation ID
	req = binary.BigEndian.AppendUint16(req, 0xffff) // null client ID
	if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(req))), req...)); err != nil {
		return fmt.Errorf("%v: %w", err, ErrNotKafka)
	}
	var head [8]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return fmt.Errorf("no answer to ApiVersions: %v: %w", err, ErrNotKafka)
	}
	if size := binary.BigEndian.Uint32(head[:]); size < 4 || size > 1<<20 || binary.BigEndian.Uint32(head[4:]) != corr {
		return fmt.Errorf("the answer to ApiVersions starts with %q: %w", head[:], ErrNotKafka)
	}
	return nil
}

// AddedTopic is a topic of AddTopicsToMirror: its name on the source and
// here.
type AddedTopic struct{ Src, Dest string }

// AddedTopics groups the topics of an AddTopicsToMirror by mirror, with
// their names here, and refuses a topic whose name here another mirror
// (or another topic of the request) already takes: two mirrors never
// write one topic.
func AddedTopics(img *metadata.Image, topics []mirrorproto.AddTopic) (map[string][]AddedTopic, error) {
	byMirror := map[string][]AddedTopic{}
	taken := map[string]AddedTopic{} // by name here, with the mirror in src's place
	takenBy := map[string]string{}
	for _, t := range topics {
		if t.MirrorName == nil || img.Mirrors[*t.MirrorName] == nil {
			name := "<null>"
			if t.MirrorName != nil {
				name = *t.MirrorName
			}
			return nil, fmt.Errorf("mirror %s does not exist: %w", name, mirrorproto.ErrMirrorNotFound)
		}
		mirror := *t.MirrorName
		dest := cmp.Or(t.DestinationName, mirrorcfg.DestName(img.Mirrors[mirror].Configs, t.TopicName))
		if other := img.MirrorOf(dest); other != "" {
			return nil, NameTaken(dest, mirror, t.TopicName, other, img.Mirrors[other].Topics[dest].SourceName(dest))
		}
		if prev, ok := taken[dest]; ok && (takenBy[dest] != mirror || prev.Src != t.TopicName) {
			return nil, NameTaken(dest, mirror, t.TopicName, takenBy[dest], prev.Src)
		}
		taken[dest], takenBy[dest] = AddedTopic{t.TopicName, dest}, mirror
		byMirror[mirror] = append(byMirror[mirror], AddedTopic{t.TopicName, dest})
	}
	return byMirror, nil
}

// NameTaken refuses mirror's copy of source topic src as dest here,
// which mirror other already copies (or is asked to copy) from its
// source topic otherSrc. Without prefixes the message is what it always
// was.
func NameTaken(dest, mirror, src, other, otherSrc string) error {
	if src == dest && otherSrc == dest && mirror != other {
		return fmt.Errorf("topic %s is already mirrored by mirror %s: %w", dest, other, mirrorproto.ErrTopicAlreadyMirrored)
	}
	if mirror == other && src == otherSrc {
		return fmt.Errorf("topic %s is already mirrored by mirror %s: %w", dest, other, mirrorproto.ErrTopicAlreadyMirrored)
	}
	return fmt.Errorf("topic %s here would be mirror %s's copy of its source topic %s, and is mirror %s's copy of its source topic %s: "+
		"two mirrors never write one topic (give each mirror its own %s): %w",
		dest, mirror, src, other, otherSrc, mirrorcfg.TopicPrefix, mirrorproto.ErrTopicAlreadyMirrored)
}

// CheckDest checks that source topic src (described by t) may become
// topic dest here: a topic of that name here must be that topic (same ID
// and partitions); a prefixed copy must not be of a mirror topic of the
// source (mirrorTopics), nor of a topic whose ID this cluster holds
// under another name (one ID, one topic: a cluster cannot hold two).
func CheckDest(img *metadata.Image, m *metadata.Mirror, src, dest string, t kmsg.MetadataResponseTopic, mirrorTopics map[string]string) error {
	if here := img.Topics[dest]; here != nil && (here.ID != t.TopicID || len(here.Partitions) != len(t.Partitions)) {
		return fmt.Errorf("topic %s exists here with ID %s and %d partitions, the source's has ID %s and %d: %w",
			dest, here.ID.Base64(), len(here.Partitions), uuid.UUID(t.TopicID).Base64(), len(t.Partitions), kerr.TopicAlreadyExists)
	}
	if src == dest {
		return nil // as always: the controller refuses an ID held under another name
	}
	if sm, ok := mirrorTopics[src]; ok {
		return MirrorOfMirror(m, metadata.TopicSpec{Name: dest, Source: src}, sm)
	}
	if other := img.TopicsByID[t.TopicID]; other != nil && other.Name != dest {
		return IDTaken(m.Name, src, dest, uuid.UUID(t.TopicID), other.Name)
	}
	return nil
}

// IDTaken refuses a prefixed copy of a topic whose ID this cluster
// already holds under another name: this cluster's own topic mirrored
// back by the other side's mirror and failed over there, or a copy made
// by another mirror.
func IDTaken(mirror, src, dest string, id uuid.UUID, holder string) error {
	return fmt.Errorf("mirror %s cannot copy source topic %s to %s: its topic ID %s is already topic %s here, and a cluster holds a topic ID once "+
		"(is the source's %s a copy of this cluster's %s?): %w", mirror, src, dest, id.Base64(), holder, src, holder, kerr.InconsistentTopicID)
}

// MirrorOfMirror refuses a prefixed copy of a topic that is itself a
// mirror topic on the source: in two clusters mirroring each other it
// would come back with both prefixes (a.b.orders), and so on forever.
func MirrorOfMirror(m *metadata.Mirror, spec metadata.TopicSpec, sourceMirror string) error {
	return fmt.Errorf("topic %s on the source of mirror %s is a mirror topic there (mirror %s): a mirror with %s never copies mirror topics, which would come back as %s: %w",
		spec.Source, m.Name, sourceMirror, mirrorcfg.TopicPrefix, spec.Name, mirrorproto.ErrTopicAlreadyMirrored)
}

// SelfMirror refuses a mirror whose source is this very cluster.
func SelfMirror(m *metadata.Mirror, id string) error {
	return fmt.Errorf("the source of mirror %s (%s) is this very cluster (cluster ID %s): a cluster never mirrors itself: %w",
		m.Name, m.Configs["bootstrap.servers"], id, kerr.InvalidRequest)
}

// MirrorLoop is the refusal of a mirror loop: the source's topic is a
// mirror topic (mirror.name set there) with the ID of the topic here
// (checked before), so its records come from this cluster, directly or
// through others, and mirroring it back would copy it onto itself. Once
// the source has failed it over (mirror.name cleared), adding it is a
// failback.
func MirrorLoop(here string, source *string, topic, sourceMirror string) error {
	src := "<unknown>"
	if source != nil {
		src = *source
	}
	return fmt.Errorf("mirror loop: topic %s on source cluster %s is mirrored by its mirror %s from this cluster %s; fail it over there first: %w",
		topic, src, sourceMirror, here, mirrorproto.ErrTopicAlreadyMirrored)
}

// ServesKey reports whether the cluster behind cl advertises an API key.
func ServesKey(ctx context.Context, cl *kgo.Client, key int16) (bool, error) {
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(resp.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == key }), nil
}

// Select resolves topic names (anchored regular expressions) to the
// mirror's active topics; none means all of them. A name that matches
// only topics already failed over, or none, is an error saying which.
func Select(m *metadata.Mirror, names []string) ([]string, error) {
	active, stopped, err := SelectAll(m, names)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		re := regexp.MustCompile("^(?:" + n + ")$") // compiled by SelectAll
		if !slices.ContainsFunc(active, re.MatchString) {
			var done []string
			for _, t := range stopped {
				if re.MatchString(t) {
					done = append(done, t)
				}
			}
			return nil, fmt.Errorf("mirror %s: %s failed over already (STOPPED): %w", m.Name, strings.Join(done, ", "), mirrorproto.ErrTopicNotMirrored)
		}
	}
	return active, nil
}

// SelectAll resolves topic names (anchored regular expressions; none
// means all) to the mirror's topics, those still mirrored (active) and
// those failed over (stopped). A name that matches no topic of the mirror
// at all is an error naming it.
func SelectAll(m *metadata.Mirror, names []string) (active, stopped []string, err error) {
	for _, t := range slices.Sorted(maps.Keys(m.Topics)) {
		if m.Topics[t].Stopped {
			stopped = append(stopped, t)
		} else {
			active = append(active, t)
		}
	}
	if len(names) == 0 {
		return active, stopped, nil
	}
	match := func(all []string, re *regexp.Regexp, out []string) []string {
		for _, t := range all {
			if re.MatchString(t) && !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
		return out
	}
	var a, s []string
	for _, n := range names {
		re, err := regexp.Compile("^(?:" + n + ")$")
		if err != nil {
			return nil, nil, fmt.Errorf("topic pattern %q: %v: %w", n, err, kerr.InvalidRequest)
		}
		if !slices.ContainsFunc(active, re.MatchString) && !slices.ContainsFunc(stopped, re.MatchString) {
			if len(m.Topics) == 0 {
				return nil, nil, fmt.Errorf("mirror %s has no topic: %w", m.Name, mirrorproto.ErrTopicNotMirrored)
			}
			return nil, nil, fmt.Errorf("no topic of mirror %s matches %q (its topics: %s): %w", m.Name, n,
				someNames(slices.Sorted(maps.Keys(m.Topics))), mirrorproto.ErrTopicNotMirrored)
		}
		a, s = match(active, re, a), match(stopped, re, s)
	}
	return a, s, nil
}

// someNames lists names, the first five of them if there are more.
func someNames(names []string) string {
	if len(names) > 5 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:5], ", "), len(names)-5)
	}
	return strings.Join(names, ", ")
}
