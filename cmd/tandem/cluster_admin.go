package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/tandem-kafka/tandem/cmd/tandem/internal/mirrorcmd"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// clusterState is what `tandem cluster describe --json` and `tandem
// cluster health --json` print: the brokers, the controller, the
// partitions that are offline, under-replicated or under their minimum
// ISR, the mirrors in trouble, and each problem in words.
type clusterState struct {
	ClusterID       string           `json:"cluster_id"`
	Controller      int32            `json:"controller"` // -1: none known
	Brokers         []clusterBroker  `json:"brokers"`
	Topics          int              `json:"topics"`
	Partitions      int              `json:"partitions"`
	Offline         []partitionState `json:"offline_partitions"`
	UnderReplicated []partitionState `json:"under_replicated_partitions"`
	UnderMinISR     []partitionState `json:"under_min_isr_partitions"`
	MirrorProblems  []string         `json:"mirror_problems"`
	Problems        []string         `json:"problems"`
	Healthy         bool             `json:"healthy"`
}

type clusterBroker struct {
	ID         int32   `json:"id"`
	Host       string  `json:"host"`
	Port       int32   `json:"port"`
	Rack       *string `json:"rack"`
	Fenced     bool    `json:"fenced"`    // registered, but not heartbeating: its partitions moved away
	Reachable  bool    `json:"reachable"` // answered this command just now
	Error      string  `json:"error,omitzero"`
	Controller bool    `json:"controller"`
}

type partitionState struct {
	Topic       string  `json:"topic"`
	Partition   int32   `json:"partition"`
	Leader      int32   `json:"leader"`
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
	MinISR      *int    `json:"min_isr"` // null: not known
	OfflineReps []int32 `json:"offline_replicas"`
}

// describeClusterState asks the cluster (DescribeCluster with fenced
// brokers, each broker's ApiVersions, Metadata, the topics'
// min.insync.replicas and the mirrors) what an operator checks first.
func describeClusterState(ctx context.Context, cl *kgo.Client, adm *kadm.Client) (*clusterState, error) {
	s := &clusterState{Controller: -1, Brokers: []clusterBroker{}, Offline: []partitionState{}, UnderReplicated: []partitionState{},
		UnderMinISR: []partitionState{}, MirrorProblems: []string{}, Problems: []string{}}
	dc := kmsg.NewPtrDescribeClusterRequest()
	dc.IncludeFencedBrokers = true
	resp, err := dc.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("DescribeCluster: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("DescribeCluster: %w", cli.KafkaError(err, deref(resp.ErrorMessage)))
	}
	s.ClusterID, s.Controller = resp.ClusterID, resp.ControllerID
	for _, b := range resp.Brokers {
		s.Brokers = append(s.Brokers, clusterBroker{ID: b.NodeID, Host: b.Host, Port: b.Port, Rack: b.Rack, Fenced: b.IsFenced, Controller: b.NodeID == resp.ControllerID})
	}
	slices.SortFunc(s.Brokers, func(a, b clusterBroker) int { return int(a.ID - b.ID) })
	// Each broker answers for itself: a dead one not yet fenced is listed
	// as live by the others.
	var wg sync.WaitGroup
	for i := range s.Brokers {
		b := &s.Brokers[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := cl.Broker(int(b.ID)).RetriableRequest(bctx, kmsg.NewPtrApiVersionsRequest())
			b.Reachable = err == nil
			if err != nil {
				b.Error = cli.InWords(err.Error(), err)
			}
		}()
	}
	wg.Wait()
	if s.Controller < 0 {
		s.Problems = append(s.Problems, "no active controller: metadata cannot change (topics, ISR, leaders)")
	}
	for _, b := range s.Brokers {
		addr := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		switch {
		case b.Fenced:
			s.Problems = append(s.Problems, fmt.Sprintf("broker %d (%s) is fenced: it stopped heartbeating to the controller", b.ID, addr))
		case !b.Reachable:
			s.Problems = append(s.Problems, fmt.Sprintf("broker %d (%s) does not answer: %s", b.ID, addr, b.Error))
		}
	}

	details, err := adm.ListTopicsWithInternal(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the metadata: %w", err)
	}
	minISR := map[string]int{}
	if names := details.Names(); len(names) > 0 {
		rcs, _ := adm.DescribeTopicConfigs(ctx, names...)
		for _, rc := range rcs {
			for _, cf := range rc.Configs {
				if cf.Key == "min.insync.replicas" && cf.Value != nil {
					if n, err := strconv.Atoi(*cf.Value); err == nil {
						minISR[rc.Name] = n
					}
				}
			}
		}
	}
	s.Topics = len(details)
	for _, d := range details.Sorted() {
		for _, p := range d.Partitions.Sorted() {
			s.Partitions++
			ps := partitionState{Topic: d.Topic, Partition: p.Partition, Leader: p.Leader, Replicas: nonNil(p.Replicas), ISR: nonNil(p.ISR), OfflineReps: nonNil(p.OfflineReplicas)}
			if m, ok := minISR[d.Topic]; ok {
				ps.MinISR = &m
			}
			switch {
			case p.Leader < 0:
				s.Offline = append(s.Offline, ps)
			case len(p.ISR) < len(p.Replicas):
				s.UnderReplicated = append(s.UnderReplicated, ps)
			}
			if ps.MinISR != nil && p.Leader >= 0 && len(p.ISR) < *ps.MinISR {
				s.UnderMinISR = append(s.UnderMinISR, ps)
			}
		}
	}
	internal := map[string]bool{}
	for _, d := range details {
		internal[d.Topic] = d.IsInternal || strings.HasPrefix(d.Topic, "__")
	}
	s.Problems = append(s.Problems, partitionProblems(s, internal)...)
	s.MirrorProblems = append(s.MirrorProblems, mirrorcmd.Problems(ctx, cl)...)
	s.Problems = append(s.Problems, s.MirrorProblems...)
	s.Healthy = len(s.Problems) == 0
	return s, nil
}

// partitionProblems says in words what is wrong with partitions: one
// line per partition of a user's topic, and one line per internal topic
// and kind of problem (one dead broker leaves dozens of
// __consumer_offsets and __mirror_state partitions under-replicated, a
// wall that hides the user's own).
func partitionProblems(s *clusterState, internal map[string]bool) []string {
	var out []string
	summary := map[string][]int32{} // "topic\x00kind" → partitions
	var order []string
	note := func(p partitionState, kind, line string) {
		if !internal[p.Topic] {
			out = append(out, line)
			return
		}
		k := p.Topic + "\x00" + kind
		if _, ok := summary[k]; !ok {
			order = append(order, k)
		}
		summary[k] = append(summary[k], p.Partition)
	}
	for _, p := range s.Offline {
		note(p, "offline (no leader)", fmt.Sprintf("partition %s/%d is offline: no leader (replicas %s, offline %s)", p.Topic, p.Partition, ids(p.Replicas), ids(p.OfflineReps)))
	}
	for _, p := range s.UnderMinISR {
		note(p, "under their minimum ISR (acks=all produce is refused)", fmt.Sprintf("partition %s/%d is under its minimum ISR: ISR %s of replicas %s, min.insync.replicas %d (acks=all produce is refused)",
			p.Topic, p.Partition, ids(p.ISR), ids(p.Replicas), *p.MinISR))
	}
	for _, p := range s.UnderReplicated {
		if !slices.ContainsFunc(s.UnderMinISR, func(q partitionState) bool { return q.Topic == p.Topic && q.Partition == p.Partition }) {
			note(p, "under-replicated", fmt.Sprintf("partition %s/%d is under-replicated: ISR %s of replicas %s", p.Topic, p.Partition, ids(p.ISR), ids(p.Replicas)))
		}
	}
	for _, k := range order {
		topic, kind, _ := strings.Cut(k, "\x00")
		out = append(out, fmt.Sprintf("internal topic %s: %d partition(s) %s: %s", topic, len(summary[k]), kind, somePartitions(summary[k])))
	}
	return out
}

// somePartitions lists partition numbers, the first eight of them if
// there are more.
func somePartitions(ps []int32) string {
	var names []string
	for i, p := range ps {
		if i == 8 {
			names = append(names, fmt.Sprintf("and %d more", len(ps)-8))
			break
		}
		names = append(names, fmt.Sprint(p))
	}
	return strings.Join(names, ", ")
}

func printClusterState(w io.Writer, s *clusterState) {
	controller := "none"
	if s.Controller >= 0 {
		controller = fmt.Sprint(s.Controller)
	}
	fmt.Fprintf(w, "Cluster: %s  Controller: %s  Brokers: %d  Topics: %d  Partitions: %d\n", s.ClusterID, controller, len(s.Brokers), s.Topics, s.Partitions)
	t := cli.NewTable(w, "BROKER", "ADDRESS", "RACK", "STATE", "CONTROLLER")
	for _, b := range s.Brokers {
		state := "live"
		switch {
		case b.Fenced:
			state = "fenced"
		case !b.Reachable:
			state = "not answering"
		}
		ctrl := ""
		if b.Controller {
			ctrl = "yes"
		}
		t.Row(b.ID, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), strOrDash(b.Rack), state, ctrl)
	}
	t.Flush()
	fmt.Fprintf(w, "Offline partitions: %d  Under-replicated: %d  Under min ISR: %d  Mirrors in trouble: %d\n",
		len(s.Offline), len(s.UnderReplicated), len(s.UnderMinISR), len(s.MirrorProblems))
}

const clusterDescribeDoc = `Describes a running cluster: its ID, the controller, each broker (live,
fenced, or not answering this command), and how many partitions are
offline, under-replicated or under their minimum ISR, and how many
mirrors are in trouble; then each problem, in words.

Usage: tandem cluster describe [--bootstrap-server HOST:PORT,...] [--json]
`

const clusterHealthDoc = `Checks a running cluster, for scripts: prints "healthy", or each problem
(a broker fenced or not answering, no controller, a partition offline,
under-replicated or under its minimum ISR, a mirror FAILED or unable to
copy), and exits 1 when there is one.

Usage: tandem cluster health [--bootstrap-server HOST:PORT,...] [--json]

Exit status: 0 healthy, 1 unhealthy or unreachable, 2 a wrong command line.
`

func clusterDescribe(args []string, stdout, stderr io.Writer, health bool) int {
	name, doc := "cluster describe", clusterDescribeDoc
	if health {
		name, doc = "cluster health", clusterHealthDoc
	}
	c := cli.NewAdminCmd(name, doc, true)
	unhealthy := false
	code := c.Run(args, stdout, stderr, adminTimeout, nil, func(ctx context.Context, cl *kgo.Client, adm *kadm.Client) error {
		s, err := describeClusterState(ctx, cl, adm)
		if err != nil {
			return err
		}
		unhealthy = !s.Healthy
		if c.AsJSON {
			return cli.PrintJSON(stdout, s)
		}
		if !health {
			printClusterState(stdout, s)
		}
		if s.Healthy {
			fmt.Fprintln(stdout, "healthy")
		} else {
			fmt.Fprintf(stdout, "unhealthy: %d problem(s)\n", len(s.Problems))
			for _, p := range s.Problems {
				fmt.Fprintln(stdout, "  "+p)
			}
		}
		return nil
	}, mirrorcmd.ClientOpts()...)
	if code == 0 && unhealthy && health {
		return 1
	}
	return code
}

// clusterVerb dispatches `tandem cluster describe|health|restart`; ok is
// false for a plain `tandem cluster [flags]`, which starts a cluster.
func clusterVerb(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "describe":
		return clusterDescribe(args[1:], stdout, stderr, false), true
	case "health":
		return clusterDescribe(args[1:], stdout, stderr, true), true
	case "restart":
		return clusterRestart(args[1:], stdout, stderr), true
	}
	if !strings.HasPrefix(args[0], "-") {
		return cli.Exit(stderr, "cluster", cli.UsageErrorf("unknown command %q: tandem cluster [flags] starts a cluster; tandem cluster describe, health or restart N looks at or acts on one", args[0])), true
	}
	return 0, false
}
