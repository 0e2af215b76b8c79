package mirrormetrics

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/tandem-kafka/tandem/plugins/mirror/fetch"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorview"
	"github.com/tandem-kafka/tandem/prom"
)

type run struct{}

func (run) Name() string              { return "m" }
func (run) MaxLagRecords() float64    { return math.NaN() }
func (run) SourceContactAge() float64 { return 2 }
func (run) PartitionsIn(s mirrorstate.State) float64 {
	if s == mirrorstate.Mirroring {
		return 3
	}
	return 0
}

func (run) Manifest(context.Context) []mirrorproto.DivergedRange {
	return []mirrorproto.DivergedRange{{Records: 5}, {Records: 6}}
}

func (run) DestinationCounts() map[string]int { return map[string]int{mirrorview.HealthOK: 4} }

type part struct{}

func (part) LagRecords() float64      { return 7 }
func (part) LagSeconds() float64      { return 0.5 }
func (part) SourceOffsetAge() float64 { return 1 }

func exposition(s *prom.Set) string {
	var b strings.Builder
	s.WritePrometheus(&b)
	return b.String()
}

// TestTrackAndForget: a run's gauges, a partition's under its fetcher's
// client ID (again under the new one when it moves), a fetcher's
// counters, and none left once the run is forgotten.
func TestTrackAndForget(t *testing.T) {
	set := prom.NewSet()
	m := New(set)
	r := run{}
	m.TrackRun(r)
	tp := mirrorstate.TopicPartition{Topic: "c.t", Partition: 1}
	m.TrackPart(r, tp, "t", fetch.Key{Broker: 2, ID: 0}, part{})
	f := m.FetcherStats(r, fetch.Key{Broker: 2, ID: 0}, "h", 9092)
	f.Requests.Inc()
	if again := m.FetcherStats(r, fetch.Key{Broker: 2, ID: 0}, "h", 9092); again != f {
		t.Error("a fetcher's counters registered twice")
	}
	out := exposition(set)
	for _, want := range []string{
		`tandem_mirror_partitions{mirror="m",state="MIRRORING"} 3`,
		`tandem_mirror_diverged_records{mirror="m"} 11`,
		`tandem_mirror_diverged_ranges{mirror="m"} 2`,
		`tandem_mirror_destination_partitions{mirror="m",health="ok"} 4`,
		`tandem_mirror_lag_records{mirror="m",topic="c.t",source_topic="t",partition="1",client_id="MirrorFetcherThread-2-0-m"} 7`,
		`tandem_mirror_fetch_requests_total{mirror="m",client_id="MirrorFetcherThread-2-0-m",broker_host="h",broker_port="9092"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in\n%s", want, out)
		}
	}
	m.TrackPart(r, tp, "t", fetch.Key{Broker: 3, ID: 0}, part{})
	if out := exposition(set); strings.Contains(out, "MirrorFetcherThread-2-0-m\"} 7") || !strings.Contains(out, "MirrorFetcherThread-3-0-m\"} 7") {
		t.Errorf("a partition that moved to another fetcher:\n%s", out)
	}
	m.Forget(r)
	if out := exposition(set); strings.Contains(out, `mirror="m"`) {
		t.Errorf("left after Forget:\n%s", out)
	}
}
