package netns

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// Ports every broker binds on its host's address: each host has an
// address of its own, so every cluster uses the same ones.
const (
	KafkaPort      = "9092"
	ControllerPort = "9093"
	HTTPPort       = "9644"
)

// ClusterDefaults make failures show within seconds, as
// tandemtest.StartProcCluster's do; props override them.
var ClusterDefaults = map[string]string{
	"broker.session.timeout.ms":        "3000",
	"broker.heartbeat.interval.ms":     "500",
	"replica.lag.time.max.ms":          "5000",
	"default.replication.factor":       "3",
	"min.insync.replicas":              "2",
	"group.initial.rebalance.delay.ms": "100",
	"transaction.max.timeout.ms":       "60000",
}

// Cluster starts a cluster of `tandem serve` processes, node i+1 in the
// namespace of hosts[i], the first voters of them voters of the metadata
// quorum and the others brokers only; it returns once every one serves.
// The processes are killed at the end of the test, before the namespaces
// are removed.
func (nt *Net) Cluster(t testing.TB, hosts []int, voters int, props map[string]string) *tandemtest.ProcCluster {
	t.Helper()
	all := maps.Clone(ClusterDefaults)
	maps.Copy(all, props)
	var vs []string
	for i, h := range hosts[:voters] {
		vs = append(vs, fmt.Sprintf("%d@%s:%s", i+1, nt.IP(h), ControllerPort))
	}
	all["controller.quorum.voters"] = strings.Join(vs, ",")
	var specs []tandemtest.ProcSpec
	for i, h := range hosts {
		ip := nt.IP(h)
		args := []string{"--node-id", fmt.Sprint(i + 1), "--listen", ip + ":" + KafkaPort, "--http", ip + ":" + HTTPPort}
		if lvl := os.Getenv("TANDEM_NETNS_LOG_LEVEL"); lvl != "" {
			// What the brokers' debug logs tell (the mirror's source
			// loop and fetchers log their errors at debug) is wanted when
			// a flaky failure is chased; the default keeps the logs short.
			args = append(args, "--log-level", lvl)
		}
		for _, k := range slices.Sorted(maps.Keys(all)) {
			args = append(args, "--set", k+"="+all[k])
		}
		specs = append(specs, tandemtest.ProcSpec{Args: args, Wrap: nt.Exec(h)})
	}
	return tandemtest.StartProcs(t, specs)
}
