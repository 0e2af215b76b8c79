// Package netns runs processes of a test in Linux network namespaces of
// their own, on one bridge, and cuts the links between them with
// iptables, as Jepsen cuts the network between the nodes of a cluster
// while every process keeps running.
//
// Each host is a namespace with one veth on the bridge and an address
// in 198.18.K.0/24 (RFC 2544's benchmarking range: nothing on a real
// network uses it); the bridge has .254 of it in the root namespace, so
// that the test's own clients reach every host, and a cut names peer
// addresses only: a link between two hosts can be cut while clients
// still reach both. The bridge has no uplink and nothing routes the
// subnet anywhere else, so no packet of a test leaves the machine.
//
// Everything is named after the test process (tdm<pid>...), removed by
// t.Cleanup, and, should a test process die before its cleanup ran, by
// the next New, which sweeps the namespaces and links of processes that
// no longer exist.
package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// RequireEnv makes Require fail instead of skip: CI sets it, since its
// machines run the tests as root with ip and iptables installed.
const RequireEnv = "TANDEM_REQUIRE_NETNS"

// Available says why network namespaces cannot be made here, or nil: not
// root, ip or iptables missing, or the kernel refusing a namespace.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("not root: network namespaces and iptables need CAP_NET_ADMIN")
	}
	for _, bin := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is not installed (apt-get install -y iproute2 iptables): %w", bin, err)
		}
	}
	return nil
}

// Require skips the test when Available reports a reason, or fails it
// when RequireEnv is set.
func Require(t testing.TB) {
	t.Helper()
	err := Available()
	switch {
	case err == nil:
	case os.Getenv(RequireEnv) != "":
		t.Fatalf("network partitions cannot be made here (%s is set): %v", RequireEnv, err)
	default:
		t.Skipf("network partitions cannot be made here: %v", err)
	}
}

// Host is one network namespace on the bridge.
type Host struct {
	N    int    // 1..n, the last byte of its address
	Name string // the namespace's name
	IP   string
	veth string // the root side of its veth
}

// Net is a bridge with hosts on it, and the cuts made between them.
type Net struct {
	t        testing.TB
	bridge   string
	prefix   string // of the subnet: "198.18.K."
	iptables string // the binary whose rules work in the namespaces
	// Client is the root namespace's address on the bridge: where the
	// test's clients come from.
	Client string
	Hosts  []*Host // Hosts[i] is host i+1

	mu    sync.Mutex
	rules map[int][]string // host → the rules added since the last Heal
}

// names are what this package makes: tdm<pid>b<k> (bridge),
// tdm<pid>v<k>h<i> (root side of a veth), tdm<pid>n<k>h<i> (namespace).
var names = regexp.MustCompile(`^tdm(\d+)[bvn](\d+)`)

var seq struct {
	sync.Mutex
	n int
}

// New makes a bridge and n hosts on it, each a namespace with lo and
// its veth up, and removes them when the test ends. It sweeps what dead
// test processes left first. The test must have called Require.
func New(t testing.TB, n int) *Net {
	t.Helper()
	if n < 1 || n > 250 {
		t.Fatalf("netns: %d hosts: want 1 to 250", n)
	}
	if err := Sweep(); err != nil {
		t.Logf("netns: sweeping what earlier runs left: %v", err)
	}
	seq.Lock()
	seq.n++
	k := seq.n
	seq.Unlock()
	pid := os.Getpid()
	nt := &Net{t: t, bridge: fmt.Sprintf("tdm%db%d", pid, k), rules: map[int][]string{}}
	t.Cleanup(nt.remove)
	third, err := freeSubnet(pid + k)
	if err != nil {
		t.Fatal(err)
	}
	nt.prefix = fmt.Sprintf("198.18.%d.", third)
	nt.Client = nt.prefix + "254"
	if err := nt.makeBridge(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		h := &Host{N: i, Name: fmt.Sprintf("tdm%dn%dh%d", pid, k, i), IP: nt.prefix + strconv.Itoa(i), veth: fmt.Sprintf("tdm%dv%dh%d", pid, k, i)}
		nt.Hosts = append(nt.Hosts, h)
		if err := nt.makeHost(h); err != nil {
			t.Fatal(err)
		}
	}
	if nt.iptables, err = pickIPTables(nt.Hosts[0].Name); err != nil {
		t.Fatal(err)
	}
	return nt
}

func (nt *Net) makeBridge() error {
	if err := run("ip", "link", "add", nt.bridge, "type", "bridge"); err != nil {
		return err
	}
	// With br_netfilter loaded, bridged frames would go through the root
	// namespace's FORWARD chain, whose policy is the machine's: this
	// bridge's traffic is the test's alone.
	run("ip", "link", "set", nt.bridge, "type", "bridge", "nf_call_iptables", "0")
	if err := run("ip", "addr", "add", nt.Client+"/24", "dev", nt.bridge); err != nil {
		return err
	}
	return run("ip", "link", "set", nt.bridge, "up")
}

func (nt *Net) makeHost(h *Host) error {
	steps := [][]string{
		{"ip", "netns", "add", h.Name},
		{"ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.Name},
		{"ip", "link", "set", h.veth, "master", nt.bridge, "up"},
		{"ip", "-n", h.Name, "addr", "add", h.IP + "/24", "dev", "eth0"},
		{"ip", "-n", h.Name, "link", "set", "eth0", "up"},
		{"ip", "-n", h.Name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return fmt.Errorf("host %d: %w", h.N, err)
		}
	}
	return nil
}

// pickIPTables finds the iptables whose rules work in a namespace: the
// nf_tables one where the kernel has it, else the legacy one.
func pickIPTables(ns string) (string, error) {
	var errs error
	for _, bin := range []string{"iptables", "iptables-legacy"} {
		if _, err := exec.LookPath(bin); err != nil {
			continue
		}
		err := run("ip", "netns", "exec", ns, bin, "-w", "-S")
		if err == nil {
			return bin, nil
		}
		errs = errors.Join(errs, err)
	}
	return "", fmt.Errorf("netns: no iptables works in a namespace: %w", errs)
}

// freeSubnet picks K of 198.18.K.0/24 that no address of the root
// namespace uses (another test process's bridge), starting from seed.
func freeSubnet(seed int) (int, error) {
	out, err := exec.Command("ip", "-4", "-o", "addr").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("ip -4 -o addr: %w: %s", err, out)
	}
	for i := range 250 {
		k := (seed+i)%250 + 1
		if !strings.Contains(string(out), fmt.Sprintf(" 198.18.%d.", k)) {
			return k, nil
		}
	}
	return 0, errors.New("netns: every 198.18.K.0/24 is in use")
}

// Exec is the command prefix that runs a program in host h's namespace,
// for tandemtest.ProcSpec.Wrap.
func (nt *Net) Exec(h int) []string { return []string{"ip", "netns", "exec", nt.Host(h).Name} }

// Host is host h (1..n).
func (nt *Net) Host(h int) *Host { return nt.Hosts[h-1] }

// IP is host h's address.
func (nt *Net) IP(h int) string { return nt.Host(h).IP }

// remove deletes the namespaces and the bridge (the veths go with their
// namespaces). Processes still in a namespace keep it alive until they
// exit; the tests' processes are stopped by cleanups registered after
// this one, so they run first.
func (nt *Net) remove() {
	for _, h := range nt.Hosts {
		if err := run("ip", "netns", "del", h.Name); err != nil {
			nt.t.Logf("netns: %v", err)
		}
		run("ip", "link", "del", h.veth) // gone with the namespace, normally
	}
	if err := run("ip", "link", "del", nt.bridge); err != nil {
		nt.t.Logf("netns: %v", err)
	}
}

// Sweep removes the namespaces, bridges and veths that test processes
// no longer running left behind (killed before their cleanups ran).
func Sweep() error {
	var errs error
	seq.Lock()
	made := seq.n
	seq.Unlock()
	gone := func(name string) bool {
		m := names.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		if pid, _ := strconv.Atoi(m[1]); pid == os.Getpid() {
			// Ours by name: a dead process with our PID left it,
			// unless this process made it.
			k, _ := strconv.Atoi(m[2])
			return k > made
		}
		_, err := os.Stat("/proc/" + m[1])
		return os.IsNotExist(err)
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && gone(f[0]) {
				errs = errors.Join(errs, run("ip", "netns", "del", f[0]))
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if gone(name) {
				errs = errors.Join(errs, run("ip", "link", "del", name))
			}
		}
	}
	return errs
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
