package netns_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/testing/checker"
	"github.com/tandem-kafka/tandem/testing/netns"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// A fault cuts links of a running cluster until heal.
type fault struct {
	name string
	// cut makes the cut and says what it cut, in words.
	cut func(ctx context.Context, c *cluster) (string, error)
	// flap, if set, is the cut of a flapping fault: made and healed
	// every 1.5 s, anew each time, for the whole hold.
	flap func(ctx context.Context, c *cluster, rng *rand.Rand) (string, error)
}

const topic, txnTopic, group = "nemesis", "nemesis-txn", "nemesis-group"

// voters are the metadata quorum of the five-node cluster; 4 and 5 are
// brokers only.
var voters = []int32{1, 2, 3}

// faults are the cuts of TestPartitions, in the order it makes them.
var faults = []fault{
	{name: "leader isolated from every broker (clients still reach it)", cut: func(ctx context.Context, c *cluster) (string, error) {
		l := c.leader(topic, 0)
		return fmt.Sprintf("node %d (leads %s-0) cut from every other node", l, topic), c.nt.Isolate(c.host(l))
	}},
	{name: "leader cut from the controller quorum, not from its followers or clients", cut: func(ctx context.Context, c *cluster) (string, error) {
		// Partition 3 is placed on [4 5 1]: its preferred leader is a
		// broker that is not a voter, so that cutting it from the voters
		// leaves it its follower 5.
		l := c.leader(topic, 3)
		q := slices.DeleteFunc(slices.Clone(voters), func(v int32) bool { return v == l })
		return fmt.Sprintf("node %d (leads %s-3) cut from voters %v", l, topic, q), c.nt.Cut([]int{c.host(l)}, c.hostsOf(q...))
	}},
	{name: "active controller isolated", cut: func(ctx context.Context, c *cluster) (string, error) {
		ctl := c.controller(ctx)
		return fmt.Sprintf("controller %d cut from every other node", ctl), c.nt.Isolate(c.host(ctl))
	}},
	{name: "majority/minority split, the controller in the minority", cut: minority},
	{name: "bridge: one voter sees both sides, the sides do not see each other", cut: bridge},
	{name: "asymmetric: a leader cannot reach the controller, the controller reaches it", cut: func(ctx context.Context, c *cluster) (string, error) {
		l, ctl := c.leader(topic, 1), c.controller(ctx)
		if l == ctl {
			ctl = voters[(slices.Index(voters, l)+1)%len(voters)]
		}
		return fmt.Sprintf("node %d (leads %s-1) opens nothing to node %d; node %d's connections to it work", l, topic, ctl, ctl),
			c.nt.DropConns(c.host(l), c.host(ctl))
	}},
	{name: "flapping: a leader isolated and healed every 1.5 s", flap: func(ctx context.Context, c *cluster, rng *rand.Rand) (string, error) {
		l := c.leader(topic, int32(rng.IntN(5)))
		return fmt.Sprint(l), c.nt.Isolate(c.host(l))
	}},
}

// minority puts the active controller and one broker that is not a
// voter, leading a partition, on one side; the two other voters and
// the last broker on the other.
func minority(ctx context.Context, c *cluster) (string, error) {
	ctl := c.controller(ctx)
	small := []int32{ctl, c.leader(topic, 4)}
	if slices.Contains(voters, small[1]) {
		small[1] = 5
	}
	var big []int32
	for id := int32(1); id <= 5; id++ {
		if !slices.Contains(small, id) {
			big = append(big, id)
		}
	}
	return fmt.Sprintf("%v | %v", small, big), c.nt.Cut(c.hostsOf(small...), c.hostsOf(big...))
}

// bridge: a voter that is not the controller sees everyone; the
// controller with broker 4 and the third voter with broker 5 do not see
// each other.
func bridge(ctx context.Context, c *cluster) (string, error) {
	ctl := c.controller(ctx)
	i := slices.Index(voters, ctl)
	b, other := voters[(i+1)%3], voters[(i+2)%3]
	left, right := []int32{ctl, 4}, []int32{other, 5}
	return fmt.Sprintf("%v | %v, node %d sees both", left, right, b), c.nt.Cut(c.hostsOf(left...), c.hostsOf(right...))
}

// flapping makes f's cut and heals it every 1.5 s until hold has
// passed.
func flapping(ctx context.Context, c *cluster, f fault, rng *rand.Rand, hold time.Duration) (string, error) {
	var what []string
	for end := time.Now().Add(hold); time.Now().Before(end); {
		w, err := f.flap(ctx, c, rng)
		if err != nil {
			return "", err
		}
		what = append(what, w)
		time.Sleep(1500 * time.Millisecond)
		if err := c.nt.Heal(); err != nil {
			return "", err
		}
		time.Sleep(1500 * time.Millisecond)
	}
	return "cut in turn: " + strings.Join(what, ", "), nil
}

// TestPartitions cuts the network of a five-node cluster (nodes 1-3
// voters of the metadata quorum, 4 and 5 brokers only), each in a
// network namespace, under the mixed load of checker.Load: each fault
// of faults, held, healed, then the cluster must settle within
// settleBound. Then everything is read back: every acknowledged record
// once at its offset, every committed transaction whole and no aborted
// one, group offsets never backwards, no two leaders named for one
// partition in one epoch, and every replica the same bytes.
//
// The test command makes each fault once, held 6 s; the long run is
//
//	TANDEM_PARTITIONS=10m go test -count=1 -v -timeout 30m -run TestPartitions ./testing/netns/
//
// (faults in turn until the length has passed, each held 5 to 20 s).
func TestPartitions(t *testing.T) {
	tandemtest.Long(t)
	netns.Require(t)
	length := envDuration(t, "TANDEM_PARTITIONS", 0)
	nt := netns.New(t, 5)
	c := startCluster(t, nt, "n", []int{1, 2, 3, 4, 5}, 3)
	ctx, cancel := context.WithTimeout(context.Background(), length+10*time.Minute)
	defer cancel()
	c.createTopic(ctx, topic, 0, [][]int32{{1, 2, 3}, {2, 3, 4}, {3, 4, 5}, {4, 5, 1}, {5, 1, 2}})
	c.createTopic(ctx, txnTopic, 3, nil)

	var leaders checker.Leaders
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer leaders.Close()
	defer stopWatch()
	leaders.Watch(watchCtx, c.c.Addrs(), 200*time.Millisecond, topic, txnTopic, "__consumer_offsets", "__transaction_state")
	load := checker.StartLoad(checker.LoadConfig{Seeds: c.c.Addrs(), Topic: topic, TxnTopic: txnTopic, Group: group})
	defer load.Stop()
	if err := load.Progress(500, time.Minute); err != nil {
		t.Fatal(err)
	}

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed))
	var settled []time.Duration
	began := time.Now()
	for i := 0; i < len(faults) || time.Since(began) < length; i++ {
		f := faults[i%len(faults)]
		hold := 6 * time.Second
		if length > 0 {
			hold = time.Duration(5+rng.IntN(16)) * time.Second
		}
		d := c.nemesis(ctx, f, rng, hold, load)
		settled = append(settled, d)
	}
	stopWatch()
	if err := load.Stop(); err != nil {
		t.Errorf("load: %v", err)
	}
	c.check(ctx, load, &leaders, len(settled), settled)
}

// nemesis makes one fault, holds it, heals it, and returns how long the
// cluster took to settle.
func (c *cluster) nemesis(ctx context.Context, f fault, rng *rand.Rand, hold time.Duration, load *checker.Load) time.Duration {
	c.t.Helper()
	acked, at := load.Records.Len(), time.Now().UTC().Format("15:04:05.000")
	var what string
	var err error
	if f.flap != nil {
		what, err = flapping(ctx, c, f, rng, hold)
	} else if what, err = f.cut(ctx, c); err == nil {
		time.Sleep(hold)
	}
	if err != nil {
		c.t.Fatalf("%s: %v", f.name, err)
	}
	during := load.Records.Len() - acked
	if err := c.nt.Heal(); err != nil {
		c.t.Fatal(err)
	}
	d := c.settle(ctx, f.name)
	if err := load.Progress(200, time.Minute); err != nil {
		c.t.Fatalf("after %s: %v", f.name, err)
	}
	c.t.Logf("%s fault %q (%s) for %v: %d records acknowledged meanwhile; healed, settled in %v",
		at, f.name, what, hold, during, d.Round(10*time.Millisecond))
	return d
}

// check reads everything back once the load has stopped, and compares
// the replicas.
func (c *cluster) check(ctx context.Context, load *checker.Load, leaders *checker.Leaders, faults int, settled []time.Duration) {
	t := c.t
	read, err := checker.ReadAll(ctx, topic, c.seeds())
	if err != nil {
		t.Fatal(err)
	}
	rep := load.Records.Check(read)
	txn, err := load.Txns.Check(ctx, c.seeds())
	if err != nil {
		t.Fatal(err)
	}
	commits, fetches, backwards := load.Offsets.Report()
	answers, epochs, twoLeaders := leaders.Report()
	c.settle(ctx, "after the load")
	conv := c.converge(ctx)
	replicas := checker.CompareReplicas(logs(t, c)[0], nil)

	t.Logf("partitions: %d faults; %v; %d not acknowledged; %s", faults, rep, load.Unacked(), txn)
	t.Logf("partitions: group: %d records consumed, %d commits acknowledged, %d offset reads, %d backwards", load.Consumed(), commits, fetches, len(backwards))
	t.Logf("partitions: leaders: %d metadata answers, %d (partition, epoch) pairs, %d with two leaders", answers, epochs, len(twoLeaders))
	t.Logf("partitions: settled after each heal in %v (bound %v); replicas the same size %v after the last; replicas: %v",
		roundAll(settled), settleBound, conv.Round(10*time.Millisecond), replicas)
	if !rep.OK() {
		t.Errorf("records: %v", rep)
	}
	if !txn.OK() || !txn.Ran() {
		t.Errorf("%s", txn)
	}
	if len(backwards) > 0 || commits == 0 || load.Consumed() == 0 {
		t.Errorf("group offsets: %d commits, %d consumed; moved backwards: %s", commits, load.Consumed(), strings.Join(backwards, "; "))
	}
	if len(twoLeaders) > 0 {
		t.Errorf("two leaders in one epoch: %s", strings.Join(twoLeaders, "; "))
	}
	if len(replicas.Problems) > 0 {
		t.Errorf("replicas: %v", replicas)
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}
