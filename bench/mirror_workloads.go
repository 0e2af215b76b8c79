package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The mirror workloads run two Tandem brokers in child processes, a
// source and a destination that mirrors it (plugins/mirror); kfake and a
// broker given with --against have no mirroring, and show "-".
const (
	// Mirror produces on the source at a steady offered load (50% of the
	// matching produce maximum, or --mirror-rate) and measures the rate
	// mirrored, the lag and the cost per byte on both sides.
	Mirror Kind = "mirror"
	// MirrorUnthrottled produces on the source as fast as it
	// acknowledges: the mirror keeps up only if a mirrored byte costs the
	// destination no more than a produced byte costs the source.
	MirrorUnthrottled Kind = "mirror-unthrottled"
	// MirrorRTT is the steady workload at a fixed offered load across a
	// WAN proxy of a given round trip (Workload.RTT).
	MirrorRTT Kind = "mirror-rtt"
	// MirrorScale mirrors Workload.Partitions idle partitions (topics of
	// 50, a few records each) by a topic pattern: time to caught up, and
	// each side's idle CPU and memory.
	MirrorScale Kind = "mirror-scale"
	// MirrorCatchUp cuts the link while the source takes a backlog, then
	// restores it: catch-up time and rate, and the latency of a local
	// producer on the destination meanwhile against none mirroring.
	MirrorCatchUp Kind = "mirror-catchup"
)

func (k Kind) mirrors() bool {
	switch k {
	case Mirror, MirrorUnthrottled, MirrorRTT, MirrorScale, MirrorCatchUp:
		return true
	}
	return false
}

// MirrorOptions are the parameters of the mirror workloads beyond their
// Workload; zero values take the defaults.
type MirrorOptions struct {
	// RTTBytesPerSec is mirror-rtt's offered load, value bytes a second
	// (default 95 MB/s, as issue 40 measured).
	RTTBytesPerSec float64
	// Window is the WAN proxy's window per connection and direction
	// (default: what Linux autotunes a receive window to here,
	// net.ipv4.tcp_rmem's maximum).
	Window int64
	// ScaleRecords are the records per partition of mirror-scale (default
	// 3); ScaleIdle the idle window whose CPU it measures (default 30 s, the
	// default mirror.metadata.refresh.interval.ms: periodic work is idle
	// cost).
	ScaleRecords int
	ScaleIdle    time.Duration
	// ScaleSettle is how long mirror-scale leaves the brokers alone
	// after the catch-up before the idle window (default 20 s), so that
	// the catch-up's own work is not counted as idle cost.
	ScaleSettle time.Duration
	// CatchUpBytes is mirror-catchup's backlog in value bytes (default
	// 2 GiB); CatchUpLocalRate the destination's local producer in
	// records/s (default 1000); CatchUpBaseline how long that producer is
	// measured with no mirror (default 10 s).
	CatchUpBytes     int64
	CatchUpLocalRate float64
	CatchUpBaseline  time.Duration
	// CatchUpRTT is the round trip of mirror-catchup's link (default 0:
	// the catch-up is then bound by this machine's disk and CPU).
	CatchUpRTT time.Duration
}

func (o MirrorOptions) rttBytesPerSec() float64 { return orDefault(o.RTTBytesPerSec, 95e6) }
func (o MirrorOptions) window() int64 {
	if o.Window > 0 {
		return o.Window
	}
	return min(tcpWindow(), tcpSendBuffer())
}
func (o MirrorOptions) scaleRecords() int          { return orDefault(o.ScaleRecords, 3) }
func (o MirrorOptions) scaleIdle() time.Duration   { return orDefault(o.ScaleIdle, 30*time.Second) }
func (o MirrorOptions) scaleSettle() time.Duration { return orDefault(o.ScaleSettle, 20*time.Second) }
func (o MirrorOptions) catchUpBytes() int64        { return orDefault(o.CatchUpBytes, 2<<30) }
func (o MirrorOptions) catchUpLocalRate() float64  { return orDefault(o.CatchUpLocalRate, 1000) }
func (o MirrorOptions) catchUpBaseline() time.Duration {
	return orDefault(o.CatchUpBaseline, 10*time.Second)
}

func orDefault[T int | int64 | float64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// runMirrorWorkload runs a mirror workload on Tandem and shows it as not
// applicable on the other targets.
func (r *Runner) runMirrorWorkload(ctx context.Context, rep *Report, dir string, w Workload, targets []string, refs map[string]produceRef) {
	tandem := false
	for _, target := range targets {
		if target == "tandem" && r.Against == "" {
			tandem = true
			continue
		}
		r.logf("%-8s %-36s -: no mirroring", target, w.Name())
		rep.Results = append(rep.Results, Result{Workload: w, Target: target, Skip: "no mirroring"})
	}
	if !tandem {
		return
	}
	res, err := r.runMirrorKind(ctx, dir, w, refs)
	if err != nil {
		r.fail(rep, w, "tandem", err)
		return
	}
	r.logf("%-8s %-36s %s", "tandem", w.Name(), res.mirrorLine())
	rep.Results = append(rep.Results, res)
}

// runMirrorKind runs one mirror workload. Those that move bytes are
// compared with Tandem's produce of the same records in the same run.
func (r *Runner) runMirrorKind(ctx context.Context, dir string, w Workload, refs map[string]produceRef) (Result, error) {
	var ref produceRef
	if w.Kind != MirrorScale {
		var err error
		ref, err = r.produceRefFor(ctx, refs, "tandem", dir, w)
		if err != nil && w.Kind == Mirror && r.MirrorRate <= 0 {
			return Result{}, fmt.Errorf("measuring the max: %w", err)
		}
		if err != nil {
			r.logf("%s: no produce figures to compare with: %v", w.Name(), err)
		}
	}
	var (
		res Result
		err error
	)
	switch w.Kind {
	case Mirror:
		offered := r.MirrorRate
		if offered <= 0 {
			offered = ref.recsPerSec / 2
		}
		if offered <= 0 {
			return Result{}, errors.New("no produce rate measured to offer half of")
		}
		res, err = r.runMirror(ctx, dir, w, offered, nil)
	case MirrorUnthrottled:
		res, err = r.runMirror(ctx, dir, w, 0, nil)
	case MirrorRTT:
		offered := r.Mirrors.rttBytesPerSec() / float64(w.RecordSize)
		res, err = r.runMirror(ctx, dir, w, offered, &wanLink{RTT: w.RTT, Window: r.Mirrors.window()})
	case MirrorScale:
		res, err = r.runMirrorScale(ctx, dir, w)
	case MirrorCatchUp:
		res, err = r.runMirrorCatchUp(ctx, dir, w)
	}
	if res.Mirror != nil {
		res.Mirror.ProduceCPUSecPerGB = ref.cpuPerGB
	}
	if res.CatchUp != nil {
		res.CatchUp.ProduceCPUSecPerGB = ref.cpuPerGB
	}
	return res, err
}
