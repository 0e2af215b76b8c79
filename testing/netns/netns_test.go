package netns_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/testing/netns"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// helperEnv makes the test binary a helper process in a namespace:
// "listen ADDR" echoes a line per connection, "dial ADDR" exits 0 if
// ADDR echoes within a second.
const helperEnv = "TANDEM_NETNS_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(h))
	}
	os.Exit(m.Run())
}

func helper(cmd string) int {
	verb, addr, _ := strings.Cut(cmd, " ")
	switch verb {
	case "listen":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("ready")
		for {
			c, err := ln.Accept()
			if err != nil {
				return 1
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				c.Write([]byte(line))
			}()
		}
	case "dial":
		if err := echo(addr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	return 2
}

// echo connects to addr and has a line echoed, within a second.
func echo(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "ping\n" {
		return fmt.Errorf("echo from %s: %q, %v", addr, line, err)
	}
	return nil
}

// listen starts an echo server on port 7000 of host h.
func listen(t *testing.T, nt *netns.Net, h int) {
	t.Helper()
	cmd := exec.Command(nt.Exec(h)[0], append(nt.Exec(h)[1:], os.Args[0], "-test.run=^$")...)
	cmd.Env = append(os.Environ(), helperEnv+"=listen "+nt.IP(h)+":7000")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("helper on host %d: %q", h, line)
	}
}

// reaches reports whether host a reaches host b's echo server.
func reaches(nt *netns.Net, a, b int) bool {
	cmd := exec.Command(nt.Exec(a)[0], append(nt.Exec(a)[1:], os.Args[0], "-test.run=^$")...)
	cmd.Env = append(os.Environ(), helperEnv+"=dial "+nt.IP(b)+":7000")
	return cmd.Run() == nil
}

// TestCuts: three hosts with an echo server each; every cut stops
// exactly the links it names, the test's clients reach a host cut from
// its peers, and Heal restores everything.
func TestCuts(t *testing.T) {
	tandemtest.Long(t) // network namespaces and processes: the full tier only
	netns.Require(t)
	var made []string
	t.Run("cuts", func(t *testing.T) {
		nt := netns.New(t, 3)
		for _, h := range nt.Hosts {
			made = append(made, h.Name)
			listen(t, nt, h.N)
		}
		client := func(h int) bool { return echo(nt.IP(h)+":7000") == nil }
		want := func(what string, got, want bool) {
			t.Helper()
			if got != want {
				t.Errorf("%s: reached %v, want %v\n%s", what, got, want, nt.Rules())
			}
		}
		all := func(what string) {
			t.Helper()
			for _, a := range nt.Hosts {
				want(what+": client to "+a.IP, client(a.N), true)
				for _, b := range nt.Hosts {
					if a != b {
						want(fmt.Sprintf("%s: %d to %d", what, a.N, b.N), reaches(nt, a.N, b.N), true)
					}
				}
			}
		}
		all("before any cut")

		must(t, nt.Isolate(2))
		want("isolated 2: 1 to 2", reaches(nt, 1, 2), false)
		want("isolated 2: 2 to 3", reaches(nt, 2, 3), false)
		want("isolated 2: 1 to 3", reaches(nt, 1, 3), true)
		want("isolated 2: client to 2", client(2), true)
		must(t, nt.Heal())
		all("healed")

		must(t, nt.DropConns(1, 2))
		want("1 cannot reach 2: 1 to 2", reaches(nt, 1, 2), false)
		want("1 cannot reach 2: 2 to 1", reaches(nt, 2, 1), true)
		must(t, nt.CutClients(3))
		want("clients cut from 3", client(3), false)
		want("clients cut from 3: 1 to 3", reaches(nt, 1, 3), true)
		must(t, nt.Heal())
		all("healed again")
	})
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range made {
		if strings.Contains(string(out), name) {
			t.Errorf("namespace %s outlived its test", name)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
