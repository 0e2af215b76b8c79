// Package fetch is the mirror's fetch stage, KIP-1279's
// MirrorFetcherThread: one Fetcher per source broker and fetcher id
// (mirror.num.replica.fetchers of them per broker), each with its own
// client to the source. A round of a fetcher builds one Fetch for the
// partitions it is given, sends it to its source broker, trims each
// partition's answer to whole batches not above the epoch it was asked
// for (KAFKA-18723), hands each to be applied, then waits for the
// appends together.
//
// What a partition's answer means (truncation on a diverging epoch,
// OFFSET_OUT_OF_RANGE, epoch fencing, the partition's state) is the
// mirror's, not the fetcher's: the fetcher reaches the mirror only
// through Target, which the mirror plugin implements (plugins/mirror,
// fetch.go), so that it does not import the plugin.
package fetch

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/uuid"
)

// Key names a fetcher: a source broker and one of its fetcher ids.
type Key struct {
	Broker int32
	ID     int
}

// KeyOf is the fetcher of a partition whose source leader is leader: the
// partitions a source broker leads are hashed over its fetcher ids
// (fetchers of them, at least one).
func KeyOf(topic string, partition, leader int32, fetchers int) Key {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s-%d", topic, partition)
	return Key{leader, int(h.Sum32() % uint32(max(1, fetchers)))}
}

// Partition is a partition as one round fetches it.
type Partition struct {
	Topic     string
	TopicID   uuid.UUID
	Partition int32
	// FetchOffset is where the fetch starts: the destination's log
	// end, or the source's log start to restart at.
	FetchOffset int64
	// LeaderEpoch is the source leader's epoch as last learned (-1:
	// unknown), sent as CurrentLeaderEpoch: the source fences a stale
	// one, and the fetcher drops the answer's batches above it.
	LeaderEpoch int32
	// LastFetchedEpoch is the epoch of the destination's last batch (-1:
	// none), for the source to answer a DivergingEpoch.
	LastFetchedEpoch int32
}

// Target is the mirror as one fetcher sees it. A fetcher calls its target
// from its own goroutine only, round after round: Partitions, and when
// there are some, for the round's Fetch either Unreachable or Answered,
// then, after an answer without a top-level error, Apply for each of its
// partitions and the waits Apply returned.
type Target interface {
	// Partitions are the partitions to fetch this round, with their
	// positions. None: the fetcher has nothing to do for a second. An
	// error: it cannot fetch now, and tries again after the backoff.
	Partitions() ([]Partition, error)
	// Unreachable is told that the round's Fetch got no answer (not when
	// the fetcher was stopped meanwhile); err is the client's (the fetcher
	// has closed its client: the next round reconnects). It returns the
	// error the fetcher reports, worded as the target wants (which source,
	// why).
	Unreachable(err error) error
	// Answered is told that the source broker answered the round's
	// Fetch; err is the answer's top-level error, nil if none.
	Answered(err error)
	// Apply applies one partition's answer. Its RecordBatches are
	// trimmed to whole batches not above p.LeaderEpoch. The append must
	// be written before Apply returns; wait (nil when nothing was
	// appended) waits until it is durable. The fetcher calls the waits
	// after every partition of the answer was applied, so that their
	// fsyncs are one round of the engine's syncer; n counts towards the
	// fetcher's bytes and the throttle.
	Apply(p Partition, rp *kmsg.FetchResponseTopicPartition) (n int, wait func() error, err error)
}

// Refresher is a Target that also keeps something fresh between fetches
// (the mirror: the source end offsets of its paused partitions, and the
// lag in record time): the fetcher calls Refresh after a round, at most
// once a second.
type Refresher interface {
	Refresh()
}

// Counter counts (a *metrics.Counter).
type Counter interface {
	Add(n int)
}

// Config is a fetcher's settings.
type Config struct {
	Mirror string // the mirror's name, in the client ID
	NodeID int32  // this broker's, in the client ID
	// ClientOpts are the options of a client to the source (bootstrap
	// servers, security, timeouts); the fetcher adds its client ID.
	ClientOpts        func() ([]kgo.Opt, error)
	RequestTimeout    time.Duration // mirror.request.timeout.ms: bounds each request
	MaxWait           time.Duration // replica.fetch.wait.max.ms
	MinBytes          int32         // replica.fetch.min.bytes
	MaxBytes          int32         // replica.fetch.response.max.bytes
	PartitionMaxBytes int32         // replica.fetch.max.bytes
	Backoff           time.Duration // mirror.replica.fetch.backoff.ms: after a failed round
	// Rate is mirror.replication.throttled.rate in bytes a second, read
	// at each fetch (it is dynamic); 0 or less, or a nil Rate, does not
	// throttle.
	Rate func() int64
	Log  *slog.Logger // nil: none
	// Requests counts the Fetch requests sent, Bytes what Apply
	// reported; nil counts nothing.
	Requests, Bytes Counter
}

// Fetcher is one MirrorFetcherThread.
type Fetcher struct {
	key    Key
	cfg    Config
	t      Target
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// The fetcher goroutine's own:
	refreshedAt time.Time   // last Refresh
	cl          *kgo.Client // to the source, nil until the first fetch or after a failure
}

type noCount struct{}

func (noCount) Add(int) {}

// New returns the fetcher k of the mirror that t is, not running yet:
// Run runs it until ctx ends or Stop.
func New(ctx context.Context, k Key, cfg Config, t Target) *Fetcher {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Requests == nil {
		cfg.Requests = noCount{}
	}
	if cfg.Bytes == nil {
		cfg.Bytes = noCount{}
	}
	f := &Fetcher{key: k, cfg: cfg, t: t, done: make(chan struct{})}
	f.ctx, f.cancel = context.WithCancel(ctx)
	return f
}

// Stop ends the fetcher and waits until Run has returned; a fetch
// waiting at the source is abandoned.
func (f *Fetcher) Stop() {
	f.cancel()
	<-f.done
}

// Run fetches round after round until the fetcher is stopped. A round
// that fetched starts the next at once (the fetch waited at the source,
// replica.fetch.wait.max.ms); one with nothing to fetch waits a second,
// a failed one the backoff.
func (f *Fetcher) Run() {
	defer close(f.done)
	defer f.closeClient()
	for f.ctx.Err() == nil {
		parts, err := f.t.Partitions()
		if err == nil && len(parts) > 0 {
			_, err = f.fetch(parts)
		}
		f.refresh()
		wait := time.Second
		switch {
		case err != nil:
			if f.ctx.Err() == nil {
				f.cfg.Log.Debug("mirror fetch", "source_broker", f.key.Broker, "err", err)
			}
			wait = f.cfg.Backoff
		case len(parts) > 0:
			continue
		}
		select {
		case <-f.ctx.Done():
		case <-time.After(wait):
		}
	}
}

func (f *Fetcher) refresh() {
	r, ok := f.t.(Refresher)
	if !ok || time.Since(f.refreshedAt) < time.Second {
		return
	}
	f.refreshedAt = time.Now()
	r.Refresh()
}

// client returns the fetcher's own client to the source: its client ID
// is the KIP's, broker-<id>-fetcher-<n>-mirror-<name>, so that the
// source can set a quota on each fetcher. A new one learns the source's
// brokers with a metadata request first.
func (f *Fetcher) client() (*kgo.Client, error) {
	if f.cl != nil {
		return f.cl, nil
	}
	opts, err := f.cfg.ClientOpts()
	if err != nil {
		return nil, err
	}
	opts = append(opts, kgo.ClientID(fmt.Sprintf("broker-%d-fetcher-%d-mirror-%s", f.cfg.NodeID, f.key.ID, f.cfg.Mirror)))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("mirror %s: fetcher client: %w", f.cfg.Mirror, err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, f.cfg.RequestTimeout)
	defer cancel()
	md := kmsg.NewPtrMetadataRequest()
	md.Topics = []kmsg.MetadataRequestTopic{}
	if _, err := cl.Request(ctx, md); err != nil {
		cl.Close()
		return nil, err
	}
	f.cl = cl
	return cl, nil
}

// request sends req to the fetcher's source broker; a failure closes the
// client, so that the next request reconnects (and relearns brokers).
func (f *Fetcher) request(req kmsg.Request) (kmsg.Response, error) {
	cl, err := f.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(f.ctx, f.cfg.RequestTimeout)
	defer cancel()
	resp, err := cl.Broker(int(f.key.Broker)).Request(ctx, req)
	if err != nil {
		f.closeClient()
	}
	return resp, err
}

func (f *Fetcher) closeClient() {
	if f.cl != nil {
		f.cl.Close()
		f.cl = nil
	}
}

// fetch sends one Fetch for parts to the fetcher's broker and applies
// what comes back. It returns the bytes applied.
func (f *Fetcher) fetch(parts []Partition) (int, error) {
	resp, err := f.request(f.fetchRequest(parts))
	f.cfg.Requests.Add(1)
	switch {
	case err != nil && f.ctx.Err() != nil:
		return 0, err // stopped: the fetch was abandoned, not unanswered
	case err != nil:
		return 0, f.t.Unreachable(err)
	}
	fr := resp.(*kmsg.FetchResponse)
	if fr.ErrorCode != 0 {
		err := fmt.Errorf("fetch from source broker %d: %w", f.key.Broker, kerr.ErrorForCode(fr.ErrorCode))
		f.t.Answered(err)
		return 0, err
	}
	f.t.Answered(nil)
	total := 0
	var errs []error
	var appended []func() error
	for _, t := range fr.Topics {
		for i := range t.Partitions {
			rp := &t.Partitions[i]
			j := slices.IndexFunc(parts, func(p Partition) bool {
				return (p.TopicID == t.TopicID || p.Topic == t.Topic) && p.Partition == rp.Partition
			})
			if j < 0 {
				continue
			}
			p := parts[j]
			rp.RecordBatches = notAbove(completeBatches(rp.RecordBatches), p.LeaderEpoch)
			n, wait, err := f.t.Apply(p, rp)
			total += n
			if err != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", p.Topic, p.Partition, err))
			}
			if wait != nil {
				appended = append(appended, func() error {
					if err := wait(); err != nil {
						return fmt.Errorf("%s-%d: %w", p.Topic, p.Partition, err)
					}
					return nil
				})
			}
		}
	}
	// The partitions' appends were all written before any is waited
	// for: their fsyncs are one round of the engine's syncer, not one
	// each, and no other fetcher of the mirror waits behind them (the
	// mirror applies under a lock that the waits do not hold).
	for _, wait := range appended {
		errs = append(errs, wait())
	}
	f.cfg.Bytes.Add(total)
	f.throttle(total)
	return total, errors.Join(errs...)
}

// fetchRequest is a Fetch for parts from their positions, with their
// source leader epochs as CurrentLeaderEpoch, outside any fetch session
// (each Fetch names all its partitions).
func (f *Fetcher) fetchRequest(parts []Partition) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(f.cfg.MaxWait.Milliseconds())
	req.MinBytes = f.cfg.MinBytes
	req.MaxBytes = f.cfg.MaxBytes
	req.SessionEpoch = -1
	for _, p := range parts {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = p.Partition
		rp.CurrentLeaderEpoch = p.LeaderEpoch
		rp.FetchOffset = p.FetchOffset
		rp.LastFetchedEpoch = p.LastFetchedEpoch
		rp.PartitionMaxBytes = f.cfg.PartitionMaxBytes
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = p.Topic, p.TopicID
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// throttle sleeps as long as n bytes take at the configured rate, or
// until the fetcher is stopped: at a low rate the sleep can be hours,
// and the mirror's source loop waits for a Stop.
func (f *Fetcher) throttle(n int) {
	if f.cfg.Rate == nil {
		return
	}
	rate := f.cfg.Rate()
	if rate <= 0 || n <= 0 {
		return
	}
	select {
	case <-f.ctx.Done():
	case <-time.After(time.Duration(float64(n) / float64(rate) * float64(time.Second))):
	}
}
