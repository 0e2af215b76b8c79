package apply

import "time"

// Progress is what the run knows of a partition's copy: the source's end
// offset and the destination's, the lag, and when the log last held all
// of the source. The stage's answers move it; the run's views read it.
// It is guarded by the Stage's Mu.
type Progress struct {
	SrcEnd     int64     // the source's end offset (high watermark), -1 unknown
	SrcEndAt   time.Time // when SrcEnd was learned
	DstLEO     int64     // the destination log's end, as last seen
	LagMs      int64     // lag in record time (the run measures it); -1 unknown, 0 caught up
	CaughtUpAt time.Time // when the log last held all of a source end offset just learned
	LogStartTo int64     // source log start to move to after the next append (-1: none)
}

// NewProgress is the progress of a partition the run knows nothing of
// yet.
func NewProgress() Progress {
	return Progress{SrcEnd: -1, LagMs: -1, LogStartTo: -1}
}

// CaughtUp records the log's end leo after an apply, and whether it holds
// all of the source's end offset last learned.
func (p *Progress) CaughtUp(leo int64) {
	p.DstLEO = leo
	if leo >= p.SrcEnd {
		p.LagMs, p.CaughtUpAt = 0, p.SrcEndAt
	}
}

// Learned records the source's end offset end, learned at now.
func (p *Progress) Learned(end int64, now time.Time) {
	p.SrcEnd, p.SrcEndAt = end, now
	if p.DstLEO >= end {
		p.LagMs, p.CaughtUpAt = 0, p.SrcEndAt
	} else if p.LagMs == 0 {
		p.LagMs = -1 // behind again: unknown until measured
	}
}
