package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/internal/localcluster"
	"github.com/tandem-kafka/tandem/testing/faultproxy"
)

// mirrorPair is a source and a destination Tandem broker, each in a child
// process; the destination mirrors the source (mirror "bench") directly or
// across a WAN proxy.
type mirrorPair struct {
	src, dst *brokerProc
	// wan, when set, is the only way the destination reaches the source:
	// the source advertises it on a listener of its own (MIRROR), so
	// that the mirror's bootstrap and per-broker connections all cross
	// it, while the harness's clients use the source's first listener.
	wan   *faultproxy.WAN
	admin *kgo.Client // the destination's, speaking the mirror APIs
	dir   string
}

// wanLink is the shape of the link a mirror pair is built across.
type wanLink struct {
	RTT    time.Duration
	Window int64 // bytes per connection and direction
}

const benchMirror = "bench"

// startMirrorPair starts the two brokers; link nil: no proxy. The mirror
// is created later (createMirror), so that a workload can measure the
// destination alone first.
func (r *Runner) startMirrorPair(ctx context.Context, dir string, link *wanLink) (mp *mirrorPair, err error) {
	argv, err := r.brokerArgv()
	if err != nil {
		return nil, err
	}
	mp = &mirrorPair{dir: dir}
	defer func() {
		if err != nil {
			mp.close()
		}
	}()
	srcProps := r.Props
	if link != nil {
		if srcProps, err = mp.listenWAN(r.Props, *link); err != nil {
			return mp, err
		}
	}
	base := filepath.Base(dir)
	if mp.src, err = spawnBroker(ctx, argv, "tandem", filepath.Join(dir, base+"-source"), r.Sync, srcProps, r.ProfileDir); err != nil {
		return mp, fmt.Errorf("source: %w", err)
	}
	if mp.dst, err = spawnBroker(ctx, argv, "tandem", filepath.Join(dir, base+"-destination"), r.Sync, r.Props, r.ProfileDir); err != nil {
		return mp, fmt.Errorf("destination: %w", err)
	}
	mp.admin, err = kgo.NewClient(kgo.SeedBrokers(mp.dst.Addr), kgo.RetryTimeout(20*time.Second), mirrorClientOpt())
	return mp, err
}

// listenWAN starts the proxy in front of a free port that the source
// will listen on as MIRROR, and returns the source's properties.
func (mp *mirrorPair) listenWAN(props map[string]string, link wanLink) (map[string]string, error) {
	addrs, err := localcluster.FreeAddrs("127.0.0.1", 1)
	if err != nil {
		return nil, err
	}
	if mp.wan, err = faultproxy.ListenWAN(addrs[0], link.RTT, link.Window); err != nil {
		return nil, fmt.Errorf("WAN proxy: %w", err)
	}
	p := maps.Clone(props)
	if p == nil {
		p = map[string]string{}
	}
	p["listeners"] = "PLAINTEXT://127.0.0.1:0,MIRROR://" + addrs[0]
	p["advertised.listeners"] = "MIRROR://" + mp.wan.Addr()
	p["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,MIRROR:PLAINTEXT"
	return p, nil
}

// sourceForMirror is the source's address as the mirror is told it.
func (mp *mirrorPair) sourceForMirror() string {
	if mp.wan != nil {
		return mp.wan.Addr()
	}
	return mp.src.Addr
}

// createMirror creates the mirror on the destination with configs (the
// bootstrap servers are added).
func (mp *mirrorPair) createMirror(ctx context.Context, configs map[string]string) error {
	c := maps.Clone(configs)
	if c == nil {
		c = map[string]string{}
	}
	c["bootstrap.servers"] = mp.sourceForMirror()
	if err := createMirrorWith(ctx, mp.admin, benchMirror, c); err != nil {
		return fmt.Errorf("create mirror: %w", err)
	}
	return nil
}

// addTopic creates topic on the source and adds it to the mirror.
func (mp *mirrorPair) addTopic(ctx context.Context, topic string, partitions int32) error {
	if err := createTopic(ctx, mp.src.Addr, topic, partitions, 1); err != nil {
		return err
	}
	if err := addMirrorTopic(ctx, mp.admin, topic, benchMirror); err != nil {
		return fmt.Errorf("add %s to the mirror: %w", topic, err)
	}
	return nil
}

// stats returns the source's and the destination's process counters.
func (mp *mirrorPair) stats() (src, dst procStats, err error) {
	src, err1 := readProc(mp.src.Pid)
	dst, err2 := readProc(mp.dst.Pid)
	return src, dst, errors.Join(err1, err2)
}

// close stops what started and removes the data directories.
func (mp *mirrorPair) close() error {
	var errs []error
	if mp.admin != nil {
		mp.admin.Close()
	}
	for _, b := range []*brokerProc{mp.dst, mp.src} {
		if b != nil {
			errs = append(errs, b.Stop())
		}
	}
	if mp.wan != nil {
		mp.wan.Close()
	}
	os.RemoveAll(mp.dir)
	return errors.Join(errs...)
}

// tcpWindow is the receive window Linux autotunes a connection up to
// (the third field of net.ipv4.tcp_rmem): what a long link's TCP
// connection gets by default on this machine. 6 MiB, the kernel's default,
// when it cannot be read.
func tcpWindow() int64 { return sysctlMax("/proc/sys/net/ipv4/tcp_rmem", 6<<20) }

// tcpSendBuffer is the most Linux autotunes a send buffer to (the third
// field of net.ipv4.tcp_wmem, 4 MiB by default): a sender keeps its
// unacknowledged bytes there, so it bounds the bytes in flight too.
func tcpSendBuffer() int64 { return sysctlMax("/proc/sys/net/ipv4/tcp_wmem", 4<<20) }

// sysctlMax reads the third field of a tcp_rmem-like file, def if it
// cannot.
func sysctlMax(path string, def int64) int64 {
	b, err := os.ReadFile(path)
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if n, err := strconv.ParseInt(f[2], 10, 64); err == nil && n > 0 {
				return n
			}
		}
	}
	return def
}
