// Package replication keeps a partition's replicas copies of its leader's
// log, as Kafka's Partition and ReplicaFetcherThread do it: how a follower
// copies the leader, and how the ISR and the high watermark move.
//
//   - leader.go is the leader's side: it tracks each follower's log end
//     from its fetches, keeps the ISR through the controller
//     (AlterPartition), advances the high watermark to what the ISR has,
//     and makes acks=all wait for it (min.insync.replicas before and
//     after the append).
//   - follower.go is the follower's side: one fetcher per leader broker
//     truncates where its log diverges from the leader's and copies the
//     rest.
//   - throttle.go bounds the bytes either side replicates (the
//     leader, follower and mirror replication throttles).
//   - mirror_epoch.go is the tag a follower of a mirror partition and its
//     leader exchange in their fetches.
//
// The package does not know the broker it runs in: the broker hands it
// every partition's role with each metadata image it applies
// (Manager.Replicate, Manager.Drop), its Fetch and Produce handlers ask
// it about followers and the ISR, and what replication needs of the
// broker comes through Config.
package replication

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/config"
)

// Config is what replication takes from the broker it runs in, given
// once when the broker starts: values that do not change, and the few
// interfaces through which it reads what does (the metadata image, the
// configs) or acts outside itself (the controller, the other brokers).
type Config struct {
	NodeID int32
	Log    *slog.Logger // the broker's: replication's lines are the broker's
	// Loops counts the goroutines replication starts (fetchers, ISR
	// changes): the broker's Close waits for them once it has canceled
	// the context given to New.
	Loops  *sync.WaitGroup
	Engine *engine.Engine // the partitions, whose high watermarks are checkpointed
	// Controller takes the ISR changes of the partitions this broker
	// leads.
	Controller Controller
	// Session is this broker's registration, whose epoch its fetches
	// and ISR changes carry; nil for a standalone broker, which
	// replicates nothing.
	Session Session
	// Images is the broker's applied metadata image: the one its
	// requests are served from.
	Images Images
	// Peers is how a follower reaches the leaders it fetches from.
	Peers Peers
	// Layers resolves the configs of topic t (nil: the broker's own)
	// over the broker configs of img, as the broker's DescribeConfigs
	// does: min.insync.replicas and the replication throttle rates.
	Layers func(img *metadata.Image, t *metadata.Topic) config.Layers

	ReplicaLagMax      time.Duration // replica.lag.time.max.ms
	FetchWait          time.Duration // replica.fetch.wait.max.ms
	FetchMaxBytes      int32         // replica.fetch.max.bytes
	FetchResponseBytes int32         // replica.fetch.response.max.bytes

	// Now is the clock of replication's decisions: when a follower was
	// last caught up, so when it leaves the ISR, and what the fetchers'
	// throttles let through. nil is time.Now; tests move a fake one.
	Now func() time.Time

	// ThrottledFollower and ThrottledMirror count the bytes this
	// broker's fetchers replicate under the follower and the mirror
	// throttle (tandem_server_replication_throttled_bytes_total); the
	// leader's side is counted where the Fetch handler answers.
	ThrottledFollower, ThrottledMirror *metrics.Counter
}

// Controller is the part of the metadata controller replication uses
// (*raftmeta.Controller).
type Controller interface {
	// AlterPartition asks for a new ISR of a partition this broker
	// leads.
	AlterPartition(ctx context.Context, req raftmeta.AlterPartitionRequest) (metadata.Partition, error)
	// Image is the controller's latest image, which may be ahead of the
	// applied one: min.insync.replicas is read over its broker configs.
	Image() *metadata.Image
}

// Session is this broker's registration with the controller
// (*raftmeta.Session).
type Session interface {
	Epoch() int64
}

// Images is the broker's applied metadata image.
type Images interface {
	// Applied returns the last image the broker applied (every
	// partition it names exists in the engine) and a channel closed when
	// a newer one is applied.
	Applied() (*metadata.Image, <-chan struct{})
}

// Peers is the broker's side of talking to other brokers: its
// inter-broker client settings, and its record of the peers it fails to
// reach (which its health report shows).
type Peers interface {
	// Client is a client of the broker at addr, with the inter-broker
	// listener's security.
	Client(addr string) (*kgo.Client, error)
	// OK records that requests to peer succeed again.
	OK(peer int32)
	// Failed records (and logs, once per kind) a failed request to peer.
	Failed(peer int32, addr string, err error)
	// AuthFailure reports whether err is a peer refusing this broker's
	// credentials, which stays so until an operator acts.
	AuthFailure(err error) bool
}

type partKey struct {
	id engine.TopicID
	p  int32
}

// Manager is a broker's replication: the partitions it leads with
// followers, and the fetchers that copy the partitions it follows.
type Manager struct {
	ctx      context.Context // the broker's: canceled by its Close
	cfg      Config
	mu       sync.Mutex
	led      map[partKey]*ledPartition
	fetchers map[int32]*fetcher // by leader

	// seq stamps replica fetches in the order their reads start, so
	// that AwaitISRTruncated can tell a fetch that saw a truncation from
	// one that did not.
	seq atomic.Int64
	// mirrorQuota is mirror.replication.throttled.rate and followerQuota
	// follower.replication.throttled.rate, each shared by the fetchers
	// (throttle.go).
	mirrorQuota, followerQuota Quota
	// leaderQuota is leader.replication.throttled.rate, shared by the
	// fetches of the followers it throttles (the broker's Fetch handler).
	leaderQuota Quota
}

// New returns the replication of a broker that runs until ctx ends.
func New(ctx context.Context, cfg Config) *Manager {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Manager{ctx: ctx, cfg: cfg, led: map[partKey]*ledPartition{}, fetchers: map[int32]*fetcher{}}
}

// image is the broker's applied image.
func (m *Manager) image() *metadata.Image {
	img, _ := m.cfg.Images.Applied()
	return img
}

// Replicate starts or stops leading or following partition p of t as
// this broker's role in it says. A partition with one replica is not
// replicated: its high watermark follows its durable end.
func (m *Manager) Replicate(t *metadata.Topic, p int32, part metadata.Partition, ep *engine.Partition, img *metadata.Image) {
	if m.cfg.Session == nil {
		return // standalone: every partition has one replica
	}
	k := partKey{t.ID, p}
	replicated := len(part.Replicas) > 1
	if err := ep.SetReplicated(replicated); err != nil {
		m.cfg.Log.Error("replication state", "topic", t.Name, "partition", p, "err", err)
	}
	switch {
	case part.Leader == m.cfg.NodeID:
		m.unfollow(k)
		if replicated {
			m.lead(t, p, part, ep)
		} else {
			m.unlead(t.ID, p)
		}
	case part.Leader >= 0:
		m.unlead(t.ID, p)
		m.follow(t, p, part, ep, img)
	default:
		m.unlead(t.ID, p)
		m.unfollow(k)
	}
}

// Drop stops leading and following partition p of topic id: the topic
// is deleted or the partition reassigned away from this broker.
func (m *Manager) Drop(id engine.TopicID, p int32) {
	m.unlead(id, p)
	m.unfollow(partKey{id, p})
}
