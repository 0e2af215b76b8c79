package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/admin"
	"github.com/tandem-kafka/tandem/server/config"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/server/replication"
)

// The metadata apply loop: the engine and the plugins are brought in line
// with each metadata image, in order, outside of the raft FSM, and
// requests are served from the last image applied.

// appliedState is the last metadata image whose partitions the engine has
// been brought in line with. Requests are served from it, never from a
// newer image whose partitions may not exist in the engine yet.
type appliedState struct {
	mu      sync.Mutex
	image   *metadata.Image
	changed chan struct{} // closed when image advances
	// closed ends every wait: the broker's context, set by Start.
	closed <-chan struct{}
}

func (a *appliedState) init() {
	a.image = &metadata.Image{}
	a.changed = make(chan struct{})
}

func (a *appliedState) get() *metadata.Image {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.image
}

// Applied is replication.Images: the image and a channel closed when a
// newer one is applied, read together.
func (a *appliedState) Applied() (*metadata.Image, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.image, a.changed
}

func (a *appliedState) set(img *metadata.Image) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.image = img
	close(a.changed)
	a.changed = make(chan struct{})
}

// wait returns once the metadata loop has applied an image with
// Index >= index, so that partitions created by a request exist in the
// engine before the request is answered.
func (a *appliedState) wait(ctx context.Context, index uint64) error {
	img, err := a.await(ctx, func(img *metadata.Image) bool { return img.Index >= index })
	if err != nil {
		return fmt.Errorf("waiting for metadata index %d (applied %d): %w", index, img.Index, err)
	}
	return nil
}

// await returns the first applied image for which ready is true, or
// the latest one and an error when ctx ends or the broker closes first.
func (a *appliedState) await(ctx context.Context, ready func(*metadata.Image) bool) (*metadata.Image, error) {
	for {
		a.mu.Lock()
		img, ch := a.image, a.changed
		a.mu.Unlock()
		if ready(img) {
			return img, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return img, ctx.Err()
		case <-a.closed:
			return img, errors.New("broker closed")
		}
	}
}

// applier brings the broker in line with each metadata image: the
// engine's partitions, their replication, the leader observers and the
// metadata observers' queues; what it takes of the broker.
type applier struct {
	nodeID    int32
	log       *slog.Logger
	applied   *appliedState
	admin     *admin.Admin // the config layers of a topic
	plugins   *pluginState
	leaderObs []plugin.LeaderObserver
	metaObs   []*metaQueue
	memory    processMemory // the soft memory limit follows the partitions hosted
	// Set by the broker's Start.
	engine *engine.Engine
	meta   *raftmeta.Controller
	repl   *replication.Manager
	done   <-chan struct{} // the broker closed
}

// reconcile runs once at Start: it deletes stored partitions whose topic is
// gone, elects this broker for partitions that have no live leader, and
// applies the current image (creating partitions, firing OnLeaderChange for
// every partition we lead).
func (ap *applier) reconcile(ctx context.Context) error {
	img := ap.meta.Image()
	for _, sp := range ap.engine.Stored() {
		t := img.TopicsByID[sp.TopicID]
		if t == nil || int(sp.Partition) >= len(t.Partitions) {
			ap.log.Info("deleting partition of a topic that no longer exists", "topic", sp.Topic, "topic_id", sp.TopicID, "partition", sp.Partition)
			if err := ap.engine.Delete(sp.TopicID, sp.Partition); err != nil {
				return fmt.Errorf("server: delete stale partition %s-%d: %w", sp.Topic, sp.Partition, err)
			}
		}
	}
	for _, t := range img.Topics {
		if ap.meta.Clustered() {
			break // the controller elects leaders as brokers come and go
		}
		for p, part := range t.Partitions {
			_, live := img.Brokers[part.Leader]
			if (part.Leader == -1 || !live) && slices.Contains(part.Replicas, ap.nodeID) {
				if err := ap.meta.ElectLeader(ctx, t.ID, int32(p), ap.nodeID); err != nil {
					return fmt.Errorf("server: elect leader of %s-%d: %w", t.Name, p, err)
				}
			}
		}
	}
	ap.apply(&metadata.Image{}, ap.meta.Image())
	return nil
}

// loop applies every new metadata image to the engine and the
// plugins, outside of the raft FSM.
func (ap *applier) loop() {
	for {
		ch := ap.meta.Changed()
		cur := ap.applied.get()
		if next := ap.meta.Image(); next != cur {
			ap.apply(cur, next)
			continue
		}
		select {
		case <-ch:
		case <-ap.done:
			return
		}
	}
}

// apply brings the engine in line with cur (coming from old), tells leader
// observers what changed, queues the delta for metadata observers, and
// publishes cur as the applied image.
func (ap *applier) apply(old, cur *metadata.Image) {
	delta := metadata.Diff(old, cur)
	for _, t := range delta.DeletedTopics {
		for p, part := range t.Partitions {
			ap.repl.Drop(t.ID, int32(p))
			if part.Leader == ap.nodeID {
				ap.leaderChange(t, int32(p), false, part.LeaderEpoch)
			}
			if err := ap.engine.Delete(t.ID, int32(p)); err != nil {
				ap.log.Error("delete partition of deleted topic", "topic", t.Name, "partition", p, "err", err)
			}
		}
	}
	// Dynamic broker configs change the defaults under every topic, and
	// broker changes where partitions' leaders are.
	ids := slices.Concat(delta.CreatedTopics, delta.ChangedTopics)
	if delta.BrokerConfigsChanged || delta.BrokersChanged {
		ids = ids[:0]
		for id := range cur.TopicsByID {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		t := cur.TopicsByID[id]
		if t == nil {
			continue
		}
		ap.applyTopic(old.TopicsByID[id], t, cur)
	}
	if len(ids) > 0 || len(delta.DeletedTopics) > 0 {
		ap.memory.follow(ap.engine.Len())
	}
	ap.applied.set(cur)
	for _, q := range ap.metaObs {
		q.push(old, cur)
	}
}

// applyTopic creates or updates the engine partitions of t that this broker
// hosts and reports leadership changes.
func (ap *applier) applyTopic(old, t *metadata.Topic, img *metadata.Image) {
	// The topic's configs over the broker defaults, in the latest image.
	cfg := config.LogConfig(ap.admin.Layers(ap.meta.Image(), t))
	var held []int32
	for i, part := range t.Partitions {
		if slices.Contains(part.Replicas, ap.nodeID) {
			held = append(held, int32(i))
		}
	}
	if err := ap.engine.CreateAll(t.Name, t.ID, held, cfg); err != nil {
		ap.log.Error("create partitions", "topic", t.Name, "partitions", len(held), "err", err)
	}
	for i, part := range t.Partitions {
		p := int32(i)
		if !slices.Contains(part.Replicas, ap.nodeID) {
			// Reassigned away from us: drop the data.
			ap.repl.Drop(t.ID, p)
			if ap.engine.Partition(t.ID, p) != nil {
				if err := ap.engine.Delete(t.ID, p); err != nil {
					ap.log.Error("delete unassigned partition", "topic", t.Name, "partition", p, "err", err)
				}
			}
		} else {
			ep := ap.engine.Partition(t.ID, p)
			if ep == nil {
				continue // CreateAll failed, logged above
			}
			if part.Leader == ap.nodeID && ep.Offsets().LeaderEpoch < part.LeaderEpoch {
				if err := ep.SetLeaderEpoch(part.LeaderEpoch); err != nil {
					ap.log.Error("set leader epoch", "topic", t.Name, "partition", p, "epoch", part.LeaderEpoch, "err", err)
				}
			}
			ap.repl.Replicate(t, p, part, ep, img)
		}
		var was metadata.Partition
		was.Leader = -1
		if old != nil && i < len(old.Partitions) {
			was = old.Partitions[i]
		}
		wasLeader, isLeader := was.Leader == ap.nodeID, part.Leader == ap.nodeID
		switch {
		case isLeader && (!wasLeader || was.LeaderEpoch != part.LeaderEpoch):
			ap.leaderChange(t, p, true, part.LeaderEpoch)
		case wasLeader && !isLeader:
			ap.leaderChange(t, p, false, was.LeaderEpoch)
		}
	}
}

func (ap *applier) leaderChange(t *metadata.Topic, p int32, leader bool, epoch int32) {
	ch := plugin.LeaderChange{Topic: t.Name, TopicID: t.ID, Partition: p, Leader: leader, LeaderEpoch: epoch}
	for _, o := range ap.leaderObs {
		if !ap.plugins.failedOf(o) {
			ap.plugins.contain(ap.plugins.name(o), "OnLeaderChange", func() { o.OnLeaderChange(ch) })
		}
	}
}

// metaQueue delivers image changes to one MetadataObserver from its own
// goroutine, so that a slow plugin never stalls the metadata loop. The
// queue is bounded: when it is full, everything queued collapses into one
// delta from the oldest undelivered image to the newest.
type metaQueue struct {
	obs    plugin.MetadataObserver
	b      *Broker
	log    *slog.Logger
	mu     sync.Mutex
	items  []metaItem
	notify chan struct{}
}

type metaItem struct{ old, cur *metadata.Image }

const metaQueueCap = 64

func newMetaQueue(o plugin.MetadataObserver, b *Broker) *metaQueue {
	return &metaQueue{obs: o, b: b, log: b.log, notify: make(chan struct{}, 1)}
}

func (q *metaQueue) push(old, cur *metadata.Image) {
	q.mu.Lock()
	if len(q.items) >= metaQueueCap {
		q.log.Warn("metadata observer is behind; coalescing its updates", "plugin", fmt.Sprintf("%T", q.obs))
		q.items = []metaItem{{q.items[0].old, cur}}
	} else {
		q.items = append(q.items, metaItem{old, cur})
	}
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *metaQueue) run(ctx context.Context) {
	for {
		select {
		case <-q.notify:
		case <-ctx.Done():
			return
		}
		for {
			q.mu.Lock()
			if len(q.items) == 0 {
				q.mu.Unlock()
				break
			}
			it := q.items[0]
			q.items = q.items[1:]
			q.mu.Unlock()
			if q.b.plugins.failedOf(q.obs) {
				continue
			}
			q.b.plugins.contain(q.b.plugins.name(q.obs), "OnMetadataUpdate", func() {
				q.obs.OnMetadataUpdate(metadata.Diff(it.old, it.cur), it.cur)
			})
		}
	}
}
