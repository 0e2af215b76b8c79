package netns_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/checker"
	"github.com/tandem-kafka/tandem/testing/netns"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// settleBound is how long a cluster may take, after a cut heals, until
// `tandem cluster health` says healthy (every partition led, every ISR
// full, no broker fenced or unanswering, a controller) and every broker
// names the same leader and epoch for every partition: the session
// timeout (3 s) and replica.lag.time.max.ms (5 s) of the tests'
// clusters, a rejoin, and margin for a machine the tests share.
const settleBound = 30 * time.Second

// cluster is a cluster in namespaces and what the tests ask of it.
type cluster struct {
	t     *testing.T
	name  string
	nt    *netns.Net
	c     *tandemtest.ProcCluster
	hosts []int // node i+1 runs on hosts[i]
	bin   string
}

func startCluster(t *testing.T, nt *netns.Net, name string, hosts []int, voters int) *cluster {
	c := &cluster{t: t, name: name, nt: nt, hosts: hosts, bin: tandemtest.BuildBinary(t)}
	c.c = nt.Cluster(t, hosts, voters, nil)
	return c
}

// host is the host node id runs on.
func (c *cluster) host(id int32) int { return c.hosts[id-1] }

// hostsOf are the hosts of nodes ids.
func (c *cluster) hostsOf(ids ...int32) []int {
	var out []int
	for _, id := range ids {
		out = append(out, c.host(id))
	}
	return out
}

func (c *cluster) seeds() kgo.Opt { return kgo.SeedBrokers(c.c.Addrs()...) }

// createTopic creates a topic of replication factor 3 and
// min.insync.replicas 2, with the given replica assignment (each
// partition's preferred leader first) or, if nil, n partitions placed
// by the controller.
func (c *cluster) createTopic(ctx context.Context, topic string, n int32, assign [][]int32) {
	c.t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, n, 3
	if assign != nil {
		rt.NumPartitions, rt.ReplicationFactor = -1, -1
		for i, rs := range assign {
			ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			ra.Partition, ra.Replicas = int32(i), rs
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
		}
	}
	cfg := kmsg.NewCreateTopicsRequestTopicConfig()
	cfg.Name, cfg.Value = "min.insync.replicas", kmsg.StringPtr("2")
	rt.Configs = append(rt.Configs, cfg)
	req.Topics = append(req.Topics, rt)
	cl := tandemtest.Client(c.t, c.c.Addrs()[0], c.seeds())
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		c.t.Fatalf("%s: create %s: %v", c.name, topic, err)
	}
	c.c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool {
		for _, p := range ps {
			if p.Leader < 0 || len(p.ISR) != 3 {
				return false
			}
		}
		return len(ps) > 0
	})
}

// leader is the node that leads topic's partition p, as the cluster says.
func (c *cluster) leader(topic string, p int32) int32 {
	return c.c.Partitions(topic, func(ps map[int32]tandemtest.PartitionState) bool { return ps[p].Leader > 0 })[p].Leader
}

// controller is the active controller, as the cluster says.
func (c *cluster) controller(ctx context.Context) int32 {
	c.t.Helper()
	id, err := controllerOf(ctx, tandemtest.Client(c.t, c.c.Addrs()[0], c.seeds()), time.Minute)
	if err != nil {
		c.t.Fatalf("%s: %v", c.name, err)
	}
	return id
}

// controllerOf asks cl's brokers for the active controller until one
// names it, for at most within. Each try is a Metadata request of its
// own, to the next broker: kadm's BrokerMetadata answers from the
// client's cache once the client knows any broker, so the first answer
// it got, from a broker that knew no controller at the time (a voter
// still electing just after a cut healed), would be every answer of the
// wait.
func controllerOf(ctx context.Context, cl *kgo.Client, within time.Duration) (int32, error) {
	var last string
	for deadline := time.Now().Add(within); ; time.Sleep(200 * time.Millisecond) {
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{} // none: brokers and controller only
		resp, err := req.RequestWith(ctx, cl)
		switch {
		case err != nil:
			last = err.Error()
		case resp.ControllerID > 0:
			return resp.ControllerID, nil
		default:
			last = fmt.Sprintf("a broker answered controller %d", resp.ControllerID)
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("no controller known within %v: %s", within, last)
		}
	}
}

// health runs `tandem cluster health --json` against the cluster.
func (c *cluster) health(ctx context.Context) (bool, []string, error) {
	hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(hctx, c.bin, "cluster", "health", "--json", "--bootstrap-server", strings.Join(c.c.Addrs(), ",")).Output()
	var s struct {
		Healthy  bool     `json:"healthy"`
		Problems []string `json:"problems"`
	}
	if jerr := json.Unmarshal(out, &s); jerr != nil {
		return false, nil, fmt.Errorf("tandem cluster health: %v (%v): %s", jerr, err, out)
	}
	return s.Healthy, s.Problems, nil
}

// agree reports whether every broker, asked itself, names the same
// leader, epoch and ISR for every partition of every topic.
func (c *cluster) agree(ctx context.Context) error {
	var first map[string]string
	for _, addr := range c.c.Addrs() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(time.Second))
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cl.SeedBrokers()[0].Request(rctx, kmsg.NewPtrMetadataRequest())
		cancel()
		cl.Close()
		if err != nil {
			return fmt.Errorf("broker %s: %w", addr, err)
		}
		view := map[string]string{}
		for _, t := range resp.(*kmsg.MetadataResponse).Topics {
			for _, p := range t.Partitions {
				isr := slices.Clone(p.ISR)
				slices.Sort(isr)
				view[fmt.Sprintf("%s-%d", *t.Topic, p.Partition)] = fmt.Sprintf("leader %d epoch %d isr %v", p.Leader, p.LeaderEpoch, isr)
			}
		}
		if first == nil {
			first = view
			continue
		}
		for k, v := range first {
			if view[k] != v {
				return fmt.Errorf("%s: broker %s says %q, another %q", k, addr, view[k], v)
			}
		}
	}
	return nil
}

// settle waits until the cluster is healthy and its brokers agree on
// every leader, and returns how long that took; it fails the test after
// settleBound.
func (c *cluster) settle(ctx context.Context, what string) time.Duration {
	c.t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < settleBound {
		healthy, problems, err := c.health(ctx)
		switch {
		case err != nil:
			last = err
		case !healthy:
			last = fmt.Errorf("unhealthy: %s", strings.Join(problems, "; "))
		default:
			if last = c.agree(ctx); last == nil {
				return time.Since(start)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	c.t.Fatalf("%s: %s: not settled within %v: %v", c.name, what, settleBound, last)
	return 0
}

// converge waits until every broker answers DescribeLogDirs and holds
// the same number of bytes of each partition as the other replicas, all
// that the metadata names: the followers have everything their leaders
// have.
func (c *cluster) converge(ctx context.Context) time.Duration {
	c.t.Helper()
	adm := kadm.NewClient(tandemtest.Client(c.t, c.c.Addrs()[0], c.seeds()))
	start := time.Now()
	var last error
	for time.Since(start) < settleBound {
		if last = c.sameSizes(ctx, adm); last == nil {
			return time.Since(start)
		}
		time.Sleep(250 * time.Millisecond)
	}
	c.t.Fatalf("%s: replicas not the same size within %v: %v", c.name, settleBound, last)
	return 0
}

func (c *cluster) sameSizes(ctx context.Context, adm *kadm.Client) error {
	dirs, err := adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		return err
	}
	if len(dirs) != len(c.c.Brokers) {
		return fmt.Errorf("%d of %d brokers described their log dirs", len(dirs), len(c.c.Brokers))
	}
	type tp struct {
		topic     string
		partition int32
	}
	sizes := map[tp][]int64{}
	var errs []error
	dirs.Each(func(d kadm.DescribedLogDir) {
		if d.Err != nil {
			errs = append(errs, fmt.Errorf("broker %d: %w", d.Broker, d.Err))
		}
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			sizes[tp{p.Topic, p.Partition}] = append(sizes[tp{p.Topic, p.Partition}], p.Size)
		})
	})
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	topics, err := adm.ListTopicsWithInternal(ctx)
	if err != nil {
		return err
	}
	for k, s := range sizes {
		want := len(topics[k.topic].Partitions[k.partition].Replicas)
		if len(s) != want || slices.Min(s) != slices.Max(s) {
			return fmt.Errorf("%s-%d: %d replicas of sizes %v (the metadata names %d)", k.topic, k.partition, len(s), s, want)
		}
	}
	if len(sizes) == 0 {
		return errors.New("no partitions described")
	}
	return nil
}

// logs stops every broker of the clusters and reads their data dirs,
// cluster by cluster. The brokers are frozen together first (SIGSTOP),
// then killed: a broker killed while others run would make them elect
// and write (a coordinator loading a shard writes, a mirror notes its
// source gone), and the replicas would differ by what the dead one
// never saw. The load has stopped and the replicas converged before,
// and everything was synced long before.
func logs(t *testing.T, cs ...*cluster) [][]checker.NodeLog {
	t.Helper()
	for _, c := range cs {
		for _, b := range c.c.Brokers {
			b.Pause()
		}
	}
	out := make([][]checker.NodeLog, len(cs))
	for i, c := range cs {
		for j, b := range c.c.Brokers {
			b.Kill9()
			nl, err := checker.ReadDataDir(fmt.Sprintf("%s%d", c.name, j+1), b.DataDir())
			if err != nil {
				t.Fatal(err)
			}
			out[i] = append(out[i], nl)
		}
	}
	return out
}

// envDuration reads a duration from the environment, def if unset.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}
