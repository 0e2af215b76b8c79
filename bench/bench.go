// Package bench is Tandem's benchmark harness (`tandem bench`): it runs
// produce, consume and end-to-end workloads with franz-go against Tandem
// and kfake brokers started as child processes (or against any running
// broker), measures the machine's limits, and reports the figures as a
// table, Markdown and SVG.
package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const usage = `Runs benchmark workloads with franz-go against Tandem and kfake (each in a
child process) or against a running broker (--against), and prints a table.

Usage: tandem bench [flags]

  tandem bench --quick                      reduced matrix, about 2 minutes
  tandem bench --quick --workloads mirror-rtt,mirror-scale,mirror-catchup
                                            reduced mirror workloads of issue 40
  tandem bench --out docs/benchmarks.md     full matrix, Markdown + SVG
  tandem bench --against 127.0.0.1:9092     client workloads against any broker

flags:
`

// Main runs `tandem bench ARGS` and returns the exit code. The Tandem
// brokers it starts have no plugins; see MainWithPlugins.
func Main(args []string) int { return MainWithPlugins(args, nil) }

// MainWithPlugins is Main with the plugins each Tandem broker process gets
// (server.Config.Plugins), so that the benchmark runs the broker that
// `tandem serve` runs. plugins is called once per broker; it may be nil.
func MainWithPlugins(args []string, plugins func() []any) int {
	if len(args) > 0 && args[0] == "broker" {
		return brokerMain(args[1:], plugins)
	}
	fs := flag.NewFlagSet("tandem bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag is one line and --help goes to stdout, as in every tandem command
	fs.Usage = func() {}
	var (
		quick       = fs.Bool("quick", false, "reduced matrix: 1 KiB and 100 B produce, consume backlog, e2e latency, mirror, mirror-unthrottled; 2s runs")
		out         = fs.String("out", "", "write a Markdown report to this file (and a plot next to it, .svg)")
		svg         = fs.String("svg", "", "write the SVG plot to this file (default: --out with .svg)")
		against     = fs.String("against", "", "host:port of a running Kafka-compatible broker (no process metrics)")
		targets     = fs.String("targets", "tandem,kfake", "brokers to start: tandem, kfake")
		kinds       = fs.String("workloads", "produce,consume,e2e", "workload kinds: produce, consume, e2e, mirror, mirror-unthrottled, mirror-rtt, mirror-scale, mirror-catchup (unset: all of them, mirror at 1 KiB and 6 partitions; with --quick: filters the quick matrix and the reduced mirror workloads)")
		sizes       = fs.String("sizes", "100,1024,16384", "record value sizes in bytes")
		partitions  = fs.String("partitions", "1,6,64", "partition counts")
		acks        = fs.String("acks", "1,all", "acks (produce); consume and e2e use all when listed")
		compression = fs.String("compression", "none,zstd", "batch compression: none, zstd")
		duration    = fs.Duration("duration", 3*time.Second, "length of each measured run")
		runs        = fs.Int("runs", 3, "measured runs per workload (median, min, max)")
		limitDur    = fs.Duration("limit-duration", 2*time.Second, "length of each limit measurement; 0 skips the limits")
		seed        = fs.Int64("seed", 1, "payload seed")
		sync        = fs.Bool("sync", true, "brokers fsync before acknowledging (tandem.log.sync, kfake SyncWrites)")
		backlog     = fs.Int64("backlog", 512<<20, "value bytes pre-filled for consume workloads")
		dir         = fs.String("dir", "", "scratch directory (default: a temporary one)")
		profileDir  = fs.String("profile-dir", "", "write CPU and heap profiles of every broker process to this directory")
		mirrorRate  = fs.Float64("mirror-rate", 0, "offered load of the mirror workload, records/s (0: 50% of the matching produce max)")
		restart     = fs.Int64("restart-bytes", 0, "also time a Tandem restart after kill -9 under produce load with this many log bytes on disk (--workloads '' for only that)")
		cluster     = fs.Bool("cluster", false, "also measure replication: produce 1 KiB acks=all RF=3 on three brokers vs RF=1 on one, follower catch-up, leader failover (--workloads '' for only that)")
		catchUp     = fs.Int64("cluster-catchup-bytes", 256<<20, "with --cluster: bytes a stopped follower falls behind before it returns (0: skip)")
		failovers   = fs.Int("cluster-failovers", 20, "with --cluster: leader kills to time (0: skip)")
		props       = kvFlag{}
		mf          = addMirrorFlags(fs)
	)
	fs.Var(props, "set", "Tandem broker property key=value (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(os.Stdout, usage)
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(os.Stderr, "tandem bench: %v (tandem bench --help lists the flags)\n", err)
		return 2
	}
	if *profileDir != "" {
		abs, err := filepath.Abs(*profileDir)
		if err == nil {
			err = os.MkdirAll(abs, 0o755)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "tandem bench:", err)
			return 2
		}
		*profileDir = abs
	}
	r := &Runner{
		Against: *against, Targets: splitList(*targets), Props: props, Sync: *sync,
		LimitDuration: *limitDur, Dir: *dir, Seed: *seed, Backlog: *backlog, Progress: os.Stderr,
		ProfileDir: *profileDir, MirrorRate: *mirrorRate, RestartBytes: *restart,
		Cluster: *cluster, ClusterCatchUpBytes: *catchUp, ClusterFailovers: *failovers,
		ClusterWorkload: Workload{Kind: Produce, RecordSize: 1024, Partitions: 6, Acks: -1, Compression: "none",
			Duration: *duration, Runs: *runs, Seed: *seed},
		Mirrors: mf.options(*quick),
	}
	var err error
	if *quick {
		if r.Workloads, err = quickWithMirrors(*seed, mf, isSet(fs, "workloads"), *kinds); err != nil {
			fmt.Fprintln(os.Stderr, "tandem bench:", err)
			return 2
		}
		if !isSet(fs, "backlog") {
			r.Backlog = 128 << 20
		}
		if !isSet(fs, "limit-duration") {
			r.LimitDuration = time.Second
		}
	} else {
		steady := Workload{Kind: Mirror, RecordSize: 1024, Partitions: 6, Acks: -1, Compression: "none", Duration: *duration, Runs: *runs, Seed: *seed}
		r.Workloads, err = fullWithMirrors(mf, isSet(fs, "workloads"), *kinds, steady, func(kinds string) ([]Workload, error) {
			return matrix(kinds, *sizes, *partitions, *acks, *compression, *duration, *runs, *seed)
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "tandem bench:", err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := r.Run(ctx)
	if rep == nil {
		fmt.Fprintln(os.Stderr, "tandem bench:", err)
		return 1
	}
	rep.Command = strings.TrimSpace("tandem bench " + strings.Join(args, " "))
	return report(rep, err, *out, *svg)
}

// report prints the report, writes its files and checks every result;
// runErr is the error that ended the run early, if any.
func report(rep *Report, runErr error, out, svg string) int {
	rep.WriteText(os.Stdout)
	if out != "" && svg == "" {
		svg = strings.TrimSuffix(out, filepath.Ext(out)) + ".svg"
	}
	if werr := writeReports(rep, out, svg); werr != nil {
		fmt.Fprintln(os.Stderr, "tandem bench:", werr)
		return 1
	}
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "tandem bench:", runErr)
		return 1
	}
	code := 0
	for _, res := range rep.Results {
		if cerr := res.Check(); cerr != nil {
			fmt.Fprintf(os.Stderr, "tandem bench: %s on %s: %v\n", res.Workload.Name(), res.Target, cerr)
			code = 1
		}
	}
	return code
}

// quickWithMirrors is --quick's matrix with mirror-unthrottled, or, with
// --workloads, its workloads of those kinds among the quick matrix and
// the reduced mirror workloads.
func quickWithMirrors(seed int64, mf *mirrorFlags, filter bool, kinds string) ([]Workload, error) {
	if !filter {
		extra, err := mf.workloads(MirrorUnthrottled, true, seed)
		return append(QuickWorkloads(seed), extra...), err
	}
	extra, err := mf.all(true, seed)
	if err != nil {
		return nil, err
	}
	ks := splitList(kinds)
	ws := slices.DeleteFunc(append(QuickWorkloads(seed), extra...), func(w Workload) bool { return !slices.Contains(ks, string(w.Kind)) })
	if len(ws) == 0 {
		return nil, fmt.Errorf("--quick has no workloads of kinds %q", kinds)
	}
	return ws, nil
}

// fullWithMirrors is the full matrix (built by matrix from the kinds
// that are a cross product) followed by the mirror workloads that have
// their own parameters; with --workloads unset, steady and every other
// mirror workload.
func fullWithMirrors(mf *mirrorFlags, filter bool, kinds string, steady Workload, matrix func(kinds string) ([]Workload, error)) ([]Workload, error) {
	var crossed, own []string
	for _, k := range splitList(kinds) {
		if Kind(k).mirrors() && Kind(k) != Mirror {
			own = append(own, k)
		} else {
			crossed = append(crossed, k)
		}
	}
	ws, err := matrix(strings.Join(crossed, ","))
	if err != nil {
		return nil, err
	}
	if !filter {
		extra, err := mf.all(false, steady.Seed)
		return append(append(ws, steady), extra...), err
	}
	for _, k := range own {
		extra, err := mf.workloads(Kind(k), false, steady.Seed)
		if err != nil {
			return nil, err
		}
		ws = append(ws, extra...)
	}
	return ws, nil
}

// QuickWorkloads is the reduced matrix of --quick.
func QuickWorkloads(seed int64) []Workload {
	base := Workload{RecordSize: 1024, Partitions: 6, Acks: -1, Compression: "none", Duration: 2 * time.Second, Runs: 3, Seed: seed}
	w := func(k Kind, size, acks int) Workload {
		x := base
		x.Kind, x.RecordSize, x.Acks = k, size, acks
		return x
	}
	return []Workload{
		w(Produce, 1024, -1),
		w(Produce, 100, 1),
		w(Consume, 1024, -1),
		w(EndToEnd, 1024, -1),
		w(Mirror, 1024, -1),
	}
}

// matrix builds the cross product for produce; consume and e2e use
// acks=all and compression none only, when listed (acks changes nothing for
// a consumer, latency is reported at the durable setting, and this keeps
// the full run near 20 minutes).
func matrix(kinds, sizes, parts, acks, comps string, d time.Duration, runs int, seed int64) ([]Workload, error) {
	sz, err := intList(sizes)
	if err != nil {
		return nil, fmt.Errorf("--sizes: %w", err)
	}
	ps, err := intList(parts)
	if err != nil {
		return nil, fmt.Errorf("--partitions: %w", err)
	}
	var as []int
	for _, a := range splitList(acks) {
		switch a {
		case "all", "-1":
			as = append(as, -1)
		case "1":
			as = append(as, 1)
		default:
			return nil, fmt.Errorf("--acks: %q is not 1 or all", a)
		}
	}
	var ws []Workload
	for _, k := range splitList(kinds) {
		kas, kcs := as, splitList(comps)
		if Kind(k) != Produce && slices.Contains(as, -1) {
			kas = []int{-1}
		}
		if Kind(k) != Produce && slices.Contains(kcs, "none") {
			kcs = []string{"none"}
		}
		for _, s := range sz {
			for _, p := range ps {
				for _, a := range kas {
					for _, c := range kcs {
						w := Workload{Kind: Kind(k), RecordSize: s, Partitions: int32(p), Acks: a, Compression: c, Duration: d, Runs: runs, Seed: seed}
						if err := w.validate(); err != nil {
							return nil, err
						}
						ws = append(ws, w)
					}
				}
			}
		}
	}
	return ws, nil
}

func writeReports(rep *Report, out, svg string) error {
	if svg != "" {
		if err := os.MkdirAll(filepath.Dir(svg), 0o755); err != nil {
			return err
		}
		f, err := os.Create(svg)
		if err != nil {
			return err
		}
		rep.WriteSVG(f)
		if err := f.Close(); err != nil {
			return err
		}
	}
	if out != "" {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		name := ""
		if svg != "" {
			if rel, err := filepath.Rel(filepath.Dir(out), svg); err == nil {
				name = rel
			}
		}
		var md bytes.Buffer
		rep.WriteMarkdown(&md, name)
		return writeGenerated(out, md.Bytes())
	}
	return nil
}

// The generated part of a report file lives between these lines; what is
// written by hand around them stays when the report is regenerated.
const (
	generatedBegin = "<!-- tandem bench: generated from here; edit outside these markers -->\n"
	generatedEnd   = "<!-- tandem bench: generated up to here -->\n"
)

// writeGenerated puts md between the markers of the file at path (a new
// file gets just the markers and md). A file without the markers is left
// untouched, with an error saying what to do.
func writeGenerated(path string, md []byte) error {
	block := append(append([]byte(generatedBegin), md...), generatedEnd...)
	old, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return os.WriteFile(path, block, 0o644)
	}
	if err != nil {
		return err
	}
	i, j := bytes.Index(old, []byte(generatedBegin)), bytes.Index(old, []byte(generatedEnd))
	if i < 0 || j < i {
		return fmt.Errorf("%s has no generated-part markers: put %q and %q around the part to regenerate, or write to a new file", path,
			strings.TrimSpace(generatedBegin), strings.TrimSpace(generatedEnd))
	}
	out := append(append(old[:i:i], block...), old[j+len(generatedEnd):]...)
	return os.WriteFile(path, out, 0o644)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
