package bench

import (
	"bytes"
	"context"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// runMirrorWorkloads runs ws on Tandem with tiny parameters and checks
// every result and that each title appears in both reports. It asserts
// no speed.
func runMirrorWorkloads(t *testing.T, o MirrorOptions, ws []Workload, titles ...string) *Report {
	t.Helper()
	return runMirrorRunner(t, &Runner{Workloads: ws, Mirrors: o}, titles...)
}

// runMirrorRunner is runMirrorWorkloads with more of the Runner set.
func runMirrorRunner(t *testing.T, r *Runner, titles ...string) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	r.Targets, r.Sync, r.Dir, r.Seed, r.Progress = []string{"tandem"}, true, t.TempDir(), 7, &progress
	rep, err := r.Run(ctx)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	var text, md bytes.Buffer
	rep.WriteText(&text)
	rep.WriteMarkdown(&md, "")
	t.Log("\n" + text.String())
	for _, res := range rep.Results {
		if err := res.Check(); err != nil {
			t.Errorf("%s: %v", res.Workload.Name(), err)
		}
	}
	for _, title := range titles {
		if !strings.Contains(text.String(), title) || !strings.Contains(md.String(), "## "+title) {
			t.Errorf("the reports lack %q", title)
		}
	}
	return rep
}

func tinyMirror(k Kind) Workload {
	return Workload{Kind: k, RecordSize: 1024, Partitions: 3, Acks: -1, Compression: "none", Duration: time.Second, Runs: 1, Seed: 7}
}

// TestMirrorCostAndUnthrottled: the steady and the unthrottled mirror
// workloads report both sides' CPU per byte against a produce measured in
// the same run, and the unthrottled one its lag over the load.
func TestMirrorCostAndUnthrottled(t *testing.T) {
	tandemtest.Long(t) // brokers in child processes, two clusters: the full tier only
	t.Parallel()
	prod := tinyMirror(Produce)
	rep := runMirrorWorkloads(t, MirrorOptions{}, []Workload{prod, tinyMirror(Mirror), tinyMirror(MirrorUnthrottled)},
		"Mirror cost per byte", "Mirror with an unthrottled producer")
	if len(rep.Results) != 3 {
		t.Fatalf("%d results, want 3", len(rep.Results))
	}
	for _, res := range rep.Results[1:] {
		m := res.Mirror
		if m == nil {
			t.Fatalf("%s: no mirror figures", res.Workload.Name())
		}
		if m.ProduceCPUSecPerGB != rep.Results[0].CPUSecPerGB || m.ProduceCPUSecPerGB <= 0 {
			t.Errorf("%s: produce CPU %v s/GB, the produce workload measured %v", res.Workload.Name(), m.ProduceCPUSecPerGB, rep.Results[0].CPUSecPerGB)
		}
		if res.Produced < 2 || m.Mirrored != res.Produced || m.Diverged != "" {
			t.Errorf("%s: produced %d, mirrored %d, diverged %q", res.Workload.Name(), res.Produced, m.Mirrored, m.Diverged)
		}
	}
	if m := rep.Results[2].Mirror; m.OfferedRecsPerSec != 0 || m.ProducedRecsPerSec <= 0 || m.RecordSamples < 3 {
		t.Errorf("unthrottled: offered %v, produced %v rec/s, %d lag samples", m.OfferedRecsPerSec, m.ProducedRecsPerSec, m.RecordSamples)
	}
}

// TestMirrorRTT runs the round-trip workload at 0 and 50 ms through the
// WAN proxy: every record crosses it, the link is reported, and the
// 50 ms row is set against the 0 ms one.
func TestMirrorRTT(t *testing.T) {
	tandemtest.Long(t) // brokers in child processes, two clusters: the full tier only
	t.Parallel()
	var ws []Workload
	for _, rtt := range []time.Duration{0, 50 * time.Millisecond} {
		w := tinyMirror(MirrorRTT)
		w.RTT = rtt
		ws = append(ws, w)
	}
	rep := runMirrorWorkloads(t, MirrorOptions{RTTBytesPerSec: 2e6, Window: 1 << 20}, ws, "Mirror across a round trip")
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want 2", len(rep.Results))
	}
	for i, res := range rep.Results {
		m := res.Mirror
		if m == nil || m.RTT != ws[i].RTT || m.Window != 1<<20 || m.Mirrored != res.Produced {
			t.Fatalf("%s: %+v", res.Workload.Name(), m)
		}
		if m.OfferedRecsPerSec != 2e6/1024 {
			t.Errorf("%s: offered %v rec/s, want %v", res.Workload.Name(), m.OfferedRecsPerSec, 2e6/1024)
		}
	}
	if m := rep.Results[1].Mirror; m.P50 < 25*time.Millisecond {
		t.Errorf("lag p50 %v across a 50 ms round trip: under the one-way delay", m.P50)
	}
	if rows := rep.rttTable().rows; len(rows) != 2 || rows[1][6] == "-" {
		t.Errorf("round-trip table: %q", rows)
	}
}

// TestMirrorScale mirrors 60 and 120 idle partitions by a topic pattern:
// every partition caught up, both sides' idle figures, the curve's rows.
func TestMirrorScale(t *testing.T) {
	tandemtest.Long(t) // brokers in child processes, two clusters: the full tier only
	t.Parallel()
	var ws []Workload
	for _, n := range []int32{60, 120} {
		w := tinyMirror(MirrorScale)
		w.Partitions = n
		ws = append(ws, w)
	}
	rep := runMirrorWorkloads(t, MirrorOptions{ScaleRecords: 2, ScaleIdle: time.Second, ScaleSettle: 500 * time.Millisecond}, ws, "Mirror partition scale")
	for i, res := range rep.Results {
		s := res.Scale
		if s == nil {
			t.Fatalf("%s: no scale figures: %+v", res.Workload.Name(), res)
		}
		if want := int(ws[i].Partitions); s.Partitions != want || s.Topics != (want+49)/50 || s.Records != int64(2*want) {
			t.Errorf("%d partitions in %d topics with %d records, want %d", s.Partitions, s.Topics, s.Records, want)
		}
	}
	if rows := rep.scaleTable().rows; len(rows) != 2 {
		t.Errorf("scale table: %q", rows)
	}
}

// TestMirrorCatchUp cuts the link while the source takes an 8 MiB
// backlog, then restores it: every record caught up byte for byte, the
// local producer's latency on both sides of the mirror, the ratios to
// this run's limits.
func TestMirrorCatchUp(t *testing.T) {
	tandemtest.Long(t) // brokers in child processes, two clusters: the full tier only
	t.Parallel()
	r := &Runner{
		Workloads:     []Workload{tinyMirror(MirrorCatchUp)},
		Mirrors:       MirrorOptions{CatchUpBytes: 8 << 20, CatchUpLocalRate: 200, CatchUpBaseline: time.Second},
		LimitDuration: 200 * time.Millisecond,
	}
	rep := runMirrorRunner(t, r, "Mirror catch-up after a cut link", "Mirror cost per byte")
	c := rep.Results[0].CatchUp
	if c == nil {
		t.Fatalf("no catch-up figures: %+v", rep.Results[0])
	}
	if c.BacklogBytes < 8<<20 || c.BacklogRecords != c.BacklogBytes/1024 || rep.Results[0].Produced != c.BacklogRecords+1 {
		t.Errorf("backlog %d bytes, %d records; %d produced", c.BacklogBytes, c.BacklogRecords, rep.Results[0].Produced)
	}
	if c.LocalBase.Samples < 100 || c.LocalDur.Samples == 0 || c.ProduceCPUSecPerGB <= 0 {
		t.Errorf("local producer: %d samples with no mirror, %d during; produce CPU %v s/GB", c.LocalBase.Samples, c.LocalDur.Samples, c.ProduceCPUSecPerGB)
	}
	if rows := rep.catchUpTable(rep.Limits).rows; len(rows) != 1 || rows[0][7] == "-" {
		t.Errorf("catch-up table: %q", rows)
	}
}

// TestMirrorWorkloadFlags: which mirror workloads a command line makes,
// with --quick's reduced parameters unless a flag says otherwise.
func TestMirrorWorkloadFlags(t *testing.T) {
	t.Parallel()
	matrixOf := func(kinds string) ([]Workload, error) {
		return matrix(kinds, "1024", "6", "all", "none", time.Second, 1, 1)
	}
	steady := Workload{Kind: Mirror, RecordSize: 1024, Partitions: 6, Acks: -1, Compression: "none", Duration: time.Second, Runs: 1, Seed: 1}
	names := func(ws []Workload) string {
		var out []string
		for _, w := range ws {
			out = append(out, w.Name()+"/"+w.Duration.String())
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		args  []string
		quick bool
		kinds string // --workloads, "" unset
		want  string
	}{
		{quick: true, want: "mirror-unthrottled-1KiB-p6-acksall-none/6s"},
		{quick: true, kinds: "mirror-rtt,mirror-scale", want: "mirror-rtt-1KiB-p6-acksall-none-rtt0ms/5s mirror-rtt-1KiB-p6-acksall-none-rtt100ms/5s " +
			"mirror-rtt-1KiB-p6-acksall-none-rtt200ms/5s mirror-scale-1KiB-p500-acksall-none/2s mirror-scale-1KiB-p2000-acksall-none/2s"},
		{args: []string{"--mirror-rtts", "0,70ms", "--mirror-rtt-duration", "9s"}, kinds: "mirror-rtt",
			want: "mirror-rtt-1KiB-p6-acksall-none-rtt0ms/9s mirror-rtt-1KiB-p6-acksall-none-rtt70ms/9s"},
		{kinds: "produce,mirror-catchup", want: "produce-1KiB-p6-acksall-none/1s mirror-catchup-1KiB-p6-acksall-none/2s"},
		{want: "produce-1KiB-p6-acksall-none/1s consume-1KiB-p6-acksall-none/1s e2e-1KiB-p6-acksall-none/1s mirror-1KiB-p6-acksall-none/1s " +
			"mirror-unthrottled-1KiB-p6-acksall-none/20s mirror-rtt-1KiB-p6-acksall-none-rtt0ms/20s mirror-rtt-1KiB-p6-acksall-none-rtt100ms/20s " +
			"mirror-rtt-1KiB-p6-acksall-none-rtt200ms/20s mirror-scale-1KiB-p1000-acksall-none/2s mirror-scale-1KiB-p10000-acksall-none/2s " +
			"mirror-scale-1KiB-p50000-acksall-none/2s mirror-catchup-1KiB-p6-acksall-none/2s"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		mf := addMirrorFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var (
			ws  []Workload
			err error
		)
		if tc.quick {
			ws, err = quickWithMirrors(1, mf, tc.kinds != "", tc.kinds)
			ws = slices.DeleteFunc(ws, func(w Workload) bool { return !w.Kind.mirrors() || w.Kind == Mirror })
		} else {
			kinds := tc.kinds
			if kinds == "" {
				kinds = "produce,consume,e2e"
			}
			ws, err = fullWithMirrors(mf, tc.kinds != "", kinds, steady, matrixOf)
		}
		if err != nil {
			t.Fatalf("%v %q: %v", tc.args, tc.kinds, err)
		}
		if got := names(ws); got != tc.want {
			t.Errorf("%v quick=%v --workloads %q:\n got %s\nwant %s", tc.args, tc.quick, tc.kinds, got, tc.want)
		}
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	mf := addMirrorFlags(fs)
	fs.Parse([]string{"--mirror-rtts", "0,fast"})
	if _, err := mf.workloads(MirrorRTT, false, 1); err == nil {
		t.Error("--mirror-rtts 0,fast: no error")
	}
	if o := mf.options(true); o.CatchUpBytes != 128<<20 || o.ScaleIdle != 5*time.Second || o.RTTBytesPerSec != 95e6 {
		t.Errorf("--quick mirror options: %+v", o)
	}
}

// TestLagThirds: the lag's medians over the first and last third of a
// load, and the verdict drawn from them.
func TestLagThirds(t *testing.T) {
	var samples []lagSample
	for i := range 30 {
		// A lag that grows by 100 records every 100 ms.
		samples = append(samples, lagSample{at: time.Duration(i) * 100 * time.Millisecond, src: int64(1000 + 200*i), dst: int64(1000 + 100*i)})
	}
	first, last := lagThirds(samples, 3*time.Second)
	if first != 450 || last != 2450 {
		t.Fatalf("thirds %d and %d, want 450 and 2450", first, last)
	}
	for _, tc := range []struct {
		first, last int64
		produced    float64
		bounded     bool
	}{
		{450, 2450, 1000, false}, // grew fivefold, more than 100 ms of records
		{450, 900, 1000, true},   // at most twice
		{10, 90, 1000, true},     // under 100 ms of records: noise
		{0, 500, 1000, false},
	} {
		m := &MirrorLag{LagFirstThird: tc.first, LagLastThird: tc.last, ProducedRecsPerSec: tc.produced}
		if got := m.lagBounded(); got != tc.bounded {
			t.Errorf("first %d, last %d at %v rec/s: bounded %v, want %v", tc.first, tc.last, tc.produced, got, tc.bounded)
		}
	}
}

// TestLagInTime: the mirror's lag in time from high-watermark samples,
// rounded up to the sample before the source passed the destination.
func TestLagInTime(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	samples := []lagSample{
		{at: ms(20), src: 100, dst: 100},  // caught up
		{at: ms(40), src: 150, dst: 100},  // 100 passed after the sample at 20
		{at: ms(60), src: 200, dst: 100},  // still lacking record 100: since 20
		{at: ms(80), src: 250, dst: 180},  // lacks 180, which came after the sample at 40
		{at: ms(100), src: 250, dst: 250}, // caught up again
		{at: ms(120), src: 300, dst: 260}, // lacks 260: after the sample at 100
	}
	want := []time.Duration{0, ms(20), ms(40), ms(40), 0, ms(20)}
	if got := lagInTime(samples); !slices.Equal(got, want) {
		t.Fatalf("lag in time %v, want %v", got, want)
	}
	// Behind from the first sample: counted from the start of the load.
	if got := lagInTime([]lagSample{{at: ms(20), src: 10, dst: 0}}); got[0] != ms(20) {
		t.Fatalf("lag %v at the first sample, want 20ms", got[0])
	}
}

// TestScaleTopics: n partitions in topics of 50, the last with the rest.
func TestScaleTopics(t *testing.T) {
	ts := scaleTopics(120)
	if len(ts) != 3 || ts["scale-00000"] != 50 || ts["scale-00001"] != 50 || ts["scale-00002"] != 20 {
		t.Fatalf("scaleTopics(120) = %v", ts)
	}
	if w := tcpWindow(); w <= 0 {
		t.Fatalf("tcpWindow() = %d", w)
	}
}
