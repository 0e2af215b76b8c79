package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tandem-kafka/tandem/internal/localcluster"
)

// childEnv marks a process started as a benchmark broker, so that a test
// binary (whose TestMain checks it) can serve as the broker executable.
const childEnv = "TANDEM_BENCH_BROKER"

// IsBrokerChild reports whether this process was started by the harness to
// run a broker; a TestMain that re-executes its binary calls Main then.
func IsBrokerChild() bool { return os.Getenv(childEnv) == "1" }

// kvFlag collects repeated key=value flags.
type kvFlag map[string]string

func (f kvFlag) String() string { return fmt.Sprint(map[string]string(f)) }
func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", s)
	}
	f[k] = v
	return nil
}

// brokerSpec says which broker to run in this process.
type brokerSpec struct {
	Kind    string // "tandem" or "kfake"
	NodeID  int32  // tandem only
	Dir     string
	Listen  string
	Sync    bool              // fsync before acknowledging
	Props   map[string]string // tandem only
	Plugins func() []any      // tandem only: server.Config.Plugins
}

// brokerMain is the hidden `bench broker` subcommand: it runs one broker
// until its stdin closes (the parent died or is done) or a signal arrives,
// after writing its address to --ready-file.
func brokerMain(args []string, plugins func() []any) int {
	fs := flag.NewFlagSet("bench broker", flag.ContinueOnError)
	kind := fs.String("kind", "tandem", "tandem or kfake")
	dir := fs.String("data-dir", "", "data directory")
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	nodeID := fs.Int("node-id", 1, "node ID (tandem only)")
	ready := fs.String("ready-file", "", "file that receives the bound address once serving")
	sync := fs.Bool("sync", true, "fsync before acknowledging (tandem.log.sync; kfake SyncWrites)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the broker's whole life to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile to this file just before the broker stops")
	props := kvFlag{}
	fs.Var(props, "set", "broker property key=value (tandem only; repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Error("bench broker: cpu profile", "err", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Error("bench broker: cpu profile", "err", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	addr, stop, err := startBroker(brokerSpec{Kind: *kind, NodeID: int32(*nodeID), Dir: *dir, Listen: *listen, Sync: *sync, Props: props, Plugins: plugins}, log)
	if err != nil {
		log.Error("bench broker", "kind", *kind, "err", err)
		return 1
	}
	defer stop()
	if *memProfile != "" {
		defer func() {
			// Written while the broker still runs (this defer runs before
			// stop), so that the profile shows what it holds.
			if f, err := os.Create(*memProfile); err == nil {
				pprof.WriteHeapProfile(f)
				f.Close()
			}
		}()
	}
	if *ready != "" {
		tmp := *ready + ".tmp"
		if err := os.WriteFile(tmp, []byte(addr), 0o644); err == nil {
			err = os.Rename(tmp, *ready)
		}
		if err != nil {
			log.Error("bench broker: ready file", "err", err)
			return 1
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	eof := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(eof) }()
	select {
	case <-sig:
	case <-eof:
	}
	return 0
}

// startBroker starts a broker of the given kind in this process.
func startBroker(spec brokerSpec, log *slog.Logger) (addr string, stop func(), err error) {
	switch spec.Kind {
	case "kfake":
		// kfake persists to spec.Dir and, with Sync, fsyncs every batch:
		// the same durability as Tandem's tandem.log.sync.
		_, portStr, err := net.SplitHostPort(spec.Listen)
		if err != nil {
			return "", nil, fmt.Errorf("listen %q: %w", spec.Listen, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return "", nil, fmt.Errorf("listen %q: %w", spec.Listen, err)
		}
		opts := []kfake.Opt{kfake.Ports(port), kfake.NumBrokers(1)}
		if spec.Dir != "" {
			opts = append(opts, kfake.DataDir(spec.Dir))
			if spec.Sync {
				opts = append(opts, kfake.SyncWrites())
			}
		}
		c, err := kfake.NewCluster(opts...)
		if err != nil {
			return "", nil, fmt.Errorf("kfake: %w", err)
		}
		return c.ListenAddrs()[0], c.Close, nil
	case "tandem":
		return startTandem(spec, log)
	}
	return "", nil, fmt.Errorf("unknown broker kind %q", spec.Kind)
}

// brokerProc is a broker running in a child process.
type brokerProc struct {
	Kind  string
	Addr  string
	Pid   int
	proc  *localcluster.Proc
	stdin io.WriteCloser // closed: the broker exits
}

// spawnBroker runs argv + the broker flags and waits until the broker
// serves. Its stderr goes to dir/broker.log.
// With profileDir set, the broker writes CPU and heap profiles there,
// named after dir's last element.
// extra flags follow the others (a repeated flag's last value counts).
func spawnBroker(ctx context.Context, argv []string, kind, dir string, sync bool, props map[string]string, profileDir string, extra ...string) (*brokerProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ready := filepath.Join(dir, "ready")
	args := append(argv[1:len(argv):len(argv)], "--kind", kind, "--data-dir", filepath.Join(dir, "data"),
		"--listen", "127.0.0.1:0", "--ready-file", ready, "--sync="+strconv.FormatBool(sync))
	for k, v := range props {
		args = append(args, "--set", k+"="+v)
	}
	args = append(args, extra...)
	if profileDir != "" {
		name := filepath.Join(profileDir, filepath.Base(dir))
		args = append(args, "--cpuprofile", name+".cpu.pprof", "--memprofile", name+".heap.pprof")
	}
	cmd := exec.Command(argv[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// A fresh log (localcluster.Start appends): its tail, in an error, is
	// this broker's own.
	logPath := filepath.Join(dir, "broker.log")
	os.Remove(logPath)
	proc, err := localcluster.Start(cmd, logPath)
	if err != nil {
		stdin.Close()
		return nil, fmt.Errorf("start %s broker: %w", kind, err)
	}
	b := &brokerProc{Kind: kind, Pid: proc.PID(), proc: proc, stdin: stdin}

	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	addr, err := proc.WaitFile(wctx, ready)
	switch {
	case err == nil:
		b.Addr = string(addr)
		return b, nil
	case errors.Is(err, localcluster.ErrExited):
		return nil, fmt.Errorf("%s broker exited before serving: %s", kind, b.logTail())
	case ctx.Err() != nil:
		b.Stop()
		return nil, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		b.Stop()
		return nil, fmt.Errorf("%s broker not serving after 60s: %s", kind, b.logTail())
	}
	b.Stop()
	return nil, fmt.Errorf("%s broker: %w", kind, err)
}

func (b *brokerProc) logTail() string { return strings.TrimSpace(b.proc.Log(2000)) }

// Stop asks the broker to exit (stdin EOF), then kills it after 20s.
func (b *brokerProc) Stop() error {
	b.stdin.Close()
	if !b.proc.ExitWithin(20 * time.Second) {
		return fmt.Errorf("%s broker did not exit in 20s; killed", b.Kind)
	}
	if code := b.proc.State().ExitCode(); code != 0 {
		return fmt.Errorf("%s broker exited with %d: %s", b.Kind, code, b.logTail())
	}
	return nil
}

// procStats are counters of a process read from /proc.
type procStats struct {
	CPU        time.Duration // user + system time
	PeakRSS    int64         // VmHWM, bytes
	RSS        int64         // VmRSS, bytes
	WriteBytes int64         // bytes the process caused to be sent to storage
}

// readProc reads /proc/PID/{stat,status,io}.
func readProc(pid int) (procStats, error) {
	var s procStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name (field 2) may contain spaces: fields count from
	// after its closing parenthesis; utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return s, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return s, errors.New("short /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return s, fmt.Errorf("/proc stat: %w", err)
	}
	const userHZ = 100 // /proc reports clock ticks of USER_HZ, 100 on Linux
	s.CPU = time.Duration(utime+stime) * time.Second / userHZ

	if err := scanProcFile(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:", func(v string) {
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		s.PeakRSS = kb << 10
	}); err != nil {
		return s, err
	}
	if err := scanProcFile(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:", func(v string) {
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		s.RSS = kb << 10
	}); err != nil {
		return s, err
	}
	if err := scanProcFile(fmt.Sprintf("/proc/%d/io", pid), "write_bytes:", func(v string) {
		s.WriteBytes, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	}); err != nil {
		return s, err
	}
	return s, nil
}

func scanProcFile(path, key string, fn func(string)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			fn(v)
			return nil
		}
	}
	return fmt.Errorf("%s: no %s", path, key)
}
