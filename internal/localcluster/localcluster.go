// Package localcluster holds what running Tandem brokers as processes on
// this machine takes, for `tandem cluster`, the benchmark harness and the
// process clusters of tests alike: free ports and the
// controller.quorum.voters value of a cluster, a broker process with its
// log (started, waited on until it serves, stopped, killed), and waiting
// until a cluster lists every broker as live.
//
// It imports no "testing", so that the tandem binary can use it. What its
// users do each their own way stays with them: the command line and
// environment of a broker, its process attributes, how it is asked to
// stop, retrying a start whose port was taken meanwhile.
package localcluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// FreeAddrs returns n addresses on host whose ports were free a moment
// ago. All n are held open together, so that they differ, and closed
// before it returns: a broker binds its own, and another process may take
// one in between (a caller that cannot afford that retries).
func FreeAddrs(host string, n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	out := make([]string, n)
	for i := range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("free port on %s: %w", host, err)
		}
		lns = append(lns, ln)
		out[i] = ln.Addr().String()
	}
	return out, nil
}

// Voters is the controller.quorum.voters value of a cluster whose node
// i+1 serves the metadata quorum on addrs[i].
func Voters(addrs []string) string {
	vs := make([]string, len(addrs))
	for i, a := range addrs {
		vs[i] = fmt.Sprintf("%d@%s", i+1, a)
	}
	return strings.Join(vs, ",")
}

// WaitLive waits until Metadata through seeds lists n brokers: each
// registered with the controller and unfenced. After each attempt that
// falls short it calls check, if not nil, whose error ends the wait (a
// broker that exited will not join). When ctx ends first, the error says
// what the last attempt saw.
func WaitLive(ctx context.Context, seeds []string, n int, check func() error) error {
	for {
		md, err := brokerMetadata(ctx, seeds)
		if err == nil && len(md.Brokers) == n {
			return nil
		}
		last := err
		if err == nil {
			last = fmt.Errorf("%d of %d brokers live", len(md.Brokers), n)
		}
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not formed: %w", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// brokerMetadata asks seeds for the live brokers, within a few seconds: a
// fresh client each time, so that nothing it learnt from a cluster still
// forming (or retries) outlives the attempt.
func brokerMetadata(ctx context.Context, seeds []string) (kadm.Metadata, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTimeout(time.Second))
	if err != nil {
		return kadm.Metadata{}, err
	}
	defer cl.Close()
	return kadm.NewClient(cl).BrokerMetadata(ctx)
}
