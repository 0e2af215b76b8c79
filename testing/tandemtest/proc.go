package tandemtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/localcluster"
)

// Proc is a tandem binary running as a child process.
type Proc struct {
	t       testing.TB
	bin     string
	dataDir string
	extra   []string
	wrap    []string // the command the binary runs under, if any
	dir     string   // scratch: ready file, logs

	// Addr is the Kafka listener (host:port); it stays the same across
	// Restart. HTTPAddr is the /metrics and /healthz endpoint.
	Addr     string
	HTTPAddr string

	proc    *localcluster.Proc // the current (or last) process
	logPath string
	ready   string   // the --ready-file
	args    []string // of the current process
	starts  int
}

// StartProcess runs `tandem serve` on dataDir with a free 127.0.0.1 port
// (the broker binds port 0 and reports the bound address through
// --ready-file) and returns once the broker answers ApiVersions. extraArgs
// are appended to serve's flags, so they may override the defaults. The
// process is killed at the end of the test if still running.
func StartProcess(t testing.TB, dataDir string, extraArgs ...string) *Proc {
	t.Helper()
	p := &Proc{t: t, bin: BuildBinary(t), dataDir: dataDir, extra: extraArgs, dir: t.TempDir()}
	t.Cleanup(p.cleanup)
	p.start()
	return p
}

func (p *Proc) start() {
	p.t.Helper()
	if err := p.launch(); err != nil {
		p.t.Fatal(err)
	}
	if err := p.await(); err != nil {
		p.t.Fatal(err)
	}
}

// launch starts the process; await waits until it serves. They are
// apart so that the nodes of a cluster, which wait for each other, start
// together.
func (p *Proc) launch() error {
	p.starts++
	p.ready = filepath.Join(p.dir, "ready.json")
	os.Remove(p.ready)
	args := []string{"serve", "--data-dir", p.dataDir, "--listen", "127.0.0.1:0",
		"--http", "127.0.0.1:0", "--ready-file", p.ready}
	args = append(args, p.extra...)
	if p.Addr != "" { // a restart keeps the address, so that clients reconnect
		args = append(args, "--listen", p.Addr)
	}
	p.args = args
	p.logPath = filepath.Join(p.dir, fmt.Sprintf("tandem-%d.log", p.starts))
	cmd := exec.Command(p.bin, args...)
	if len(p.wrap) > 0 {
		// The wrapper (ip netns exec NS, say) execs the binary in the
		// same process: the PID, the signals and Pdeathsig are the
		// broker's.
		cmd = exec.Command(p.wrap[0], append(append(p.wrap[1:len(p.wrap):len(p.wrap)], p.bin), args...)...)
	}
	// If the test process dies, the broker must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	proc, err := localcluster.Start(cmd, p.logPath)
	if err != nil {
		return fmt.Errorf("starting %s: %v", p.bin, err)
	}
	p.proc = proc
	return nil
}

func (p *Proc) await() error {
	info, err := p.waitReady(60 * time.Second)
	if err != nil {
		return fmt.Errorf("tandem serve %s: %v\n%s", strings.Join(p.args, " "), err, p.Logs())
	}
	p.Addr, p.HTTPAddr = info.Kafka, info.HTTP
	if err := p.ping(); err != nil {
		return fmt.Errorf("tandem at %s does not answer ApiVersions: %v\n%s", p.Addr, err, p.Logs())
	}
	return nil
}

// waitReady waits up to timeout for the ready file and returns the
// addresses it names.
func (p *Proc) waitReady(timeout time.Duration) (info struct{ Kafka, HTTP string }, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	data, err := p.proc.WaitFile(ctx, p.ready)
	switch {
	case errors.Is(err, localcluster.ErrExited):
		return info, fmt.Errorf("exited before ready: %v", p.proc.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return info, fmt.Errorf("not ready after %v", timeout)
	case err != nil:
		return info, err
	}
	if err := json.Unmarshal(data, &info); err != nil {
		return info, fmt.Errorf("ready file %q: %w", data, err)
	}
	return info, nil
}

func (p *Proc) ping() error {
	c, err := DialErr(p.Addr)
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := c.Request(kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		return err
	}
	if code := resp.(*kmsg.ApiVersionsResponse).ErrorCode; code != 0 {
		return fmt.Errorf("ApiVersions error code %d", code)
	}
	return nil
}

// PID is the process ID of the running broker.
func (p *Proc) PID() int { return p.proc.PID() }

// Running reports whether the process has not exited.
func (p *Proc) Running() bool { return p.proc.Running() }

// Kill9 kills the broker with SIGKILL and waits for it to be gone.
func (p *Proc) Kill9() {
	p.t.Helper()
	if !p.Running() {
		p.t.Fatalf("Kill9: broker not running (%v)", p.proc.Err())
	}
	p.proc.Kill()
}

// Pause stops the process with SIGSTOP: it keeps its sockets open but
// answers nothing, as a process stuck in a long GC pause or a frozen VM.
func (p *Proc) Pause() {
	p.t.Helper()
	if err := p.proc.Signal(syscall.SIGSTOP); err != nil {
		p.t.Fatalf("SIGSTOP: %v", err)
	}
}

// Resume continues a paused process with SIGCONT.
func (p *Proc) Resume() {
	p.t.Helper()
	if err := p.proc.Signal(syscall.SIGCONT); err != nil {
		p.t.Fatalf("SIGCONT: %v", err)
	}
}

// Stop sends SIGTERM and waits up to timeout for the process to exit. It
// returns the exit error (nil for exit status 0) or, if the process did not
// exit in time, an error after killing it.
func (p *Proc) Stop(timeout time.Duration) error {
	if !p.Running() {
		return fmt.Errorf("not running (exited: %v)", p.proc.Err())
	}
	return p.proc.Stop(timeout)
}

// Restart starts the broker again on the same data dir and Kafka address,
// after Kill9 or Stop.
func (p *Proc) Restart() {
	p.t.Helper()
	if p.Running() {
		p.t.Fatal("Restart: broker still running")
	}
	p.start()
}

// DataDir is the broker's data directory.
func (p *Proc) DataDir() string { return p.dataDir }

// MoveDataDir moves the data directory of a stopped broker to dir (a
// filesystem of the test's choosing: a small tmpfs, say), where Restart
// starts it next.
func (p *Proc) MoveDataDir(dir string) error {
	if p.proc != nil && p.Running() {
		return errors.New("MoveDataDir: broker still running")
	}
	if out, err := exec.Command("cp", "-a", p.dataDir+"/.", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s to %s: %v: %s", p.dataDir, dir, err, out)
	}
	p.dataDir = dir
	return nil
}

// OpenFiles is the number of file descriptors the process has open.
func (p *Proc) OpenFiles() (int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.PID()))
	return len(fds), err
}

// Logs returns what the current (or last) process wrote to stdout/stderr.
func (p *Proc) Logs() string {
	data, _ := os.ReadFile(p.logPath)
	return string(data)
}

// Mem returns the process's resident set size and its peak (VmRSS and
// VmHWM of /proc/PID/status), in bytes.
func (p *Proc) Mem() (rss, peak int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID()))
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		f := strings.Fields(v) // "12345 kB"
		if len(f) != 2 || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", k, err)
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			peak = n << 10
		}
	}
	return rss, peak, nil
}

func (p *Proc) cleanup() {
	if p.proc != nil && p.Running() {
		p.proc.Kill()
	}
	if p.t.Failed() {
		logs := p.Logs()
		// TANDEM_KEEP_LOGS=dir keeps the whole log of a failed test's
		// processes there; the test output has only its end.
		if dir := os.Getenv("TANDEM_KEEP_LOGS"); dir != "" {
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(p.logPath, "/"), "/", "_")), []byte(logs), 0o644)
		}
		if len(logs) > 8000 {
			logs = "...\n" + logs[len(logs)-8000:]
		}
		p.t.Logf("tandem log (%s):\n%s", p.logPath, logs)
	}
}
