package bench

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestMain lets the test binary serve as the broker executable: the harness
// re-executes it as "<exe> bench broker ..." with the child marker set.
func TestMain(m *testing.M) {
	if IsBrokerChild() {
		args := os.Args[1:]
		if len(args) > 0 && args[0] == "bench" {
			args = args[1:]
		}
		os.Exit(MainWithPlugins(args, testPlugins))
	}
	os.Exit(m.Run())
}

func shortWorkloads() []Workload {
	base := Workload{RecordSize: 1024, Partitions: 3, Acks: -1, Compression: "none", Duration: 300 * time.Millisecond, Runs: 3, Seed: 7}
	w := func(k Kind, size, acks int, comp string) Workload {
		x := base
		x.Kind, x.RecordSize, x.Acks, x.Compression = k, size, acks, comp
		return x
	}
	return []Workload{
		w(Produce, 1024, -1, "zstd"),
		w(Produce, 100, 1, "none"),
		w(Consume, 1024, -1, "none"),
		w(EndToEnd, 1024, -1, "zstd"),
		w(EndToEnd, 100, 1, "none"), // no matching produce result: measures its own max
	}
}

// TestHarness runs a very short harness against both brokers in child
// processes and checks that every figure is there and consistent. It
// asserts no speed.
func TestHarness(t *testing.T) {
	tandemtest.Long(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	r := &Runner{
		Workloads: shortWorkloads(), Targets: []string{"kfake", "tandem"}, Sync: true,
		LimitDuration: 200 * time.Millisecond, Dir: t.TempDir(), Seed: 7, Backlog: 8 << 20, Progress: &progress,
		RestartBytes: 4 << 20,
	}
	rep, err := r.Run(ctx)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(rep.Results), 2*len(r.Workloads); got != want {
		t.Fatalf("%d results, want %d", got, want)
	}
	for _, res := range rep.Results {
		if err := res.Check(); err != nil {
			t.Errorf("%s on %s: %v", res.Workload.Name(), res.Target, err)
		}
		if !res.HasProc || (res.Workload.Kind == Produce && res.CPUSecPerGB <= 0) {
			t.Errorf("%s on %s: no broker process figures (cpu %v s/GB)", res.Workload.Name(), res.Target, res.CPUSecPerGB)
		}
		if res.Workload.Kind == Consume && res.Expected != int64(res.Workload.Runs)*res.Produced {
			t.Errorf("consume: expected %d records over %d runs of a %d-record backlog", res.Expected, res.Workload.Runs, res.Produced)
		}
		if res.Workload.Kind == EndToEnd && res.Latency.OfferedRecsPerSec <= 0 {
			t.Errorf("e2e %s on %s: no offered load", res.Workload.Name(), res.Target)
		}
	}
	if rs := rep.Restart; rs == nil || rs.DiskBytes < 4<<20 || rs.Serving <= 0 || rs.FirstAck < rs.Serving {
		t.Fatalf("restart not measured: %+v", rs)
	}
	l := rep.Limits
	if l == nil || l.LoopbackTCP <= 0 || l.FileAppend <= 0 || l.FileAppendSync <= 0 || l.PebbleAppend <= 0 || l.MirrorPipe <= 0 {
		t.Fatalf("limits not measured: %+v", l)
	}

	var text, md, svg bytes.Buffer
	rep.WriteText(&text)
	rep.WriteMarkdown(&md, "benchmarks.svg")
	rep.WriteSVG(&svg)
	t.Log("\n" + text.String())
	for _, res := range rep.Results {
		for name, out := range map[string]string{"text": text.String(), "markdown": md.String(), "svg": svg.String()} {
			if !strings.Contains(out, res.Workload.Name()) {
				t.Errorf("%s report lacks %s", name, res.Workload.Name())
			}
		}
	}
	if rel := rep.relativeTable(); len(rel.rows) != len(r.Workloads) {
		t.Errorf("relative table has %d rows, want %d", len(rel.rows), len(r.Workloads))
	}
	if !strings.HasPrefix(svg.String(), "<svg") || !strings.HasSuffix(svg.String(), "</svg>\n") {
		t.Errorf("malformed svg")
	}
}

// TestAgainst drives a broker the harness did not start (kfake in this
// process): client figures only.
func TestAgainst(t *testing.T) {
	tandemtest.Long(t) // three workloads of three runs, seconds: the full tier only
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ws := shortWorkloads()
	r := &Runner{Workloads: []Workload{ws[0], ws[2], ws[3]}, Against: c.ListenAddrs()[0], Dir: t.TempDir(), Seed: 7, Backlog: 8 << 20}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 3 || rep.Limits != nil {
		t.Fatalf("got %d results, limits %v", len(rep.Results), rep.Limits)
	}
	for _, res := range rep.Results {
		if err := res.Check(); err != nil {
			t.Errorf("%s: %v", res.Workload.Name(), err)
		}
		if res.HasProc || res.Target != r.Against {
			t.Errorf("%s: target %q, process figures %v", res.Workload.Name(), res.Target, res.HasProc)
		}
	}
}

// TestFailedWorkload checks that a workload that fails is reported as
// failed and the run goes on: a 2 MiB record does not fit the producer's
// 1 MiB batches.
func TestFailedWorkload(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	good := shortWorkloads()[0]
	bad := good
	bad.RecordSize = 2 << 20
	r := &Runner{Workloads: []Workload{bad, good}, Against: c.ListenAddrs()[0], Dir: t.TempDir(), Seed: 7, Backlog: 8 << 20}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want 2", len(rep.Results))
	}
	if rep.Results[0].Err == "" || rep.Results[0].Check() == nil {
		t.Errorf("oversized records: no failure reported: %+v", rep.Results[0])
	}
	if err := rep.Results[1].Check(); err != nil {
		t.Errorf("the workload after the failure: %v", err)
	}
	var text, svg bytes.Buffer
	rep.WriteText(&text)
	rep.WriteSVG(&svg)
	if !strings.Contains(text.String(), "FAILED: ") {
		t.Errorf("text report does not show the failure:\n%s", text.String())
	}
}

func TestStatAndPercentile(t *testing.T) {
	if s := statOf([]float64{5, 1, 3}); s != (Stat{Median: 3, Min: 1, Max: 5}) {
		t.Errorf("statOf odd: %+v", s)
	}
	if s := statOf([]float64{4, 1, 3, 2}); s != (Stat{Median: 2.5, Min: 1, Max: 4}) {
		t.Errorf("statOf even: %+v", s)
	}
	d := make([]time.Duration, 1000)
	for i := range d {
		d[i] = time.Duration(1000-i) * time.Millisecond
	}
	slices.Sort(d)
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {0.999, 999 * time.Millisecond}, {1, time.Second}, {0, time.Millisecond}} {
		if got := percentile(d, tc.q); got != tc.want {
			t.Errorf("percentile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
}

func TestReadProc(t *testing.T) {
	buf := make([]byte, 32<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	s, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.CPU <= 0 || s.PeakRSS < 32<<20 {
		t.Fatalf("implausible /proc figures for a process that touched 32 MiB: %+v", s)
	}
}

func TestMatrix(t *testing.T) {
	ws, err := matrix("produce,consume,e2e", "100,1024,16384", "1,6,64", "1,all", "none,zstd", time.Second, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	// produce: 3 sizes × 3 partition counts × 2 acks × 2 codecs; consume and e2e: acks=all, none only.
	if len(ws) != 36+9+9 {
		t.Fatalf("%d workloads", len(ws))
	}
	seen := map[string]bool{}
	for _, w := range ws {
		if seen[w.Name()] {
			t.Errorf("duplicate workload %s", w.Name())
		}
		seen[w.Name()] = true
	}
	for _, bad := range [][5]string{{"produce", "8", "1", "1", "none"}, {"produce", "100", "1", "2", "none"}, {"fetch", "100", "1", "1", "none"}, {"produce", "100", "1", "1", "lz5"}} {
		if _, err := matrix(bad[0], bad[1], bad[2], bad[3], bad[4], time.Second, 3, 1); err == nil {
			t.Errorf("matrix%v: no error", bad)
		}
	}
	if code := Main([]string{"--no-such-flag"}); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
}

// TestWriteGeneratedKeepsHandWritten regenerates a report file: only the
// part between the markers changes; a file without markers is refused
// and left as it was.
func TestWriteGeneratedKeepsHandWritten(t *testing.T) {
	path := t.TempDir() + "/b.md"
	if err := writeGenerated(path, []byte("first\n")); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(path)
	os.WriteFile(path, append(append([]byte("# notes above\n"), old...), "## hand-written below\n"...), 0o644)
	if err := writeGenerated(path, []byte("second\n")); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "# notes above\n" + generatedBegin + "second\n" + generatedEnd + "## hand-written below\n"
	if string(got) != want {
		t.Fatalf("regenerated file:\n%s\nwant:\n%s", got, want)
	}
	bare := t.TempDir() + "/bare.md"
	os.WriteFile(bare, []byte("hand-written only\n"), 0o644)
	if err := writeGenerated(bare, []byte("x\n")); err == nil {
		t.Fatal("a file without markers was overwritten")
	}
	if got, _ := os.ReadFile(bare); string(got) != "hand-written only\n" {
		t.Fatalf("file without markers changed: %q", got)
	}
}
