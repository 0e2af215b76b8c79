package tandemtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem"
	"github.com/tandem-kafka/tandem/internal/localcluster"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server"
)

// Cluster is a multi-broker Tandem cluster in this process: every broker
// is a voter of the metadata quorum (controller.quorum.voters), listens
// on its own 127.0.0.1 ports, and reaches the others through a network
// the test can cut (Partition, Heal).
type Cluster struct {
	t       testing.TB
	props   map[string]string
	net     *network
	Brokers []*ClusterBroker
}

// ClusterBroker is one broker of a Cluster. Its addresses stay the same
// across Stop, Kill and Restart.
type ClusterBroker struct {
	c    *Cluster
	ID   int32
	Dir  string
	Addr string // the Kafka listener
	// ControllerAddr is its controller.quorum.voters entry.
	ControllerAddr string
	// Props override the cluster's properties for this broker from its
	// next start (Restart) on.
	Props map[string]string

	mu sync.Mutex
	b  *server.Broker // nil while stopped
}

// clusterDefaults make failures show quickly in tests; props override
// them.
var clusterDefaults = map[string]string{
	"broker.session.timeout.ms":    "4000",
	"broker.heartbeat.interval.ms": "500",
	"replica.lag.time.max.ms":      "5000",
	"default.replication.factor":   "3",
}

// StartCluster starts n brokers (node IDs 1..n) with the plugins of
// `tandem serve` and the given properties, each on a fresh data dir, and
// returns once every broker is registered and unfenced. Every broker is
// closed at the end of the test. A property given as "" is left unset
// (the broker's own default, where clusterDefaults set one).
//
// A "listeners" property names the protocol of the one Kafka listener
// (e.g. "SASL_PLAINTEXT://127.0.0.1:0"): each broker gets it on its own
// address. The addresses are picked free and closed again before the
// brokers bind them, so a parallel test may take one in between: the
// whole start is then retried on fresh addresses and data dirs.
func StartCluster(t testing.TB, n int, props map[string]string) *Cluster {
	t.Helper()
	return StartClusterNodes(t, n, props, nil)
}

// StartClusterNodes is StartCluster with properties of each node's own
// (nodeProps, nil for none) over the cluster's, as ClusterBroker.Props.
// A "listeners" property with several listeners gets the broker's
// address on its first (the one the cluster's brokers and tests use);
// the others keep theirs (another listener, advertised elsewhere, say
// through a testing/faultproxy).
func StartClusterNodes(t testing.TB, n int, props map[string]string, nodeProps func(id int32) map[string]string) *Cluster {
	t.Helper()
	var err error
	for attempt := 1; ; attempt++ {
		var c *Cluster
		if c, err = startCluster(t, n, props, nodeProps); err == nil {
			return c
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 5 {
			t.Fatal(err)
		}
		t.Logf("cluster start, attempt %d: %v; retrying on other ports", attempt, err)
	}
}

func startCluster(t testing.TB, n int, props map[string]string, nodeProps func(int32) map[string]string) (*Cluster, error) {
	t.Helper()
	c := &Cluster{t: t, props: maps.Clone(clusterDefaults), net: newNetwork()}
	maps.Copy(c.props, props)
	maps.DeleteFunc(c.props, func(_, v string) bool { return v == "" }) // unset: the broker's default
	ctrl := pickAddrs(t, n)
	kafka := pickAddrs(t, n)
	for i := range n {
		c.net.own(ctrl[i], int32(i+1))
		c.net.own(kafka[i], int32(i+1))
	}
	c.props["controller.quorum.voters"] = localcluster.Voters(ctrl)
	for i := range n {
		b := &ClusterBroker{c: c, ID: int32(i + 1), Dir: t.TempDir(), Addr: kafka[i], ControllerAddr: ctrl[i]}
		if nodeProps != nil {
			b.Props = nodeProps(b.ID)
		}
		c.Brokers = append(c.Brokers, b)
	}
	stopAll := func() {
		// All at once, as a crash: a controlled shutdown of the last
		// brokers would wait for a quorum that is gone.
		c.net.heal()
		var wg sync.WaitGroup
		for _, b := range c.Brokers {
			wg.Add(1)
			go func() { defer wg.Done(); b.stop(true) }()
		}
		wg.Wait()
	}
	errs := make(chan error, n)
	for _, b := range c.Brokers {
		go func() { errs <- b.start() }()
	}
	var err error
	for range n {
		if e := <-errs; e != nil && (err == nil || errors.Is(e, syscall.EADDRINUSE)) {
			err = e
		}
	}
	if err != nil {
		stopAll()
		return nil, err
	}
	t.Cleanup(stopAll)
	c.WaitFor("every broker unfenced", func(img *metadata.Image) bool {
		for _, b := range c.Brokers {
			if br, ok := img.Brokers[b.ID]; !ok || br.Fenced {
				return false
			}
		}
		return true
	})
	return c, nil
}

// pickAddrs is freeAddrs; a test replaces it to force a port clash.
var pickAddrs = freeAddrs

// freeAddrs reserves n loopback addresses: each was free a moment ago.
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := localcluster.FreeAddrs("127.0.0.1", n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

func (b *ClusterBroker) start() error {
	props := maps.Clone(b.c.props)
	maps.Copy(props, b.Props)
	if l := props["listeners"]; l != "" {
		first, rest, _ := strings.Cut(l, ",")
		name, _, _ := strings.Cut(first, "://")
		props["listeners"] = name + "://" + b.Addr
		if rest != "" {
			props["listeners"] += "," + rest
		}
	}
	br, err := tandem.NewBroker(server.Config{
		NodeID:  b.ID,
		DataDir: b.Dir,
		Listen:  b.Addr,
		Props:   props,
		Logger:  Logger(b.c.t).With("broker", b.ID),
		Dial:    b.c.net.dialer(b.ID),
	})
	if err != nil {
		return fmt.Errorf("broker %d: %w", b.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := br.Start(ctx); err != nil {
		return fmt.Errorf("starting broker %d: %w", b.ID, err)
	}
	b.mu.Lock()
	b.b = br
	b.mu.Unlock()
	return nil
}

// Broker is the running broker, nil while it is stopped.
func (b *ClusterBroker) Broker() *server.Broker {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b
}

func (b *ClusterBroker) stop(abort bool) {
	b.mu.Lock()
	br := b.b
	b.b = nil
	b.mu.Unlock()
	if br == nil {
		return
	}
	var err error
	if abort {
		err = br.Abort()
	} else {
		err = br.Close()
	}
	if err != nil {
		b.c.t.Errorf("closing broker %d: %v", b.ID, err)
	}
}

// Stop shuts the broker down cleanly: its leaderships move first.
func (b *ClusterBroker) Stop() { b.stop(false) }

// Kill stops the broker as a crash would for the others: no controlled
// shutdown, connections dropped at once.
func (b *ClusterBroker) Kill() { b.stop(true) }

// Restart starts a stopped broker again on its data dir and addresses
// and waits until it is unfenced.
func (b *ClusterBroker) Restart() {
	b.c.t.Helper()
	if err := b.start(); err != nil {
		b.c.t.Fatal(err)
	}
}

// Addrs are the brokers' Kafka addresses, as seed brokers.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Brokers))
	for i, b := range c.Brokers {
		out[i] = b.Addr
	}
	return out
}

// Broker returns the broker with node ID id.
func (c *Cluster) Broker(id int32) *ClusterBroker { return c.Brokers[id-1] }

// Image returns the metadata image of some running broker.
func (c *Cluster) Image() *metadata.Image {
	for _, b := range c.Brokers {
		if br := b.Broker(); br != nil {
			return br.Metadata().Image()
		}
	}
	return &metadata.Image{}
}

// WaitFor waits (up to a minute) until cond holds for the image every
// running broker has applied (what it answers clients from).
func (c *Cluster) WaitFor(what string, cond func(*metadata.Image) bool) {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, running := true, 0
		for _, b := range c.Brokers {
			if br := b.Broker(); br != nil {
				running++
				ok = ok && cond(br.AppliedImage())
			}
		}
		if ok && running > 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Leader returns the leader of a partition as the running brokers see it
// once they agree and it is live, waiting up to a minute.
func (c *Cluster) Leader(topic string, partition int32) int32 {
	c.t.Helper()
	var leader int32 = -1
	c.WaitFor(fmt.Sprintf("a leader of %s-%d", topic, partition), func(img *metadata.Image) bool {
		t := img.Topics[topic]
		if t == nil || int(partition) >= len(t.Partitions) {
			return false
		}
		l := t.Partitions[partition].Leader
		br, ok := img.Brokers[l]
		if !ok || !br.Live() || c.Broker(l).Broker() == nil {
			return false
		}
		leader = l
		return true
	})
	return leader
}

// Partition cuts the network between the brokers of different groups:
// connections between them hang (bytes are held, not lost, as TCP does
// through a partition) and new ones fail. Brokers in no group keep their
// links. Clients are not affected.
func (c *Cluster) Partition(groups ...[]int32) { c.net.partition(groups) }

// Heal restores every link.
func (c *Cluster) Heal() { c.net.heal() }

// network routes the connections brokers make to each other (the Dial
// of server.Config) through pumps it can stop.
type network struct {
	mu      sync.Mutex
	owner   map[string]int32 // address -> node
	cut     map[[2]int32]bool
	changed chan struct{} // closed and replaced when the cuts change
}

func newNetwork() *network {
	return &network{owner: map[string]int32{}, cut: map[[2]int32]bool{}, changed: make(chan struct{})}
}

func (n *network) own(addr string, node int32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.owner[addr] = node
}

func (n *network) partition(groups [][]int32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, g := range groups {
		for j, h := range groups {
			if i == j {
				continue
			}
			for _, a := range g {
				for _, b := range h {
					n.cut[[2]int32{a, b}] = true
				}
			}
		}
	}
	close(n.changed)
	n.changed = make(chan struct{})
}

func (n *network) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = map[[2]int32]bool{}
	close(n.changed)
	n.changed = make(chan struct{})
}

// blocked reports whether from and to are cut apart, and the channel
// closed when that may change.
func (n *network) blocked(from, to int32) (bool, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[[2]int32{from, to}], n.changed
}

func (n *network) dialer(from int32) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.mu.Lock()
		to, known := n.owner[addr]
		n.mu.Unlock()
		var d net.Dialer
		if !known {
			return d.DialContext(ctx, network, addr)
		}
		if cut, _ := n.blocked(from, to); cut {
			return nil, fmt.Errorf("dial %s: network partition between brokers %d and %d (test)", addr, from, to)
		}
		real, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		mine, theirs := net.Pipe()
		done := make(chan struct{})
		var once sync.Once
		closeBoth := func() { once.Do(func() { close(done); real.Close(); theirs.Close() }) }
		go n.pump(from, to, real, theirs, done, closeBoth)
		go n.pump(from, to, theirs, real, done, closeBoth)
		return mine, nil
	}
}

// pump copies src to dst while from and to are not cut apart.
func (n *network) pump(from, to int32, dst, src net.Conn, done chan struct{}, closeBoth func()) {
	defer closeBoth()
	buf := make([]byte, 64<<10)
	for {
		k, err := src.Read(buf)
		for {
			cut, changed := n.blocked(from, to)
			if !cut {
				break
			}
			select {
			case <-changed:
			case <-done:
				return
			}
		}
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
