package mirror

import (
	"context"
	"math"
	"time"

	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorstate"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorview"
)

// The mirror metrics (their families, registration and removal) are
// mirrormetrics'; here is what their gauges read of a run (runMetrics)
// and of a partition this broker leads (partMetrics).

// runMetrics is a run as its gauges read it (mirrormetrics.Run).
type runMetrics struct{ r *mirrorRun }

func (m runMetrics) Name() string { return m.r.name }

func (m runMetrics) MaxLagRecords() float64 {
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	lag := int64(0)
	for _, pt := range r.parts {
		if !mirrorview.NeedsSource(pt.state) {
			continue
		}
		l := pt.lag()
		if l < 0 {
			return math.NaN()
		}
		lag = max(lag, l)
	}
	return float64(lag)
}

func (m runMetrics) SourceContactAge() float64 {
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.contact.IsZero() {
		return math.NaN()
	}
	return time.Since(r.contact).Seconds()
}

func (m runMetrics) PartitionsIn(s mirrorstate.State) float64 {
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, pt := range r.parts {
		if r.shownState(pt) == s { // cut off from the source: FAILED, as every view says
			n++
		}
	}
	return float64(n)
}

func (m runMetrics) Manifest(ctx context.Context) []mirrorproto.DivergedRange {
	return m.r.p.store.Manifest(ctx, m.r.name)
}

func (m runMetrics) DestinationCounts() map[string]int {
	return mirrorview.DestinationCounts(m.r.p.Image(), m.r.name, m.r.p.cfg.MinISR)
}

// partMetrics is a partition as its gauges read it
// (mirrormetrics.Partition).
type partMetrics struct {
	r  *mirrorRun
	pt *ledPartition
}

func (m partMetrics) LagRecords() float64 {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	if l := m.pt.lag(); l >= 0 {
		return float64(l)
	}
	return math.NaN()
}

func (m partMetrics) LagSeconds() float64 {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	if m.pt.progress.LagMs < 0 {
		return math.NaN()
	}
	return float64(m.pt.progress.LagMs) / 1000
}

func (m partMetrics) SourceOffsetAge() float64 {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	if m.pt.progress.SrcEnd < 0 {
		return math.NaN()
	}
	return time.Since(m.pt.endAt()).Seconds()
}
