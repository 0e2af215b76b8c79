package prom

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// lint parses text as Prometheus' scraper does and returns what
// Prometheus' linter (the one behind `promtool check metrics`) says.
func lint(t *testing.T, text string) []promlint.Problem {
	t.Helper()
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, text)
	}
	return problems
}

func TestSetWritesHelpAndType(t *testing.T) {
	s := NewSet()
	s.Describe(
		Family{"app_requests_total", Counter, "Requests served."},
		Family{"app_requests_in_flight", Gauge, "Requests being served."},
		Family{"app_request_duration_seconds", Histogram, "Time to serve a request.\nEnd to end."},
		Family{"app_bytes_total", Counter, `Bytes, a \ included.`},
	)
	// Names that VictoriaMetrics sorts between the samples of another
	// family: app_requests_total{...} after app_requests_in_flight.
	s.GetOrCreateCounter(`app_requests_total{api="Fetch"}`).Add(3)
	s.GetOrCreateCounter(`app_requests_total{api="Produce"}`).Add(2)
	s.NewGauge("app_requests_in_flight", func() float64 { return 1 })
	s.GetOrCreatePrometheusHistogram(`app_request_duration_seconds{api="Fetch"}`).Update(0.2)
	s.GetOrCreatePrometheusHistogram(`app_request_duration_seconds{api="Produce"}`).Update(0.01)
	s.NewGauge("app_bytes_total", func() float64 { return 42 }) // a cumulative count behind a callback
	var b bytes.Buffer
	s.WritePrometheus(&b)
	out := b.String()
	if problems := lint(t, out); len(problems) > 0 {
		t.Fatalf("lint problems: %v\n%s", problems, out)
	}
	for _, want := range []string{
		"# HELP app_requests_total Requests served.\n# TYPE app_requests_total counter\napp_requests_total{api=\"Fetch\"} 3\napp_requests_total{api=\"Produce\"} 2\n",
		"# HELP app_request_duration_seconds Time to serve a request.\\nEnd to end.\n# TYPE app_request_duration_seconds histogram\n",
		"# HELP app_bytes_total Bytes, a \\\\ included.\n# TYPE app_bytes_total counter\napp_bytes_total 42\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing\n%s\nin\n%s", want, out)
		}
	}
	if n := strings.Count(out, "# TYPE"); n != 4 {
		t.Errorf("%d TYPE lines, want one per family (4):\n%s", n, out)
	}
	if n := strings.Count(out, `app_request_duration_seconds_count{api=`); n != 2 {
		t.Errorf("%d histogram counts, want 2:\n%s", n, out)
	}
}

// A family registered without a description is still written, and the
// linter names it: that is how a test catches it.
func TestSetUndescribedFamily(t *testing.T) {
	s := NewSet()
	s.Describe(Family{"app_up", Gauge, "Whether the app is up."})
	s.NewGauge("app_up", func() float64 { return 1 })
	s.NewCounter("app_mystery_total").Inc()
	var b bytes.Buffer
	s.WritePrometheus(&b)
	if !strings.HasPrefix(b.String(), "app_mystery_total 1\n") {
		t.Fatalf("undescribed family dropped:\n%s", b.String())
	}
	problems := lint(t, b.String())
	if len(problems) != 1 || problems[0].Metric != "app_mystery_total" {
		t.Fatalf("lint problems %v, want one about app_mystery_total", problems)
	}
}

func TestWriteProcessMetrics(t *testing.T) {
	var b bytes.Buffer
	WriteProcessMetrics(&b)
	out := b.String()
	if problems := lint(t, out); len(problems) > 0 {
		t.Fatalf("lint problems: %v\n%s", problems, out)
	}
	for _, f := range ProcessFamilies {
		if !strings.Contains(out, "# TYPE "+f.Name+" "+string(f.Type)+"\n") {
			t.Errorf("family %s missing", f.Name)
		}
	}
	if n := strings.Count(out, "# TYPE "); n != len(ProcessFamilies) {
		t.Errorf("%d families written, want the %d described:\n%s", n, len(ProcessFamilies), out)
	}
}

// A child set's series are written with the set's, in the same family
// under one HELP and TYPE, until it is removed.
func TestSetChildren(t *testing.T) {
	s := NewSet()
	s.Describe(Family{"app_lag", Gauge, "Lag."})
	s.NewGauge(`app_lag{run="a"}`, func() float64 { return 1 })
	c := metrics.NewSet()
	c.NewGauge(`app_lag{run="b"}`, func() float64 { return 2 })
	s.Add(c)
	var b bytes.Buffer
	s.WritePrometheus(&b)
	if want := "# HELP app_lag Lag.\n# TYPE app_lag gauge\napp_lag{run=\"a\"} 1\napp_lag{run=\"b\"} 2\n"; b.String() != want {
		t.Errorf("with a child:\n%s\nwant\n%s", b.String(), want)
	}
	s.Remove(c)
	b.Reset()
	s.WritePrometheus(&b)
	if strings.Contains(b.String(), `run="b"`) {
		t.Errorf("a removed child's series written:\n%s", b.String())
	}
}
