package bench

import (
	"flag"
	"fmt"
	"time"
)

// mirrorFlags are the flags of the mirror workloads of issue 40.
type mirrorFlags struct {
	fs                  *flag.FlagSet
	rtts                *string
	rttMBps             *float64
	rttDuration         *time.Duration
	window              *int64
	unthrottledDuration *time.Duration
	scale               *string
	scaleRecords        *int
	scaleIdle           *time.Duration
	scaleSettle         *time.Duration
	catchUpBytes        *int64
	catchUpLocalRate    *float64
	catchUpBaseline     *time.Duration
	catchUpRTT          *time.Duration
}

func addMirrorFlags(fs *flag.FlagSet) *mirrorFlags {
	return &mirrorFlags{
		fs:                  fs,
		rtts:                fs.String("mirror-rtts", "0,100ms,200ms", "mirror-rtt: round trips between the clusters (--quick: the same)"),
		rttMBps:             fs.Float64("mirror-rtt-mbps", 95, "mirror-rtt: offered load on the source, MB/s of 1 KiB values (acks=all)"),
		rttDuration:         fs.Duration("mirror-rtt-duration", 20*time.Second, "mirror-rtt: length of the load at each round trip (--quick: 5s)"),
		window:              fs.Int64("mirror-window", 0, "mirror-rtt, mirror-catchup: the WAN proxy's window per connection and direction, bytes (0: the smaller of net.ipv4.tcp_rmem's and tcp_wmem's maximums, what Linux lets one connection have in flight)"),
		unthrottledDuration: fs.Duration("mirror-unthrottled-duration", 20*time.Second, "mirror-unthrottled: length of the load (--quick: 6s)"),
		scale:               fs.String("mirror-scale", "1000,10000,50000", "mirror-scale: idle mirrored partitions, in topics of 50 (--quick: 500,2000)"),
		scaleRecords:        fs.Int("mirror-scale-records", 3, "mirror-scale: records per partition"),
		scaleIdle:           fs.Duration("mirror-scale-idle", 30*time.Second, "mirror-scale: idle window whose CPU is measured; periodic work such as the 30 s metadata refresh belongs in it (--quick: 5s)"),
		scaleSettle:         fs.Duration("mirror-scale-settle", 20*time.Second, "mirror-scale: time left to the brokers after the catch-up, before the idle window (--quick: 5s)"),
		catchUpBytes:        fs.Int64("mirror-catchup-bytes", 2<<30, "mirror-catchup: backlog built while the link is cut, value bytes (--quick: 128 MiB)"),
		catchUpLocalRate:    fs.Float64("mirror-catchup-local-rate", 1000, "mirror-catchup: records/s of 1 KiB of the destination's local acks=all producer"),
		catchUpBaseline:     fs.Duration("mirror-catchup-baseline", 10*time.Second, "mirror-catchup: how long the local producer is measured with no mirror (--quick: 3s)"),
		catchUpRTT:          fs.Duration("mirror-catchup-rtt", 0, "mirror-catchup: round trip of the restored link"),
	}
}

// quickDefault is v, or q under --quick when the flag was not given.
func quickDefault[T any](f *mirrorFlags, quick bool, name string, v, q T) T {
	if quick && !isSet(f.fs, name) {
		return q
	}
	return v
}

// options are the Runner's MirrorOptions.
func (f *mirrorFlags) options(quick bool) MirrorOptions {
	return MirrorOptions{
		RTTBytesPerSec:   *f.rttMBps * 1e6,
		Window:           *f.window,
		ScaleRecords:     *f.scaleRecords,
		ScaleIdle:        quickDefault(f, quick, "mirror-scale-idle", *f.scaleIdle, 5*time.Second),
		ScaleSettle:      quickDefault(f, quick, "mirror-scale-settle", *f.scaleSettle, 5*time.Second),
		CatchUpBytes:     quickDefault(f, quick, "mirror-catchup-bytes", *f.catchUpBytes, 128<<20),
		CatchUpLocalRate: *f.catchUpLocalRate,
		CatchUpBaseline:  quickDefault(f, quick, "mirror-catchup-baseline", *f.catchUpBaseline, 3*time.Second),
		CatchUpRTT:       *f.catchUpRTT,
	}
}

// workloads returns the workloads of a mirror kind other than mirror:
// 1 KiB records, acks=all, no compression, one run each (their runs are
// long, and each round trip or partition count is a row of its own).
func (f *mirrorFlags) workloads(k Kind, quick bool, seed int64) ([]Workload, error) {
	base := Workload{Kind: k, RecordSize: 1024, Partitions: 6, Acks: -1, Compression: "none", Duration: 2 * time.Second, Runs: 1, Seed: seed}
	switch k {
	case MirrorUnthrottled:
		base.Duration = quickDefault(f, quick, "mirror-unthrottled-duration", *f.unthrottledDuration, 6*time.Second)
		return []Workload{base}, nil
	case MirrorRTT:
		base.Duration = quickDefault(f, quick, "mirror-rtt-duration", *f.rttDuration, 5*time.Second)
		var ws []Workload
		for _, s := range splitList(*f.rtts) {
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("--mirror-rtts: %q is not a round trip such as 100ms", s)
			}
			w := base
			w.RTT = d
			ws = append(ws, w)
		}
		return ws, nil
	case MirrorScale:
		ns, err := intList(quickDefault(f, quick, "mirror-scale", *f.scale, "500,2000"))
		if err != nil {
			return nil, fmt.Errorf("--mirror-scale: %w", err)
		}
		var ws []Workload
		for _, n := range ns {
			w := base
			w.Partitions = int32(n)
			ws = append(ws, w)
		}
		return ws, nil
	case MirrorCatchUp:
		return []Workload{base}, nil
	}
	return nil, fmt.Errorf("%s is not a mirror workload of its own", k)
}

// all returns the workloads of every mirror kind but mirror.
func (f *mirrorFlags) all(quick bool, seed int64) ([]Workload, error) {
	var ws []Workload
	for _, k := range []Kind{MirrorUnthrottled, MirrorRTT, MirrorScale, MirrorCatchUp} {
		kw, err := f.workloads(k, quick, seed)
		if err != nil {
			return nil, err
		}
		ws = append(ws, kw...)
	}
	return ws, nil
}
