package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Proc is a broker process that Start started, with its log.
type Proc struct {
	cmd  *exec.Cmd
	log  string        // the file its stdout and stderr go to
	done chan struct{} // closed once it has exited
	err  error         // what Wait returned, once done is closed
}

// ErrExited is what WaitFile returns when the process exits first.
var ErrExited = errors.New("process exited")

// Start starts cmd, whose command line, environment and process
// attributes are the caller's, with its stdout and stderr appended to the
// file logPath: a node started again keeps one log. It returns once the
// process runs; WaitFile waits until it serves.
func Start(cmd *exec.Cmd, logPath string) (*Proc, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The process gets its own descriptor of the log; ours is not needed
	// past Start.
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID is the process's ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Err is what waiting for the process returned: nil for exit status 0, an
// *exec.ExitError otherwise. It is nil while the process runs.
func (p *Proc) Err() error {
	if p.Running() {
		return nil
	}
	return p.err
}

// State is how the process ended, nil while it runs.
func (p *Proc) State() *os.ProcessState {
	if p.Running() {
		return nil
	}
	return p.cmd.ProcessState
}

// Log is the end of the process's log file: its last n bytes, or all of
// it when n is 0.
func (p *Proc) Log(n int) string {
	data, _ := os.ReadFile(p.log)
	if n > 0 && len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

// WaitFile waits until the file path exists and returns what it holds:
// a broker writes its ready file once it serves, and the file is written
// whole (through a rename). It returns ErrExited when the process exits
// first, and ctx's error when ctx ends first.
func (p *Proc) WaitFile(ctx context.Context, path string) ([]byte, error) {
	for {
		data, err := os.ReadFile(path)
		if err == nil {
			return data, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("wait for %s: %w", path, err)
		}
		select {
		case <-p.done:
			return nil, ErrExited
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// ExitWithin waits up to timeout for the process to exit, after the caller
// asked it to; then it kills it (SIGKILL) and waits for that. It reports
// whether the process exited on its own.
func (p *Proc) ExitWithin(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		return false
	}
}

// Stop sends SIGTERM, a broker's controlled shutdown, and waits up to
// timeout for the process to exit; then it kills it. It returns what Err
// does (nil for exit status 0) or, when the process had to be killed, an
// error saying so.
func (p *Proc) Stop(timeout time.Duration) error {
	p.Signal(syscall.SIGTERM)
	if !p.ExitWithin(timeout) {
		return fmt.Errorf("did not exit within %v of SIGTERM; killed", timeout)
	}
	return p.err
}

// Kill kills the process with SIGKILL, as a crash, and waits until it is
// gone.
func (p *Proc) Kill() {
	p.cmd.Process.Kill()
	<-p.done
}
