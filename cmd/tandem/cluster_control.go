package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
)

// A running `tandem cluster` takes commands from two places: lines on its
// stdin ("r 2", "restart 2") and connections to the unix socket
// DIR/control.sock, where `tandem cluster restart N --data-dir DIR` writes
// "restart N\n" and reads one line back: "ok: ..." or "error: ...". A
// socket, not a request file, so that the command hears at once whether
// a cluster runs there and how the restart went; it exists while the
// cluster runs (a stale one, from a cluster killed -9, is replaced).

// controlSocket is the control socket of the cluster in dir.
func controlSocket(dir string) string { return filepath.Join(dir, "control.sock") }

// restartRequest asks the foreground cluster to restart a node.
type restartRequest struct {
	node  int
	reply chan<- restartResult
}

// restartResult is what a restart says: a line for the operator, or why
// it failed.
type restartResult struct {
	msg string
	err error
}

// ask sends a restart of node through requests and waits for its result.
func ask(ctx context.Context, requests chan<- restartRequest, node int) (string, error) {
	reply := make(chan restartResult, 1)
	select {
	case requests <- restartRequest{node: node, reply: reply}:
	case <-ctx.Done():
		return "", errors.New("the cluster is stopping")
	}
	r := <-reply
	return r.msg, r.err
}

// parseRestart reads "r N" or "restart N".
func parseRestart(line string) (int, bool) {
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "r" && f[0] != "restart" {
		return 0, false
	}
	n, err := strconv.Atoi(f[1])
	return n, err == nil
}

// readRestartKeys reads "r N" lines from in until it ends (or ctx does)
// and answers on out. A background job whose terminal read fails
// (SIGTTIN is ignored, the read returns EIO) stops reading.
func readRestartKeys(ctx context.Context, in io.Reader, out io.Writer, requests chan<- restartRequest) {
	ignoreTTIN()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		node, ok := parseRestart(line)
		if !ok {
			fmt.Fprintf(out, "tandem cluster: %q: type r N (or restart N) to restart node N; Ctrl-C stops the cluster\n", line)
			continue
		}
		msg, err := ask(ctx, requests, node)
		if err != nil {
			fmt.Fprintf(out, "tandem cluster: restart %d: %v\n", node, err)
			continue
		}
		fmt.Fprintf(out, "tandem cluster: %s\n", msg)
	}
}

// listenControl serves the control socket of dir until the returned
// function is called.
func listenControl(dir string, requests chan<- restartRequest) (func(), error) {
	path := controlSocket(dir)
	os.Remove(path) // a stale one: this process owns the data dir now
	ln, err := net.Listen("unix", path)
	if err != nil {
		return func() {}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serveControl(ctx, conn, requests)
		}
	}()
	return func() { cancel(); ln.Close(); os.Remove(path) }, nil
}

func serveControl(ctx context.Context, conn net.Conn, requests chan<- restartRequest) {
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(io.LimitReader(conn, 256)).ReadString('\n')
	if err != nil {
		return
	}
	conn.SetReadDeadline(time.Time{})
	node, ok := parseRestart(line)
	if !ok {
		fmt.Fprintf(conn, "error: %q is not a command: restart N\n", strings.TrimSpace(line))
		return
	}
	msg, err := ask(ctx, requests, node)
	if err != nil {
		fmt.Fprintf(conn, "error: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	fmt.Fprintf(conn, "ok: %s\n", msg)
}

const clusterRestartDoc = `Restarts node N of the tandem cluster running on --data-dir DIR (as
typing "r N" in its terminal does): a node that exited is started again,
a running one is stopped first with a controlled shutdown. It returns
once the node serves again.

Usage: tandem cluster restart N --data-dir DIR

The cluster must have been started with --data-dir DIR (or its temporary
directory, which it prints, given as DIR). Exit status: 0 once the node
serves, 1 when there is no cluster there or the node does not start, 2 for
a wrong command line.
`

// clusterRestart is `tandem cluster restart N --data-dir DIR`.
func clusterRestart(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlags("cluster restart", clusterRestartDoc)
	dir := fs.String("data-dir", "", "the data dir of the running cluster (required)")
	timeout := fs.Duration("timeout", 3*time.Minute, "give up when the node does not serve within this long")
	if code, done := fs.ParseArgs(args, stdout, stderr); done {
		return code
	}
	node, err := strconv.Atoi(fs.Arg(0))
	switch {
	case fs.NArg() != 1 || err != nil || node < 1:
		return cli.Exit(stderr, fs.Name(), cli.UsageErrorf("name one node by its number: tandem cluster restart N --data-dir DIR"))
	case *dir == "":
		return cli.Exit(stderr, fs.Name(), cli.UsageErrorf("--data-dir DIR is required: the data dir of the running cluster"))
	}
	if _, err := os.Stat(filepath.Join(*dir, "cluster.json")); err != nil {
		return cli.Exit(stderr, fs.Name(), cli.UsageErrorf("--data-dir %s holds no tandem cluster (no cluster.json)", *dir))
	}
	conn, err := net.DialTimeout("unix", controlSocket(*dir), 5*time.Second)
	if err != nil {
		return cli.Exit(stderr, fs.Name(), fmt.Errorf("no tandem cluster is running on %s (%s: %s)", *dir, controlSocket(*dir), cli.DialCause(err)))
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(*timeout))
	fmt.Fprintf(conn, "restart %d\n", node)
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return cli.Exit(stderr, fs.Name(), fmt.Errorf("node %d: no answer from the cluster on %s: %v", node, *dir, err))
	}
	line = strings.TrimSpace(line)
	if msg, ok := strings.CutPrefix(line, "ok: "); ok {
		fmt.Fprintln(stdout, msg)
		return 0
	}
	return cli.Exit(stderr, fs.Name(), errors.New(strings.TrimPrefix(line, "error: ")))
}
