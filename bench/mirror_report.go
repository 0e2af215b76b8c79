package bench

import (
	"fmt"
	"strings"
	"time"
)

// The tables of the mirror workloads: one per question of issue 40 (cost
// per byte, keeping up unthrottled, the round trip, the partition count,
// the catch-up).

// mirrorLine is a mirror result's progress line.
func (res Result) mirrorLine() string {
	switch {
	case res.Scale != nil:
		return res.Scale.line()
	case res.CatchUp != nil:
		return res.CatchUp.line()
	}
	line := fmt.Sprintf("%8.1f MB/s %10.0f rec/s", res.MBps.Median/1e6, res.RecsPerSec.Median) + mirrorSuffix(res.Mirror)
	if m := res.Mirror; m != nil {
		line += fmt.Sprintf("; CPU s/GB destination %.2f source %.2f produce %.2f", res.CPUSecPerGB, m.SrcCPUSecPerGB, m.ProduceCPUSecPerGB)
	}
	return line
}

// mirrorCost is a mirror result's cost per value byte mirrored.
type mirrorCost struct {
	mbps, dst, src, produce float64
}

func costOf(r Result) (mirrorCost, bool) {
	switch {
	case r.Err != "" || r.Skip != "":
	case r.Mirror != nil:
		return mirrorCost{r.MBps.Median, r.CPUSecPerGB, r.Mirror.SrcCPUSecPerGB, r.Mirror.ProduceCPUSecPerGB}, true
	case r.CatchUp != nil:
		c := r.CatchUp
		return mirrorCost{c.rate(), c.DstCPUSecPerGB, c.SrcCPUSecPerGB, c.ProduceCPUSecPerGB}, true
	}
	return mirrorCost{}, false
}

// costTable sets each mirror workload's CPU per byte on the destination
// against the source's, against a produce's at the maximum, and against
// the e2e workload's: a produce at the same offered rate with one reader,
// which is the destination's work (it takes the stream in at that rate
// and serves it to the bench's consumer). A broker's fixed costs per
// second (sync rounds, timers) weigh twice as much per byte at half the
// rate, so the produce at the maximum is the stricter yardstick.
func (rep *Report) costTable() *table {
	t := &table{head: []string{"workload", "mirrored MB/s", "destination CPU s/GB", "source CPU s/GB", "destination/source",
		"Tandem produce CPU s/GB", "destination/produce", "Tandem e2e CPU s/GB, same rate", "destination/e2e"}}
	for _, r := range rep.Results {
		c, ok := costOf(r)
		if !ok {
			continue
		}
		e2e := rep.e2eCPUBeside(r.Workload)
		t.add(r.Workload.Name(), mb(c.mbps), fmt.Sprintf("%.2f", c.dst), fmt.Sprintf("%.2f", c.src), ratio(c.dst, c.src),
			cpuCell(c.produce), ratio(c.dst, c.produce), cpuCell(e2e), ratio(c.dst, e2e))
	}
	return t
}

// e2eCPUBeside is the broker CPU per GB of Tandem's e2e workload of the
// same records in the same run, for a mirror workload offered at half
// the produce maximum as e2e is (0: none).
func (rep *Report) e2eCPUBeside(w Workload) float64 {
	if e, ok := rep.e2eOf(w); ok {
		return e.CPUSecPerGB
	}
	return 0
}

// e2eOf is Tandem's e2e result of the same records as the mirror
// workload w, when w is offered at half the produce maximum as e2e is.
func (rep *Report) e2eOf(w Workload) (Result, bool) {
	if w.Kind != Mirror {
		return Result{}, false
	}
	for _, r := range rep.Results {
		e := r.Workload
		if r.Target == "tandem" && e.Kind == EndToEnd && r.Latency != nil && r.Err == "" && e.RecordSize == w.RecordSize &&
			e.Partitions == w.Partitions && e.Acks == w.Acks && e.Compression == w.Compression {
			return r, true
		}
	}
	return Result{}, false
}

func cpuCell(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// lagBounded says whether the lag did not grow over the load: its median
// over the last third of the load is at most twice that over the first
// third, or under 100 ms worth of the produced records (noise).
func (m *MirrorLag) lagBounded() bool {
	return m.LagLastThird <= 2*m.LagFirstThird || float64(m.LagLastThird) <= 0.1*m.ProducedRecsPerSec
}

// unthrottledTable: did the mirror keep up with a producer as fast as
// the source acknowledges?
func (rep *Report) unthrottledTable() *table {
	t := &table{head: []string{"workload", "produced rec/s", "mirrored rec/s", "mirrored/produced",
		"lag records median, first third", "last third", "max", "lag", "caught up after the load s"}}
	for _, r := range rep.Results {
		m := r.Mirror
		if r.Workload.Kind != MirrorUnthrottled || m == nil || r.Err != "" {
			continue
		}
		verdict := "growing"
		if m.lagBounded() {
			verdict = "bounded"
		}
		t.add(r.Workload.Name(), fmt.Sprintf("%.0f", m.ProducedRecsPerSec), fmt.Sprintf("%.0f", m.MirroredRecsPerSec),
			ratio(m.MirroredRecsPerSec, m.ProducedRecsPerSec), fmt.Sprint(m.LagFirstThird), fmt.Sprint(m.LagLastThird),
			fmt.Sprint(m.RecordsMax), verdict, secs(m.CaughtUp))
	}
	return t
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// rttTable: the mirror's throughput across each round trip, against its
// throughput at 0 ms in the same run.
func (rep *Report) rttTable() *table {
	t := &table{head: []string{"workload", "RTT ms", "window MiB", "offered MB/s", "produced MB/s", "mirrored MB/s",
		"vs 0 ms", "caught up after the load s", "lag records p99/max"}}
	at0 := map[string]float64{}
	for _, r := range rep.Results {
		if r.Workload.Kind == MirrorRTT && r.Mirror != nil && r.Err == "" && r.Workload.RTT == 0 {
			at0[strings.TrimSuffix(r.Workload.Name(), "-rtt0ms")] = r.MBps.Median
		}
	}
	for _, r := range rep.Results {
		m := r.Mirror
		if r.Workload.Kind != MirrorRTT || m == nil || r.Err != "" {
			continue
		}
		size := float64(r.Workload.RecordSize)
		base := strings.TrimSuffix(r.Workload.Name(), fmt.Sprintf("-rtt%dms", r.Workload.RTT.Milliseconds()))
		t.add(r.Workload.Name(), fmt.Sprint(m.RTT.Milliseconds()), fmt.Sprintf("%.0f", float64(m.Window)/(1<<20)),
			mb(m.OfferedRecsPerSec*size), mb(m.ProducedRecsPerSec*size), mb(r.MBps.Median), ratio(r.MBps.Median, at0[base]),
			secs(m.CaughtUp), fmt.Sprintf("%d/%d", m.RecordsP99, m.RecordsMax))
	}
	return t
}

// mirrorTables are the mirror workloads' tables after the lag table, each
// with its heading and what it measures, for the Markdown report.
func (rep *Report) mirrorTables() []struct {
	title, about string
	t            *table
} {
	window := "the WAN proxy's window"
	for _, r := range rep.Results {
		if r.Mirror != nil && r.Mirror.Window > 0 {
			window = fmt.Sprintf("%s (by default the smaller of net.ipv4.tcp_rmem's maximum, %s here, what Linux autotunes a receive window to, "+
				"and net.ipv4.tcp_wmem's, %s here, what it autotunes a sender's buffer of unacknowledged bytes to: what one connection "+
				"has in flight on this machine without tuning)",
				mib(r.Mirror.Window), mib(tcpWindow()), mib(tcpSendBuffer()))
			break
		}
	}
	return []struct {
		title, about string
		t            *table
	}{
		{"Mirror cost per byte", "CPU seconds (utime+stime from /proc) per 10^9 value bytes mirrored, of the destination and of the source " +
			"over the same runs (the source takes the producer's records and serves the mirror; the destination appends them and serves " +
			"the harness's consumer), and Tandem's CPU per byte produced in the matching produce workload of the same run. For " +
			"mirror-catchup, over the catch-up only (the destination's CPU includes its local producer).", rep.costTable()},
		{"Mirror with an unthrottled producer", "The source's producer sends as fast as it is acknowledged while the destination mirrors. " +
			"Rates are over the load; the lag in records is sampled every 100 ms, its median over the first and the last third of the " +
			"load says whether it grew (bounded: the last at most twice the first, or under 100 ms of records).", rep.unthrottledTable()},
		{"Mirror across a round trip", "The destination reaches the source only through a WAN proxy in the harness (the source " +
			"advertises it on a listener of its own, so the mirror's bootstrap and per-broker connections all cross it): each " +
			"direction delays bytes by RTT/2, and a connection has at most " + window + " in flight per direction, its share coming " +
			"back when delivered plus RTT/2, so a connection carries at most window/RTT. Default broker configs. Mirrored MB/s: the " +
			"destination's growth from the start of the load until it caught up; vs 0 ms: over the same workload through the proxy at 0 ms.", rep.rttTable()},
		{"Mirror partition scale", scaleAbout, rep.scaleTable()},
		{"Mirror catch-up after a cut link", catchUpAbout, rep.catchUpTable(rep.Limits)},
	}
}
