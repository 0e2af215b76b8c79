package localcluster

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFreeAddrs(t *testing.T) {
	addrs, err := FreeAddrs("127.0.0.1", 5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil || host != "127.0.0.1" || seen[a] {
			t.Fatalf("addresses %v: %s not a fresh 127.0.0.1 address (%v)", addrs, a, err)
		}
		seen[a] = true
		// Released: a broker can bind it.
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s not released: %v", a, err)
		}
		ln.Close()
	}
}

func TestVoters(t *testing.T) {
	got := Voters([]string{"127.0.0.1:9192", "127.0.0.1:9193", "127.0.0.1:9194"})
	if want := "1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194"; got != want {
		t.Fatalf("Voters = %q, want %q", got, want)
	}
}

// start runs the shell script in a process of the test, killed at its
// end if still running.
func start(t *testing.T, script string, args ...string) (*Proc, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "proc.log")
	p, err := Start(exec.Command("sh", append([]string{"-c", script}, args...)...), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.Running() {
			p.Kill()
		}
	})
	return p, log
}

// TestProcServes: WaitFile returns what the process wrote; Stop ends it
// with SIGTERM, and a second Start of the same log appends to it.
func TestProcServes(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	// exec: sleep is the process itself, so that no child outlives a kill.
	const script = `echo starting; echo 127.0.0.1:1 > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 60`
	p, log := start(t, script, ready)
	data, err := p.WaitFile(context.Background(), ready)
	if err != nil || string(data) != "127.0.0.1:1\n" {
		t.Fatalf("WaitFile = %q, %v", data, err)
	}
	if !p.Running() || p.State() != nil || p.Err() != nil || p.PID() <= 0 {
		t.Fatalf("serving process: running %v, state %v, err %v, pid %d", p.Running(), p.State(), p.Err(), p.PID())
	}
	if err := p.Stop(10 * time.Second); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("Stop = %v, want the exit by SIGTERM", err)
	}
	if p.Running() || p.State() == nil {
		t.Fatalf("stopped process: running %v, state %v", p.Running(), p.State())
	}

	q, err := Start(exec.Command("sh", "-c", "echo again"), log)
	if err != nil {
		t.Fatal(err)
	}
	<-q.Done()
	if got := q.Log(0); got != "starting\nagain\n" {
		t.Fatalf("log %q, want both runs", got)
	}
	if got := q.Log(6); got != "again\n" {
		t.Fatalf("Log(6) = %q", got)
	}
}

// TestProcExitsFirst: WaitFile reports a process that exits before
// writing the file, and the process's exit.
func TestProcExitsFirst(t *testing.T) {
	p, _ := start(t, "echo broken >&2; exit 3")
	_, err := p.WaitFile(context.Background(), filepath.Join(t.TempDir(), "ready"))
	if !errors.Is(err, ErrExited) {
		t.Fatalf("WaitFile = %v, want ErrExited", err)
	}
	if code := p.State().ExitCode(); code != 3 || p.Err() == nil {
		t.Fatalf("exit code %d, err %v; want 3", code, p.Err())
	}
	if got := p.Log(0); got != "broken\n" {
		t.Fatalf("log %q", got)
	}
}

// TestProcKilled: WaitFile gives up with its context; a process that
// ignores SIGTERM is killed after Stop's timeout, and Kill ends one at
// once.
func TestProcKilled(t *testing.T) {
	p, _ := start(t, "trap '' TERM; exec sleep 60")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := p.WaitFile(ctx, filepath.Join(t.TempDir(), "ready")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFile = %v, want the context's deadline", err)
	}
	err := p.Stop(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed") || p.Running() {
		t.Fatalf("Stop = %v (running %v), want killed", err, p.Running())
	}

	q, _ := start(t, "exec sleep 60")
	q.Kill()
	if q.Running() || q.State().String() != "signal: killed" {
		t.Fatalf("after Kill: running %v, state %v", q.Running(), q.State())
	}
}

// TestWaitLive: with no broker at the seed, WaitLive says so when its
// context ends, and ends at once on check's error.
func TestWaitLive(t *testing.T) {
	addrs, err := FreeAddrs("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := WaitLive(ctx, addrs, 1, nil); err == nil || !strings.HasPrefix(err.Error(), "cluster not formed: ") {
		t.Fatalf("WaitLive = %v, want cluster not formed", err)
	}

	exited := errors.New("node 1 exited")
	checks := 0
	err = WaitLive(context.Background(), addrs, 1, func() error { checks++; return exited })
	if err != exited || checks != 1 {
		t.Fatalf("WaitLive = %v after %d checks, want check's error after one", err, checks)
	}
}
