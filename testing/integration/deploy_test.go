package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// deployDir holds the Grafana dashboard and the Prometheus rules.
var deployDir = filepath.Join("..", "..", "deploy")

// promtool returns the path of promtool, skipping the test without it
// unless TANDEM_REQUIRE_PROMTOOL is set (as .ci/run sets it).
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("TANDEM_REQUIRE_PROMTOOL") != "" {
			t.Fatalf("promtool is required here: %v", err)
		}
		t.Skip("promtool is not installed (Debian: apt-get install prometheus); .ci/run installs it")
	}
	return path
}

// TestAlertRules: promtool accepts deploy/prometheus/tandem-rules.yml,
// and its unit tests (tandem-rules.test.yml) show each alert firing on
// sample series and staying quiet where it must.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	dir := filepath.Join(deployDir, "prometheus")
	for _, args := range [][]string{{"check", "rules", "tandem-rules.yml"}, {"test", "rules", "tandem-rules.test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// deployMetric is a metric name in a PromQL expression of the dashboard
// or the rules (recording rules' own names have a colon: tandem:...).
var deployMetric = regexp.MustCompile(`\b(?:tandem|go|process)_[a-z0-9_]+\b`)

// deployMetrics are the metric names the dashboard and the rules use.
func deployMetrics(t *testing.T) []string {
	t.Helper()
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Definition string
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(deployDir, "grafana", "tandem.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("deploy/grafana/tandem.json: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	rules, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "tandem-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(rules), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") { // comments are not expressions
			exprs = append(exprs, line)
		}
	}
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, name := range deployMetric.FindAllString(e, -1) {
			seen[name] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// TestDeployMetricsExist scrapes /metrics of a broker that mirrors (the
// built binary) and finds every metric name the dashboard and the alert
// rules use: a renamed metric cannot leave a panel or an alert silently
// empty.
func TestDeployMetricsExist(t *testing.T) {
	names := deployMetrics(t)
	if len(names) < 10 {
		t.Fatalf("only %d metric names found in deploy/: %v", len(names), names)
	}
	src := startMirrorCluster(t, "")
	createMirrorTopic(t, src, "orders", 2)
	produceN(t, src.addr(), "orders", 2, 20)
	dst, _ := startMirroringProcess(t, src, "dr", "orders")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Produce, fetch and a group's requests, for the request families.
	tandemtest.CreateTopic(t, dst.Addr, "local", 1)
	produceN(t, dst.Addr, "local", 1, 5)
	cl := tandemtest.Client(t, dst.Addr, kgo.ConsumeTopics("local"), kgo.ConsumerGroup("g"))
	if fs := cl.PollRecords(ctx, 5); fs.Err() != nil {
		t.Fatal(fs.Err())
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}

	// Mirror partitions and the metadata sync register their families
	// once the mirror runs.
	wait.Until(t, 60*time.Second, func() error {
		have := metricNames(t, dst.HTTPAddr)
		if missing := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return have[n] }); len(missing) > 0 {
			return fmt.Errorf("/metrics of a broker that mirrors lacks metrics that deploy/ uses: %v", missing)
		}
		return nil
	})
}

// metricNames returns the names of the samples /metrics at addr answers.
func metricNames(t *testing.T, addr string) map[string]bool {
	t.Helper()
	have := map[string]bool{}
	for line := range strings.Lines(scrape(t, addr)) {
		if i := strings.IndexAny(line, "{ "); i > 0 && line[0] != '#' {
			have[line[:i]] = true
		}
	}
	return have
}
