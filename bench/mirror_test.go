package bench

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/plugins/groups"
	"github.com/tandem-kafka/tandem/plugins/mirror"
	"github.com/tandem-kafka/tandem/plugins/txn"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// testPlugins are the plugins of the Tandem brokers the tests start (those
// of cmd/tandem that the mirror workload needs).
func testPlugins() []any {
	log := slog.Default()
	return []any{groups.New(nil, log), txn.New(nil, log), mirror.New(nil, log)}
}

// TestMirror runs the mirror workload for about 2 s: every record
// produced on the source must reach the destination, and the lag
// percentiles must be ordered. kfake is listed and shown as "-". It
// asserts no speed.
func TestMirror(t *testing.T) {
	tandemtest.Long(t) // brokers in child processes, two clusters: the full tier only
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	w := Workload{Kind: Mirror, RecordSize: 1024, Partitions: 3, Acks: -1, Compression: "none", Duration: 2 * time.Second, Runs: 1, Seed: 7}
	r := &Runner{Workloads: []Workload{w}, Targets: []string{"kfake", "tandem"}, Sync: true, Dir: t.TempDir(), Seed: 7, Progress: &progress}
	rep, err := r.Run(ctx)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want 2: %+v", len(rep.Results), rep.Results)
	}
	var res Result
	for _, x := range rep.Results {
		if err := x.Check(); err != nil {
			t.Errorf("%s on %s: %v", x.Workload.Name(), x.Target, err)
		}
		switch x.Target {
		case "kfake":
			if x.Skip == "" {
				t.Errorf("kfake ran the mirror workload: %+v", x)
			}
		case "tandem":
			res = x
		}
	}
	m := res.Mirror
	if m == nil {
		t.Fatalf("no mirror figures: %+v", res)
	}
	if m.Mirrored != res.Produced || res.Produced < 2 || res.Consumed != res.Expected {
		t.Errorf("mirrored %d, produced %d, read %d of %d on the destination", m.Mirrored, res.Produced, res.Consumed, res.Expected)
	}
	if !(0 < m.P50 && m.P50 <= m.P99 && m.P99 <= m.P999 && m.P999 <= m.Max) || !(m.RecordsP50 <= m.RecordsP99 && m.RecordsP99 <= m.RecordsMax) {
		t.Errorf("percentiles out of order: %+v", *m)
	}
	if m.RecordSamples < 5 || m.OfferedRecsPerSec <= 0 || res.RecsPerSec.Median <= 0 {
		t.Errorf("samples %d, offered %v, mirrored %v rec/s", m.RecordSamples, m.OfferedRecsPerSec, res.RecsPerSec.Median)
	}

	var text, md bytes.Buffer
	rep.WriteText(&text)
	rep.WriteMarkdown(&md, "")
	t.Log("\n" + text.String())
	for name, out := range map[string]string{"text": text.String(), "markdown": md.String()} {
		if !strings.Contains(out, "lag records p50/p99/max") || !strings.Contains(out, w.Name()) {
			t.Errorf("%s report lacks the mirror table:\n%s", name, out)
		}
	}
}
