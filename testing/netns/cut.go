package netns

import (
	"fmt"
	"slices"
	"strings"
)

// Cuts are iptables rules in the hosts' own namespaces, matching peer
// addresses only: a host cut from its peers still answers the test's
// clients (Client) unless CutClients says otherwise. Rules DROP, as a
// partition does: nothing tells the sender, whose connections stall
// until its own timeouts give up, and resume if the link heals first.

// Drop drops every packet host a sends to host b, one way. TCP needs
// both ways, so every connection between them stalls, whoever opened
// it; DropConns is the cut that only one side notices.
func (nt *Net) Drop(a, b int) error {
	return nt.rule(a, "OUTPUT", "-d", nt.IP(b), "-j", "DROP")
}

// DropConns is an asymmetric cut at the level of connections: those
// host a opens to host b carry nothing (a's packets in them are
// dropped), while those b opens to a work both ways. a cannot reach b,
// b reaches a.
func (nt *Net) DropConns(a, b int) error {
	return nt.rule(a, "OUTPUT", "-d", nt.IP(b), "-m", "conntrack", "--ctdir", "ORIGINAL", "-j", "DROP")
}

// Cut cuts both ways between every host of one group and every host of
// the other.
func (nt *Net) Cut(g1, g2 []int) error {
	for _, a := range g1 {
		for _, b := range g2 {
			if err := nt.Drop(a, b); err != nil {
				return err
			}
			if err := nt.Drop(b, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// Isolate cuts host h from every other host, both ways.
func (nt *Net) Isolate(h int) error { return nt.Cut([]int{h}, nt.Others(h)) }

// CutClients cuts host h from the test's clients, both ways.
func (nt *Net) CutClients(h int) error {
	if err := nt.rule(h, "INPUT", "-s", nt.Client, "-j", "DROP"); err != nil {
		return err
	}
	return nt.rule(h, "OUTPUT", "-d", nt.Client, "-j", "DROP")
}

// Others are the hosts other than those named.
func (nt *Net) Others(hs ...int) []int {
	var out []int
	for _, h := range nt.Hosts {
		if !slices.Contains(hs, h.N) {
			out = append(out, h.N)
		}
	}
	return out
}

// Heal removes every cut.
func (nt *Net) Heal() error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	for h := range nt.rules {
		if err := run(append(nt.Exec(h), nt.iptables, "-w", "-F")...); err != nil {
			return fmt.Errorf("netns: heal host %d: %w", h, err)
		}
		delete(nt.rules, h)
	}
	return nil
}

// Rules describes the cuts in place, host by host, for logs.
func (nt *Net) Rules() string {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	var b strings.Builder
	for _, h := range nt.Hosts {
		for _, r := range nt.rules[h.N] {
			fmt.Fprintf(&b, "host %d: %s\n", h.N, r)
		}
	}
	return b.String()
}

func (nt *Net) rule(h int, chain string, match ...string) error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	args := append([]string{nt.iptables, "-w", "-A", chain}, match...)
	if err := run(append(nt.Exec(h), args...)...); err != nil {
		return fmt.Errorf("netns: cut on host %d: %w", h, err)
	}
	nt.rules[h] = append(nt.rules[h], strings.Join(args[2:], " "))
	return nil
}
