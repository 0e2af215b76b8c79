// Package source is a mirror's connection to its source cluster, as the
// run's source loop and its apply stage use it: one franz-go client,
// built from the mirror's configs on first use and again after Reset;
// each request bounded by mirror.request.timeout.ms; the wording of a
// failed request (refused by the source, or the source unreachable); and
// the requests themselves: the metadata of the mirror's topics, the
// round trip, the last mirror epochs (KIP-1279's LastMirroredOffsets)
// and ListOffsets, by the partitions' names on the source and answered
// by their names here; and a partition's leader in the metadata (Leader).
// The fetchers have connections of their own (plugins/mirror/fetch).
//
// What the run makes of the answers (the partitions' source leaders,
// PREPARING's truncation, the mirror's health) is the run's
// (plugins/mirror, source.go); the package reaches a partition only
// through Named, so that it does not import the plugin.
package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
)

type topicPartition = mirrorstate.TopicPartition

// Named is a mirror partition as a request to the source names it.
type Named interface {
	// SourceName is the partition's name here, and its topic's name on
	// the source (they differ under mirror.topic.prefix).
	SourceName() (here topicPartition, src string)
}

// Conn is one mirror's connection to its source cluster. Its fields are
// set before first use; Request, Reset and ListOffsetsAt may be called
// from any goroutine, LastMirrorEpochs from one at a time.
type Conn struct {
	Mirror   string            // the mirror's name
	Configs  map[string]string // the mirror's: bootstrap.servers, security
	Timeouts mirrorcfg.Timeouts
	ClientID string

	mu sync.Mutex // guards cl
	cl *kgo.Client

	// mirrors says whether the source serves LastMirroredOffsets (nil:
	// not asked yet).
	mirrors *bool
}

// client returns the franz-go client to the source, built from the
// mirror's configs (bootstrap.servers, security.protocol, SASL, TLS).
func (c *Conn) client() (*kgo.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cl != nil {
		return c.cl, nil
	}
	opts, err := c.Timeouts.ClientOpts(c.Configs)
	if err != nil {
		return nil, err
	}
	opts = append(opts, kgo.ClientID(c.ClientID))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("mirror %s: source client: %w", c.Mirror, err)
	}
	c.cl = cl
	return cl, nil
}

// Reset closes the client: the next request builds a fresh one (fresh
// connections, fresh credentials).
func (c *Conn) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cl != nil {
		c.cl.Close()
		c.cl = nil
	}
}

// Request sends req to the source (to broker id, or any broker if id <
// 0) with the request timeout.
func (c *Conn) Request(ctx context.Context, id int32, req kmsg.Request) (kmsg.Response, error) {
	cl, err := c.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeouts.Request)
	defer cancel()
	if id < 0 {
		return cl.Request(ctx, req)
	}
	return cl.Broker(int(id)).Request(ctx, req)
}

// Err describes a failed request to the source: the source refused it
// with a Kafka error (wrong credentials, missing ACLs), or could not be
// reached at all (mirrorproto.ErrMirrorSourceUnavailable).
func (c *Conn) Err(what string, err error) error {
	if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
		return fmt.Errorf("source cluster %s refused %s: %w", c.Configs["bootstrap.servers"], what, err)
	}
	return fmt.Errorf("source cluster %s unreachable (%s): %v: %w", c.Configs["bootstrap.servers"], what, err, mirrorproto.ErrMirrorSourceUnavailable)
}

// Metadata asks the source for the metadata of topics, by their names
// there (an empty list asks for none, not all).
func (c *Conn) Metadata(ctx context.Context, topics []string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	for _, t := range topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, mt)
	}
	resp, err := c.Request(ctx, -1, req)
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.MetadataResponse), nil
}

// RTT times a small request to the source, on a connection a request
// before it used.
func (c *Conn) RTT(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	if _, err := c.Request(ctx, -1, kmsg.NewPtrApiVersionsRequest()); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// LastMirrorEpochs asks the source for the last mirror epoch of each of
// parts, by their names here, in requests of at most lmeBatch
// partitions: the epoch its own mirroring of the topic stopped at, -1
// if it never mirrored it (KIP-1279 "Log Convergence"). A partition the
// source answered with an error is missing, with the error returned.
func LastMirrorEpochs[P Named](ctx context.Context, c *Conn, parts []P) (map[topicPartition]int32, error) {
	out := make(map[topicPartition]int32, len(parts))
	if c.mirrors == nil {
		resp, err := c.Request(ctx, -1, kmsg.NewPtrApiVersionsRequest())
		if err != nil {
			return nil, c.Err("ApiVersions", err)
		}
		serves := slices.ContainsFunc(resp.(*kmsg.ApiVersionsResponse).ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool {
			return k.ApiKey == mirrorproto.KeyLastMirroredOffsets
		})
		c.mirrors = &serves
	}
	if !*c.mirrors {
		for _, pt := range parts {
			here, _ := pt.SourceName()
			out[here] = -1 // a source without mirroring (e.g. Apache Kafka) never mirrored the partition
		}
		return out, nil
	}
	var errs []error
	for chunk := range slices.Chunk(parts, lmeBatch) {
		errs = append(errs, lastMirrorEpochsOf(ctx, c, chunk, out))
	}
	return out, errors.Join(errs...)
}

// lmeBatch is the most partitions one LastMirroredOffsets asks for.
const lmeBatch = 1000

// lastMirrorEpochsOf asks for one chunk of LastMirrorEpochs into out.
func lastMirrorEpochsOf[P Named](ctx context.Context, c *Conn, parts []P, out map[topicPartition]int32) error {
	req := &mirrorproto.LastMirroredOffsetsRequest{MirrorName: c.Mirror}
	idx := map[string]int{}
	here := map[string]string{} // source names to ours
	for _, pt := range parts {
		tp, src := pt.SourceName()
		i, ok := idx[src]
		if !ok {
			i = len(req.Topics)
			idx[src], here[src] = i, tp.Topic
			req.Topics = append(req.Topics, mirrorproto.PartitionsTopic{Name: src})
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, tp.Partition)
	}
	resp, err := c.Request(ctx, -1, req)
	if err != nil {
		return c.Err("LastMirroredOffsets", err)
	}
	lr := resp.(*mirrorproto.LastMirroredOffsetsResponse)
	if lr.ErrorCode != 0 {
		return fmt.Errorf("last mirror epochs: %w", mirrorproto.ErrorForCode(lr.ErrorCode))
	}
	var errs []error
	for _, t := range lr.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				errs = append(errs, fmt.Errorf("last mirror epoch of %s-%d: %w", t.Name, p.PartitionIndex, mirrorproto.ErrorForCode(p.ErrorCode)))
				continue
			}
			if name, ok := here[t.Name]; ok {
				out[topicPartition{Topic: name, Partition: p.PartitionIndex}] = p.LastMirrorEpoch
			}
		}
	}
	for _, pt := range parts {
		tp, _ := pt.SourceName()
		if _, ok := out[tp]; !ok {
			out[tp] = -1 // not in the answer: never mirrored there
		}
	}
	return errors.Join(errs...)
}

// ListOffsetsAt asks source broker broker for the offsets of parts at
// the timestamp at gives each, by their names here.
func ListOffsetsAt[P Named](ctx context.Context, c *Conn, broker int32, parts []P, at func(P) int64) (map[topicPartition]kmsg.ListOffsetsResponseTopicPartition, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	idx := map[string]int{}
	here := map[string]string{} // source names (mirror.topic.prefix) to ours
	for _, pt := range parts {
		tp, src := pt.SourceName()
		i, ok := idx[src]
		if !ok {
			i = len(req.Topics)
			idx[src], here[src] = i, tp.Topic
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = src
			req.Topics = append(req.Topics, rt)
		}
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = tp.Partition, at(pt), -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, lp)
	}
	resp, err := c.Request(ctx, broker, req)
	if err != nil {
		return nil, err
	}
	out := map[topicPartition]kmsg.ListOffsetsResponseTopicPartition{}
	for _, rt := range resp.(*kmsg.ListOffsetsResponse).Topics {
		name, ok := here[rt.Topic]
		if !ok {
			continue
		}
		for _, rp := range rt.Partitions {
			out[topicPartition{Topic: name, Partition: rp.Partition}] = rp
		}
	}
	return out, nil
}

// Leader is the leader and leader epoch of a partition of topic t in the
// source's metadata (t nil: the metadata does not list the topic), or,
// with leader and epoch -1, why the source cannot serve it now.
func Leader(t *kmsg.MetadataResponseTopic, partition int32) (leader, epoch int32, trouble string) {
	leader, epoch = -1, -1
	trouble = "the source's metadata does not list the partition"
	if t != nil && t.ErrorCode != 0 {
		trouble = fmt.Sprintf("source topic: %v", kerr.ErrorForCode(t.ErrorCode))
	} else if t != nil {
		for _, sp := range t.Partitions {
			switch {
			case sp.Partition != partition:
			case sp.ErrorCode != 0 || sp.Leader < 0:
				trouble = fmt.Sprintf("source partition has no leader: %v", kerr.ErrorForCode(sp.ErrorCode))
			default:
				leader, epoch, trouble = sp.Leader, sp.LeaderEpoch, ""
			}
		}
	}
	return leader, epoch, trouble
}
