package integration

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestMetricsPromtool scrapes /metrics of a `tandem serve` that mirrors a
// topic from another one and checks it with Prometheus' own tool
// (`promtool check metrics`: it parses the text as the scraper does and
// lints HELP, TYPE, names, units and label names). Every family it holds
// is the one docs/metrics.md lists, with the same type and labels, and
// docs/metrics.md lists nothing else.
func TestMetricsPromtool(t *testing.T) {
	bin := promtool(t)
	props := []string{"--set", "mirror.topic.num.partitions=2", "--set", "offsets.topic.num.partitions=2",
		"--set", "transaction.state.log.num.partitions=2", "--set", "mirror.metadata.refresh.interval.ms=500"}
	src := tandemtest.StartProcess(t, t.TempDir(), props...)
	dst := tandemtest.StartProcess(t, t.TempDir(), props...)
	tandemtest.CreateTopic(t, src.Addr, "orders", 2)
	ends := produceN(t, src.Addr, "orders", 2, 50)
	if code, out, errOut := runMirrors(t, "--bootstrap-server", dst.Addr, "--create", "--add", "--mirror", "m1",
		"--source-bootstrap", src.Addr, "--topic", "orders"); code != 0 {
		t.Fatalf("tandem mirrors --create --add: exit %d\n%s%s", code, out, errOut)
	}
	cl := tandemtest.Client(t, dst.Addr, admin.Opt())
	a := admin.New(cl)
	waitFor(t, 60*time.Second, "orders to be mirrored", func() bool {
		ms, err := a.DescribeMirrors(context.Background(), "m1")
		if err != nil || len(ms) != 1 || len(ms[0].Topics) != 1 {
			return false
		}
		for _, p := range ms[0].Topics[0].Partitions {
			if p.State != "MIRRORING" || p.DestinationOffset != ends[p.PartitionIndex] || p.Lag != 0 {
				return false
			}
		}
		return true
	})
	// A consumer group reading the mirror topic, so that Fetch and the
	// group's lag have their figures.
	consumer := tandemtest.Client(t, dst.Addr, kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("billing"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for n := 0; n < 100; {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume the mirror topic: %v", err)
		}
		n += fs.NumRecords()
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	text := scrape(t, dst.HTTPAddr)
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	for _, want := range []string{
		`tandem_mirror_lag_records\{mirror="m1",topic="orders",source_topic="orders",partition="1",client_id="MirrorFetcherThread-1-\d+-m1"\} 0`,
		`tandem_mirror_partitions\{mirror="m1",state="MIRRORING"\} 2`,
		`tandem_mirror_max_lag_records\{mirror="m1"\} 0`,
		`tandem_mirror_destination_partitions\{mirror="m1",health="ok"\} 2`,
		`tandem_mirror_destination_partitions\{mirror="m1",health="no_leader"\} 0`,
		`tandem_server_requests_total\{api="AddTopicsToMirror"\} [1-9]\d*`,
		`tandem_group_lag_records\{group="billing",topic="orders",partition="1"\} 0`,
		`tandem_controller_offline_partitions 0`,
	} {
		if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(text) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// The families scraped are the families documented.
	scraped := families(text)
	documented := documentedFamilies(t, "../../docs/metrics.md")
	for _, name := range slices.Sorted(maps.Keys(scraped)) {
		got, doc := scraped[name], documented[name]
		switch {
		case doc == nil:
			t.Errorf("docs/metrics.md does not list %s (%s; labels %v)", name, got.typ, got.labels)
		case doc.typ != got.typ || !slices.Equal(doc.labels, got.labels):
			t.Errorf("%s: docs/metrics.md says %s with labels %v, /metrics has %s with %v", name, doc.typ, doc.labels, got.typ, got.labels)
		}
	}
	for name := range documented {
		if scraped[name] == nil {
			t.Errorf("docs/metrics.md lists %s, which /metrics of a mirroring broker does not have", name)
		}
	}
}

func scrape(t *testing.T, httpAddr string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(body)
}

// family is what the exposition or the docs say of a metric family.
type family struct {
	typ    string
	labels []string // sorted; le and quantile left out
}

var (
	typeLine  = regexp.MustCompile(`^# TYPE (\S+) (\S+)$`)
	labelName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
)

// families reads the TYPE lines of an exposition and the label names of
// each family's samples.
func families(text string) map[string]*family {
	out := map[string]*family{}
	var cur *family
	for l := range strings.Lines(text) {
		l = strings.TrimSuffix(l, "\n")
		if m := typeLine.FindStringSubmatch(l); m != nil {
			cur = &family{typ: m[2]}
			out[m[1]] = cur
			continue
		}
		if cur == nil || strings.HasPrefix(l, "#") {
			continue
		}
		_, labels, _ := strings.Cut(l, "{")
		labels, _, _ = strings.Cut(labels, "}")
		for _, m := range labelName.FindAllStringSubmatch(labels, -1) {
			if n := m[1]; n != "le" && n != "quantile" && !slices.Contains(cur.labels, n) {
				cur.labels = append(cur.labels, n)
			}
		}
		slices.Sort(cur.labels)
	}
	return out
}

// documentedFamilies reads the tables of docs/metrics.md whose rows start
// with a metric name in backquotes: | `name` | type | labels | ... |.
func documentedFamilies(t *testing.T, path string) map[string]*family {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| (counter|gauge|histogram|summary) \\|([^|]*)\\|")
	out := map[string]*family{}
	for l := range strings.Lines(string(data)) {
		m := row.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if out[m[1]] != nil {
			t.Errorf("docs/metrics.md lists %s twice", m[1])
		}
		f := &family{typ: m[2]}
		for _, n := range strings.Split(m[3], ",") {
			if n = strings.Trim(strings.TrimSpace(n), "`"); n != "" {
				f.labels = append(f.labels, n)
			}
		}
		slices.Sort(f.labels)
		out[m[1]] = f
	}
	if len(out) == 0 {
		t.Fatalf("no metric rows in %s", path)
	}
	return out
}
