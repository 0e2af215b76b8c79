package main

import (
	"context"
	"encoding/json"
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/tandem-kafka/tandem/internal/localcluster"
)

const clusterDoc = `Starts a local cluster of N brokers in one command, for tryouts and demos:
N tandem serve processes on this machine, each a voter of the metadata
quorum (controller.quorum.voters), and prints the bootstrap servers once
every broker is registered. SIGTERM or Ctrl-C stops every broker with a
controlled shutdown; a broker killed meanwhile is reported and the others
keep serving; typing "r N" (or "restart N") here, or running tandem cluster
restart N --data-dir DIR elsewhere, starts node N again (a running node is
stopped first, with a controlled shutdown). tandem cluster describe and
health look at any running cluster (tandem cluster describe --help).

Usage: tandem cluster [flags]
       tandem cluster describe|health [--bootstrap-server HOST:PORT,...]
       tandem cluster restart N --data-dir DIR

Broker i (1..N) is node i. It serves Kafka on the port of --listen-base plus
i-1, the controller quorum on that port plus 100 (9192, 9193, 9194 for
the default base) and HTTP (/metrics, /healthz) on the port of --http-base
plus i-1. A base with port 0 picks free ports. Its data is in
DIR/node-i and its log in DIR/node-i.log. A second run with the same
--data-dir restarts the same cluster: the number of brokers and their
addresses are recorded in DIR/cluster.json and reused.

Topics and the internal topics get replication factor min(3, N)
(default.replication.factor, offsets.topic.replication.factor,
transaction.state.log.replication.factor); --set overrides any property on
every broker.

Exit status: 0 after a clean stop, 2 when the command line is invalid
(nothing was started), 1 when a broker failed to start or to stop.
`

// clusterChildEnv is set in the environment of the brokers `tandem
// cluster` starts. The brokers are this executable's `serve`; a test
// binary, whose TestMain checks the variable, runs `serve` then too.
const clusterChildEnv = "TANDEM_CLUSTER_CHILD"

// clusterLayout is what DIR/cluster.json records: the nodes and their
// addresses, so that a second run starts the same cluster.
type clusterLayout struct {
	Brokers    int      `json:"brokers"`
	Kafka      []string `json:"kafka"`
	Controller []string `json:"controller"`
	HTTP       []string `json:"http,omitempty"`
}

// clusterReady is what --ready-file holds once the cluster serves.
type clusterReady struct {
	Bootstrap string `json:"bootstrap"` // comma-separated Kafka addresses
	PIDs      []int  `json:"pids"`      // the brokers' processes, node 1 first
	DataDir   string `json:"data_dir"`
}

type clusterOptions struct {
	brokers    int
	dataDir    string
	listenBase string
	httpBase   string
	readyFile  string
	logLevel   string
	timeout    time.Duration
	sets       []string
}

func cluster(args []string, stdout, stderr io.Writer) int {
	if code, ok := clusterVerb(args, stdout, stderr); ok {
		return code
	}
	fs := cli.NewFlags("cluster", clusterDoc)
	var o clusterOptions
	fs.IntVar(&o.brokers, "brokers", 3, "number of brokers (1 to 50)")
	fs.StringVar(&o.dataDir, "data-dir", "", "directory holding every broker's data and log (default: a temporary directory, removed at exit)")
	fs.StringVar(&o.listenBase, "listen-base", "127.0.0.1:9092", "Kafka address of node 1; node i listens on its port + i-1 (port 0: free ports)")
	fs.StringVar(&o.httpBase, "http-base", "127.0.0.1:9644", "HTTP address of node 1; node i on its port + i-1 (port 0: free ports; empty: none)")
	fs.StringVar(&o.readyFile, "ready-file", "", "once serving, write {\"bootstrap\":ADDRS,\"pids\":[...],\"data_dir\":DIR} as JSON to this `FILE`")
	fs.StringVar(&o.logLevel, "log-level", "info", "brokers' log level: debug, info, warn or error")
	fs.DurationVar(&o.timeout, "start-timeout", 2*time.Minute, "give up when the cluster does not serve within this long")
	fs.Func("set", "broker property `key=value` for every broker (repeatable)", func(s string) error {
		if _, _, err := parseSet(s); err != nil {
			return errors.New("want key=value")
		}
		o.sets = append(o.sets, s)
		return nil
	})
	if code, done := fs.ParseArgs(args, stdout, stderr); done {
		return code
	}
	explicit := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	return cli.Exit(stderr, "cluster", o.run(fs, explicit, stdout, stderr))
}

func (o *clusterOptions) run(fs *cli.Flags, explicit map[string]bool, stdout, stderr io.Writer) error {
	if fs.NArg() > 0 {
		return cli.UsageErrorf("unexpected arguments %q", fs.Args())
	}
	if o.brokers < 1 || o.brokers > 50 {
		return cli.UsageErrorf("--brokers %d: want 1 to 50", o.brokers)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return cli.UsageErrorf("--log-level: %v", err)
	}
	for _, s := range o.sets {
		if k, _, _ := parseSet(s); k == "controller.quorum.voters" || k == "node.id" || k == "broker.id" {
			return cli.UsageErrorf("--set %s: tandem cluster sets it for each broker", k)
		}
	}

	temporary := o.dataDir == ""
	dir := o.dataDir
	if temporary {
		var err error
		if dir, err = os.MkdirTemp("", "tandem-cluster-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return cli.UsageErrorf("--data-dir: %v", err)
		}
		dir = abs
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return cli.UsageErrorf("--data-dir: %v", err)
		}
	}
	layout, err := o.layout(dir, explicit)
	if err != nil {
		return err
	}

	// Signals from here on stop the cluster, also while it starts.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	c := &localCluster{dir: dir, layout: layout, stderr: stderr}
	if err := c.start(ctx, o); err != nil {
		// Whether a signal ended the start is read before c.stop: it
		// calls stop, which cancels ctx too, and every failure would
		// then look like Ctrl-C (exit 0, no message).
		signalled := ctx.Err() != nil
		// A node that failed takes the others down: a half cluster is
		// not what was asked for.
		c.stop(stop)
		if signalled {
			return nil // stopped by a signal while starting
		}
		return err
	}
	bootstrap := strings.Join(layout.Kafka, ",")
	fmt.Fprintf(stdout, "tandem cluster: %d brokers serving\n\n", layout.Brokers)
	fmt.Fprintf(stdout, "bootstrap servers  %s\n", bootstrap)
	for i := range layout.Brokers {
		line := fmt.Sprintf("node %-2d  kafka %s  controller %s", i+1, layout.Kafka[i], layout.Controller[i])
		if len(layout.HTTP) > 0 {
			line += "  http " + layout.HTTP[i]
		}
		fmt.Fprintf(stdout, "%s  pid %d  log %s\n", line, c.nodes[i].proc.PID(), c.nodes[i].logPath)
	}
	if temporary {
		fmt.Fprintf(stdout, "data dir           %s (removed at exit; --data-dir keeps it)\n", dir)
	} else {
		fmt.Fprintf(stdout, "data dir           %s (tandem cluster --data-dir %s starts this cluster again)\n", dir, dir)
	}
	requests := make(chan restartRequest)
	closeControl, err := listenControl(dir, requests)
	if err != nil {
		fmt.Fprintf(stderr, "tandem cluster: no control socket (%v): restart nodes by typing r N here\n", err)
	}
	defer closeControl()
	go readRestartKeys(ctx, stdin, stdout, requests)
	fmt.Fprintf(stdout, "\nCtrl-C or SIGTERM stops every broker; r N (or tandem cluster restart N --data-dir %s) restarts node N.\n", dir)
	c.readyFile, c.bootstrap = o.readyFile, bootstrap
	if err := c.writeReady(); err != nil {
		c.stop(stop)
		return err
	}
	if o.readyFile != "" {
		defer os.Remove(o.readyFile)
	}

	werr := c.watch(ctx, requests)
	return errors.Join(werr, c.stop(stop))
}

// writeReady writes --ready-file: the bootstrap list and the brokers'
// processes (again after a restart, so that it names the running ones).
func (c *localCluster) writeReady() error {
	if c.readyFile == "" {
		return nil
	}
	ready := clusterReady{Bootstrap: c.bootstrap, DataDir: c.dir}
	for _, n := range c.nodes {
		ready.PIDs = append(ready.PIDs, n.proc.PID())
	}
	data, _ := json.Marshal(ready)
	return writeFileAtomic(c.readyFile, data)
}

// layout returns the cluster's nodes and addresses: the ones recorded in
// dir, or new ones from the flags (then recorded). Flags given explicitly
// must agree with a recorded cluster.
func (o *clusterOptions) layout(dir string, explicit map[string]bool) (*clusterLayout, error) {
	path := filepath.Join(dir, "cluster.json")
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		var l clusterLayout
		if err := json.Unmarshal(data, &l); err != nil || l.Brokers < 1 || len(l.Kafka) != l.Brokers || len(l.Controller) != l.Brokers {
			return nil, fmt.Errorf("%s is not a tandem cluster layout (%v); use another --data-dir", path, err)
		}
		if explicit["brokers"] && o.brokers != l.Brokers {
			return nil, cli.UsageErrorf("--data-dir %s holds a cluster of %d brokers, not %d; use another --data-dir", dir, l.Brokers, o.brokers)
		}
		if explicit["listen-base"] && !sameBase(o.listenBase, l.Kafka[0]) {
			return nil, cli.UsageErrorf("--data-dir %s holds a cluster listening on %s, not %s; use another --data-dir", dir, l.Kafka[0], o.listenBase)
		}
		if explicit["http-base"] && !sameHTTP(o.httpBase, l.HTTP) {
			return nil, cli.UsageErrorf("--data-dir %s holds a cluster with HTTP on %q, not %q; use another --data-dir", dir, strings.Join(l.HTTP, ","), o.httpBase)
		}
		return &l, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	l := &clusterLayout{Brokers: o.brokers}
	if l.Kafka, err = portRange(o.listenBase, 0, o.brokers); err != nil {
		return nil, cli.UsageErrorf("--listen-base: %v", err)
	}
	if l.Controller, err = portRange(o.listenBase, 100, o.brokers); err != nil {
		return nil, cli.UsageErrorf("--listen-base: %v", err)
	}
	if o.httpBase != "" {
		if l.HTTP, err = portRange(o.httpBase, 0, o.brokers); err != nil {
			return nil, cli.UsageErrorf("--http-base: %v", err)
		}
	}
	all := slices.Concat(l.Kafka, l.Controller, l.HTTP)
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			return nil, cli.UsageErrorf("address %s would serve two things (Kafka ports %s, controller ports %s, HTTP ports %s); choose other bases",
				all[i], strings.Join(l.Kafka, ","), strings.Join(l.Controller, ","), strings.Join(l.HTTP, ","))
		}
	}
	data, _ = json.MarshalIndent(l, "", "  ")
	if err := writeFileAtomic(path, append(data, '\n')); err != nil {
		return nil, err
	}
	return l, nil
}

// sameBase reports whether base (a flag) names addr, node 1's address: the
// same host and port, or the same host and port 0 (free ports were picked).
func sameBase(base, addr string) bool {
	bh, bp, err1 := net.SplitHostPort(base)
	ah, ap, err2 := net.SplitHostPort(addr)
	return err1 == nil && err2 == nil && bh == ah && (bp == ap || bp == "0")
}

// sameHTTP reports whether --http-base base names the recorded HTTP
// addresses (none for an empty base).
func sameHTTP(base string, recorded []string) bool {
	if base == "" || len(recorded) == 0 {
		return base == "" && len(recorded) == 0
	}
	return sameBase(base, recorded[0])
}

// portRange returns n addresses on base's host from its port plus offset
// on, or n free ports of the host when base's port is 0.
func portRange(base string, offset, n int) ([]string, error) {
	host, portStr, err := net.SplitHostPort(base)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("%q: bad port", base)
	}
	if port == 0 {
		return localcluster.FreeAddrs(host, n)
	}
	if port+offset+n-1 > 65535 {
		return nil, fmt.Errorf("%q: ports up to %d needed, above 65535", base, port+offset+n-1)
	}
	out := make([]string, n)
	for i := range n {
		out[i] = net.JoinHostPort(host, strconv.Itoa(port+offset+i))
	}
	return out, nil
}

// localCluster is the brokers of one `tandem cluster`, each a child
// process.
type localCluster struct {
	dir       string
	layout    *clusterLayout
	stderr    io.Writer
	nodes     []*clusterNode
	exe       string        // this executable, whose serve the brokers run
	timeout   time.Duration // --start-timeout, for a restart too
	readyFile string
	bootstrap string
	exits     chan nodeExit // a node's process ended (see watch)
}

type clusterNode struct {
	id      int
	args    []string // its tandem serve command line
	proc    *localcluster.Proc
	logPath string
	ready   string
	gone    bool // exited on its own while the cluster served, and reported
	run     int  // counts its starts: an exit of an earlier run is old news
}

// nodeExit is the end of one run of a node's process.
type nodeExit struct {
	n   *clusterNode
	run int
}

// launch starts the node's process (again, for a restart) and reports
// its exit on c.exits.
func (c *localCluster) launch(n *clusterNode) error {
	os.Remove(n.ready)
	cmd := exec.Command(c.exe, n.args...)
	cmd.Env = append(os.Environ(), clusterChildEnv+"=1")
	// Its own process group, so that Ctrl-C in a terminal reaches
	// only this process, which stops the brokers one clean way; and,
	// on Linux, SIGTERM to the broker when this process dies.
	cmd.SysProcAttr = childProcAttr()
	proc, err := localcluster.Start(cmd, n.logPath)
	if err != nil {
		return fmt.Errorf("start node %d: %w", n.id, err)
	}
	n.proc = proc
	n.run++
	n.gone = false
	ev := nodeExit{n, n.run}
	go func() {
		<-proc.Done()
		c.exits <- ev // buffered: one slot per node and run is never needed at once
	}()
	return nil
}

// start starts every broker and waits until each serves and the cluster
// lists all of them as live.
func (c *localCluster) start(ctx context.Context, o *clusterOptions) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the tandem executable: %w", err)
	}
	c.exe, c.timeout, c.exits = exe, o.timeout, make(chan nodeExit, 2*c.layout.Brokers)
	rf := strconv.Itoa(min(3, c.layout.Brokers))
	sets := []string{
		"controller.quorum.voters=" + localcluster.Voters(c.layout.Controller),
		"default.replication.factor=" + rf,
		"offsets.topic.replication.factor=" + rf,
		"transaction.state.log.replication.factor=" + rf,
	}
	sets = append(sets, o.sets...) // the user's win: the last --set of a key counts
	for i := range c.layout.Brokers {
		n := &clusterNode{id: i + 1,
			logPath: filepath.Join(c.dir, fmt.Sprintf("node-%d.log", i+1)),
			ready:   filepath.Join(c.dir, fmt.Sprintf("node-%d.ready", i+1))}
		http := ""
		if len(c.layout.HTTP) > 0 {
			http = c.layout.HTTP[i]
		}
		args := []string{"serve", "--node-id", strconv.Itoa(n.id),
			"--data-dir", filepath.Join(c.dir, fmt.Sprintf("node-%d", n.id)),
			"--listen", c.layout.Kafka[i], "--http", http, "--ready-file", n.ready, "--log-level", o.logLevel}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		n.args = args
		if err := c.launch(n); err != nil {
			return err
		}
		c.nodes = append(c.nodes, n)
	}

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	for _, n := range c.nodes {
		if err := c.awaitServing(ctx, n); err != nil {
			return err
		}
	}
	// Metadata through node 1 lists every broker once each is registered
	// with the controller and unfenced.
	return localcluster.WaitLive(ctx, c.layout.Kafka[:1], c.layout.Brokers, func() error {
		for _, n := range c.nodes {
			if !n.proc.Running() {
				return fmt.Errorf("node %d exited while the cluster formed (%v): %s", n.id, n.proc.State(), n.lastLines())
			}
		}
		return nil
	})
}

// awaitServing waits until node n has written its ready file: it serves.
func (c *localCluster) awaitServing(ctx context.Context, n *clusterNode) error {
	_, err := n.proc.WaitFile(ctx, n.ready)
	switch {
	case errors.Is(err, localcluster.ErrExited):
		return fmt.Errorf("node %d exited before serving (%v): %s", n.id, n.proc.State(), n.lastLines())
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("node %d not serving after %v; its log %s: %s", n.id, c.timeout, n.logPath, n.lastLines())
	}
	return err
}

// watch reports brokers that exit on their own and restarts the nodes
// asked for, until ctx is done (a signal) or every broker has exited;
// then it returns an error.
func (c *localCluster) watch(ctx context.Context, requests <-chan restartRequest) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-c.exits:
			n := ev.n
			if ev.run != n.run {
				continue // the process a restart stopped
			}
			n.gone = true
			left := slices.IndexFunc(c.nodes, func(x *clusterNode) bool { return !x.gone }) >= 0
			if !left {
				last := c.nodes[len(c.nodes)-1]
				for _, n := range c.nodes {
					if n.proc.State().ExitCode() != 0 {
						last = n
					}
				}
				return fmt.Errorf("every broker exited; node %d (%v): %s", last.id, last.proc.State(), last.lastLines())
			}
			fmt.Fprintf(c.stderr, "tandem cluster: node %d exited (%v); the others keep serving; its log: %s; r %d here (or tandem cluster restart %d --data-dir %s) starts it again\n",
				n.id, n.proc.State(), n.logPath, n.id, n.id, c.dir)
		case req := <-requests:
			msg, err := c.restart(ctx, req.node)
			req.reply <- restartResult{msg, err}
		}
	}
}

// restart starts node id again: a running node is stopped first (SIGTERM,
// a controlled shutdown; SIGKILL after a minute). It returns once the
// node serves, or why it does not.
func (c *localCluster) restart(ctx context.Context, id int) (string, error) {
	if id < 1 || id > len(c.nodes) {
		return "", fmt.Errorf("no node %d: this cluster has nodes 1 to %d", id, len(c.nodes))
	}
	n := c.nodes[id-1]
	if n.proc.Running() {
		n.run++ // its exit is expected now
		n.proc.Stop(time.Minute)
	}
	if err := c.launch(n); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.awaitServing(ctx, n); err != nil {
		return "", err
	}
	if err := c.writeReady(); err != nil {
		return "", err
	}
	return fmt.Sprintf("node %d serving again (pid %d)", n.id, n.proc.PID()), nil
}

// stop sends SIGTERM to every running broker at once (each moves its
// leaderships away and exits) and waits for them; a second signal kills
// them, and a broker still running after a minute gets SIGQUIT (its
// goroutines in its log) and then SIGKILL. It returns an error naming
// the brokers that did not stop cleanly.
func (c *localCluster) stop(restoreSignals func()) error {
	kill := make(chan os.Signal, 1)
	signal.Notify(kill, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(kill)
	restoreSignals() // the context's own handler; kill has them now
	for _, n := range c.nodes {
		if n.proc.Running() {
			n.proc.Signal(syscall.SIGTERM)
		}
	}
	var errs []error
	deadline := time.After(time.Minute)
	for _, n := range c.nodes {
		select {
		case <-n.proc.Done():
		case <-kill:
			c.killAll()
			<-n.proc.Done()
		case <-deadline:
			// Go prints every goroutine's stack on SIGQUIT, into the
			// node's log: what the broker was waiting for.
			c.signalAll(syscall.SIGQUIT)
			select {
			case <-n.proc.Done():
			case <-time.After(5 * time.Second):
			}
			c.killAll()
			<-n.proc.Done()
			errs = append(errs, fmt.Errorf("node %d did not stop within a minute; its goroutines are in its log (SIGQUIT), then it was killed: %s", n.id, n.logPath))
		}
		// A broker that exited on its own earlier was reported then.
		if st := n.proc.State(); !n.gone && st.Exited() && st.ExitCode() != 0 {
			errs = append(errs, fmt.Errorf("node %d exited with status %d: %s", n.id, st.ExitCode(), n.lastLines()))
		}
		os.Remove(n.ready)
	}
	return errors.Join(errs...)
}

// killAll kills every running broker at once, without waiting for one
// before killing the next.
func (c *localCluster) killAll() { c.signalAll(os.Kill) }

// signalAll sends sig to every running broker.
func (c *localCluster) signalAll(sig os.Signal) {
	for _, n := range c.nodes {
		if n.proc.Running() {
			n.proc.Signal(sig)
		}
	}
}

// lastLines is the end of the node's log, for an error message: its
// last error line when it has one, else its last line.
func (n *clusterNode) lastLines() string {
	lines := strings.Split(strings.TrimSpace(n.proc.Log(0)), "\n")
	for i := len(lines) - 1; i >= 0 && i >= len(lines)-20; i-- {
		if strings.Contains(lines[i], "level=ERROR") || strings.HasPrefix(lines[i], "tandem serve:") {
			return lines[i]
		}
	}
	if len(lines[0]) == 0 {
		return "(empty log " + n.logPath + ")"
	}
	return lines[len(lines)-1]
}

// writeFileAtomic writes data to path through a rename, so that a reader
// never sees half of it.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tandem-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
