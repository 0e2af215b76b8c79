package tandemtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/internal/localcluster"
)

// ProcCluster is a multi-broker cluster of `tandem serve` processes:
// node IDs 1..n, every node a voter of controller.quorum.voters. Unlike
// the in-process Cluster, its brokers can be paused (SIGSTOP) and killed
// with SIGKILL.
type ProcCluster struct {
	t testing.TB
	// Brokers[i] is node i+1; each keeps its Kafka address across
	// restarts.
	Brokers []*Proc
}

// procClusterDefaults make failures show quickly; props override them.
var procClusterDefaults = map[string]string{
	"broker.session.timeout.ms":    "3000",
	"broker.heartbeat.interval.ms": "500",
	"replica.lag.time.max.ms":      "5000",
	"default.replication.factor":   "3",
}

// StartProcCluster starts n `tandem serve` processes on fresh data dirs
// with the given properties (--set) and returns once every broker serves
// (`tandem serve` is ready once it is registered and unfenced). Every
// process is killed at the end of the test. A controller port taken
// between picking and binding it restarts the whole cluster on fresh
// ports.
func StartProcCluster(t testing.TB, n int, props map[string]string) *ProcCluster {
	t.Helper()
	return StartProcClusterNodes(t, n, props, nil)
}

// StartProcClusterNodes is StartProcCluster with properties of each node
// besides: nodeProps(id), if not nil, gives node id's own (its listeners,
// say), which override props. It is called again for every start
// attempt, so that it can pick fresh ports.
func StartProcClusterNodes(t testing.TB, n int, props map[string]string, nodeProps func(id int32) map[string]string) *ProcCluster {
	t.Helper()
	bin := BuildBinary(t)
	for attempt := 1; ; attempt++ {
		c, err := startProcCluster(t, bin, n, props, nodeProps)
		if err == nil {
			return c
		}
		if !strings.Contains(err.Error(), "address already in use") || attempt == 5 {
			t.Fatal(err)
		}
		t.Logf("cluster start, attempt %d: port taken; retrying on other ports", attempt)
	}
}

func startProcCluster(t testing.TB, bin string, n int, props map[string]string, nodeProps func(int32) map[string]string) (*ProcCluster, error) {
	all := maps.Clone(procClusterDefaults)
	maps.Copy(all, props)
	all["controller.quorum.voters"] = localcluster.Voters(pickAddrs(t, n))
	c := &ProcCluster{t: t}
	for i := range n {
		node := maps.Clone(all)
		if nodeProps != nil {
			maps.Copy(node, nodeProps(int32(i+1)))
		}
		extra := []string{"--node-id", fmt.Sprint(i + 1)}
		for _, k := range slices.Sorted(maps.Keys(node)) {
			extra = append(extra, "--set", k+"="+node[k])
		}
		p := &Proc{t: t, bin: bin, dataDir: t.TempDir(), extra: extra, dir: t.TempDir()}
		c.Brokers = append(c.Brokers, p)
	}
	if err := startAll(c.Brokers); err != nil {
		return nil, err
	}
	for _, p := range c.Brokers {
		t.Cleanup(p.cleanup)
	}
	return c, nil
}

// startAll launches the processes together, since the nodes of a
// cluster wait for each other, and waits until each serves. On an error
// every process is stopped and its log shown.
func startAll(procs []*Proc) error {
	var err error
	for _, p := range procs {
		if e := p.launch(); e != nil {
			err = errors.Join(err, e)
		}
	}
	errs := make(chan error, len(procs))
	for _, p := range procs {
		go func() {
			if p.proc == nil {
				errs <- nil
				return
			}
			errs <- p.await()
		}()
	}
	for range procs {
		err = errors.Join(err, <-errs)
	}
	if err != nil {
		for _, p := range procs {
			p.cleanup()
		}
	}
	return err
}

// ProcSpec is one `tandem serve` process of StartProcs.
type ProcSpec struct {
	// Args are serve's flags after the defaults (--data-dir, --listen
	// 127.0.0.1:0, --http 127.0.0.1:0, --ready-file), which they may
	// override: --node-id, --listen, --set key=value.
	Args []string
	// Wrap, if not empty, is a command that runs the binary (its path
	// and the flags are appended): `ip netns exec NAME` starts it in a
	// network namespace. It must exec the binary in its own process.
	Wrap []string
}

// StartProcs starts a `tandem serve` process per spec, each on a fresh
// data dir, together, and returns once every one serves (answers
// ApiVersions at the address of its ready file), as a cluster whose
// Brokers[i] is specs[i] (node i+1, for Broker, when the specs' node IDs
// are 1..n). Every process is killed at the end of the test. Unlike
// StartProcCluster it sets nothing of a cluster: the specs carry
// controller.quorum.voters and the listeners.
func StartProcs(t testing.TB, specs []ProcSpec) *ProcCluster {
	t.Helper()
	bin := BuildBinary(t)
	procs := make([]*Proc, len(specs))
	for i, s := range specs {
		procs[i] = &Proc{t: t, bin: bin, dataDir: t.TempDir(), extra: s.Args, wrap: s.Wrap, dir: t.TempDir()}
	}
	if err := startAll(procs); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		t.Cleanup(p.cleanup)
	}
	return &ProcCluster{t: t, Brokers: procs}
}

// Addrs are the brokers' Kafka addresses, as seed brokers.
func (c *ProcCluster) Addrs() []string {
	out := make([]string, len(c.Brokers))
	for i, p := range c.Brokers {
		out[i] = p.Addr
	}
	return out
}

// Broker returns node id.
func (c *ProcCluster) Broker(id int32) *Proc { return c.Brokers[id-1] }

// PartitionState is a partition as the cluster's Metadata answers it.
type PartitionState struct {
	Leader   int32
	Replicas []int32
	ISR      []int32
	Offline  []int32
}

// Partitions asks the brokers in seeds (node IDs; all when empty) for the
// topic's partitions until one answers, waiting up to a minute for cond
// to hold for what it answers.
func (c *ProcCluster) Partitions(topic string, cond func(map[int32]PartitionState) bool, seeds ...int32) map[int32]PartitionState {
	c.t.Helper()
	if len(seeds) == 0 {
		for i := range c.Brokers {
			seeds = append(seeds, int32(i+1))
		}
	}
	var addrs []string
	for _, id := range seeds {
		addrs = append(addrs, c.Broker(id).Addr)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RequestTimeoutOverhead(2*time.Second), kgo.RetryTimeout(3*time.Second))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(time.Minute)
	var last map[int32]PartitionState
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		md, err := adm.Metadata(ctx, topic)
		cancel()
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil {
				last = map[int32]PartitionState{}
				for _, p := range td.Partitions {
					last[p.Partition] = PartitionState{Leader: p.Leader, Replicas: sorted(p.Replicas), ISR: sorted(p.ISR), Offline: sorted(p.OfflineReplicas)}
				}
				if cond(last) {
					return last
				}
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: condition not met within a minute; last seen %+v (err %v)", topic, last, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sorted(s []int32) []int32 {
	s = slices.Clone(s)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s
}
